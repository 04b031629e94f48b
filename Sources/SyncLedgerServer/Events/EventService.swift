import Foundation
import Logging
import NIOPosix
import SyncLedger

/// `GET /events`: live event streams over Server-Sent Events (``EventStream``) and WebSocket
/// (``EventSocket``), one ``EventHub`` for all of them.
///
/// Opening a stream is checked in this order, each failure the API's JSON error, before
/// anything is held for the connection: SigV4 (the same ``Authenticator`` as the Cognito API,
/// header or presigned URL), the parameters and scope (an identity sees only its own events),
/// `Last-Event-ID` (a position the log has reached), then the bounds (429).
final class EventService: Sendable {
    let ledger: Ledger
    let authenticator: Authenticator
    let hub: EventHub
    let admission: EventAdmission
    let metrics: EventMetrics
    let options: EventStreamOptions
    let logger: Logger
    /// A cluster node's shard map: event ids are then ``ShardPositions``, the same on every node.
    let shards: ShardMap?
    /// How a stream's client address is found for `--events-per-source` (`--trusted-proxy`).
    let sources: ClientSource

    init(ledger: Ledger, authenticator: Authenticator, options: EventStreamOptions, maxConnections: Int, logger: Logger, shards: ShardMap? = nil,
         sources: ClientSource = ClientSource()) {
        self.sources = sources
        self.shards = shards
        let metrics = EventMetrics()
        self.ledger = ledger
        self.authenticator = authenticator
        self.metrics = metrics
        self.options = options
        self.logger = logger
        hub = EventHub(ledger: ledger, keepAlive: options.keepAlive, metrics: metrics, logger: logger)
        admission = EventAdmission(perIdentity: options.perIdentity, perSource: options.perSource, total: options.total(maxConnections: maxConnections), metrics: metrics)
    }

    /// The path of the event stream.
    static let path = "/events"

    /// Runs the hub until the task is cancelled (the server stops).
    func run() async { await hub.run() }

    /// Sets the event streams' series at scrape time.
    func refreshMetrics(into scrape: inout MetricsScrape) {
        metrics.refresh(open: admission.open, subscribed: hub.subscribers, position: hub.position, into: &scrape)
    }

    /// Authenticates, authorizes and admits a request for a stream; the session it returns
    /// holds its place under the bounds until it is dropped.
    ///
    /// The request's ``WireRequest/peer`` (and, from a `--trusted-proxy`, its `X-Forwarded-For`)
    /// is its source for the per-source bound (no peer: not bounded).
    /// - Throws: ``WireError`` — 403 (not signed, bad signature, another identity), 400 (bad
    ///   parameters, a malformed or future `Last-Event-ID`, or one further back than
    ///   ``EventStreamOptions/maxResume``), 429 (a bound reached).
    func open(_ request: WireRequest) async throws -> (EventSession, Credential) {
        // The same source as the identity throttle's: the peer, or the client a trusted proxy
        // names; an IPv6 address counted as its /64 (``ClientSource``).
        let source = sources.source(of: request)
        guard request.header("host") != nil else {
            throw WireError.invalidParameter("the request has no Host header; HTTP/1.1 requires one and the signature covers it")
        }
        guard let query = SigV4.queryPairs(request.rawQuery) else {
            throw WireError.invalidParameter("the query string has a malformed percent-escape or is not UTF-8")
        }
        let credential = try authenticator.authenticate(request, queryPairs: query)
        let parsed = try EventRequest.parse(query: query, lastEventID: request.header("last-event-id"), credential: credential, shards: shards)
        let last = try ledger.lastSequence
        if let resume = parsed.resumeAfter, resume > last {
            throw WireError.invalidParameter("event id \(resume) is past the end of the log (\(last)): it was not sent by this server's ledger")
        }
        if let resume = parsed.resumeAfter { try checkResume(from: resume, last: last) }
        guard let shards else {
            let ticket = try admission.admit(parsed.scope.identityKey, source: source)
            let subscriber = EventSubscriber(id: hub.nextID(), scope: parsed.scope, capacity: options.queueCapacity)
            return (EventSession(service: self, subscriber: subscriber, ticket: ticket, credential: credential, start: parsed.resumeAfter ?? last), credential)
        }
        let positions: ShardPositions
        var start = last
        if let resume = parsed.resumeAtShards {
            try await waitForReplica(resume)
            positions = resume
            start = try resume.feedStart(on: ledger)
            try checkResume(from: start, last: try ledger.lastSequence)
        } else {
            positions = try ShardPositions.start(scope: parsed.scope, map: shards, ledger: ledger, at: last)
        }
        let ticket = try admission.admit(parsed.scope.identityKey, source: source)
        let subscriber = EventSubscriber(id: hub.nextID(), scope: parsed.scope, capacity: options.queueCapacity)
        return (EventSession(service: self, subscriber: subscriber, ticket: ticket, credential: credential, start: start, positions: positions), credential)
    }

    /// Refuses a resume that would read more than ``EventStreamOptions/maxResume`` entries of
    /// the feed to catch up (every entry since, whoever it is for): the client re-syncs instead.
    private func checkResume(from start: UInt64, last: UInt64) throws {
        guard last > start, last - start > options.maxResume else { return }
        metrics.refused(.resumeTooOld)
        throw WireError.invalidParameter("the event id is \(last - start) entries behind the end of the log, more than a stream replays (--events-max-resume \(options.maxResume)): re-sync the datasets (ListRecords with each one's last sync count) and open the stream without an event id")
    }

    /// A cluster stream resuming from positions this node's replica has not applied yet (the
    /// client came from a node further on) waits for it, 3 s at most in all.
    /// - Throws: 400 when it is still behind: the id was not sent by this cluster, or this node lags.
    private func waitForReplica(_ resume: ShardPositions) async throws {
        if let first = try await resume.waitForReplica(ledger, timeout: .seconds(3)) {
            throw WireError.invalidParameter("the event id names message \(first.wanted) of shard \(first.shard), which this node's replica has not reached (it applied \(first.applied)): it was not sent by this cluster, or this node lags; retry")
        }
    }

    /// Whether the credential a stream opened with may still be used: nil if so, else why not
    /// (revoked — `credentials revoke`, or a stored admin key once one is configured — or
    /// expired, a rotated key's grace included). Checked at each keep-alive; a failure to read
    /// the secrets keeps the stream.
    func recheck(_ credential: Credential) -> EventSubscriber.Ending? {
        let current: Credential?
        if let admin = authenticator.configuredAdmin, admin.accessKeyID == credential.accessKeyID {
            current = admin
        } else {
            var found: Credential?
            do {
                found = try ledger.secrets.credential(accessKeyID: credential.accessKeyID)
                // Cognito Identity's temporary credentials are not stored: their session token
                // carries them (as Authenticator.lookup reads them); a merged or deleted identity
                // or an expired token ends the stream.
                if found == nil, credential.sessionToken != nil {
                    found = try ledger.temporaryCredential(accessKeyID: credential.accessKeyID, sessionToken: credential.sessionToken)
                    if found == nil, let expires = credential.expires, expires <= Timestamp.now { return .expired }
                }
            } catch { return nil }
            current = authenticator.configuredAdmin != nil && found?.scope == .admin ? nil : found
        }
        guard let current, current.secretAccessKey == credential.secretAccessKey, current.scope == credential.scope else { return .revoked }
        return current.isExpired(at: .now) ? .expired : nil
    }

    /// The identity a credential names, for logs (nil for an admin).
    static func identity(_ credential: Credential) -> String? {
        if case .identity(_, let identity) = credential.scope { return identity }
        return nil
    }
}

/// One open stream's source of events: first the log from its start position (read by the
/// stream itself, in batches), then — once it reached the hub's position — what the hub
/// delivers. Owned by the stream's task.
struct EventSession: Sendable {
    let service: EventService
    let subscriber: EventSubscriber
    /// Its place under the bounds; given back when the session goes.
    let ticket: EventTicket
    let credential: Credential
    /// The position it started after: events after it are sent.
    let start: UInt64
    /// Every event up to here was taken.
    private(set) var cursor: UInt64
    private var joined = false
    /// On a cluster node, where the stream stands per shard: its event ids.
    private var positions: ShardPositions?
    /// The last id sent as a change-feed position (a single node's ids).
    private var lastID: UInt64

    init(service: EventService, subscriber: EventSubscriber, ticket: EventTicket, credential: Credential, start: UInt64,
         positions: ShardPositions? = nil) {
        self.service = service
        self.subscriber = subscriber
        self.ticket = ticket
        self.credential = credential
        self.start = start
        self.cursor = start
        self.positions = positions
        self.lastID = start
    }

    /// The id the stream opens with: where it starts.
    var initialID: String { positions?.text ?? "\(start)" }

    /// The next events to send, each with its id, a keep-alive, or the end.
    mutating func next() async -> EventSubscriber.Batch {
        var batch = await nextEvents()
        guard batch.ending == nil else { return batch }
        do { try label(&batch) } catch {
            service.logger.error("an event stream could not read the shard index", metadata: ["error": "\(error)"])
            subscriber.end(.failed)
            return .init(ending: .failed)
        }
        return batch
    }

    /// Gives `batch`'s events their ids (and the keep-alive its id when it moved): on a single
    /// node their feed positions; on a cluster node the stream's shard positions after each —
    /// dropping an event whose shard position was sent before (a resumed stream reads the feed
    /// from the earliest shard's place on).
    private mutating func label(_ batch: inout EventSubscriber.Batch) throws {
        guard var positions else {
            batch.ids = batch.events.map { "\($0.sequence)" }
            if let event = batch.events.last { lastID = event.sequence }
            if let position = batch.keepAlive, position > lastID {
                batch.keepAliveID = "\(position)"
                lastID = position
            }
            return
        }
        guard let map = service.shards else { return }
        let places = try service.ledger.shardMessages(containing: batch.events.map { ($0.sequence, map.shard(of: $0.stream)) })
        var kept: [StreamEvent] = []
        for (event, place) in zip(batch.events, places) {
            // An entry no shard message put here (written before this ledger joined a cluster)
            // is sent as it is; the positions stay.
            if let place, !positions.take(shard: place.shard, message: place.message, index: place.index) { continue }
            kept.append(event)
            batch.ids.append(positions.text)
        }
        batch.events = kept
        if let position = batch.keepAlive, try positions.pass(through: position, on: service.ledger) { batch.keepAliveID = positions.text }
        self.positions = positions
    }

    /// The next events, a keep-alive, or the end, before they are labelled.
    private mutating func nextEvents() async -> EventSubscriber.Batch {
        if let ending = subscriber.ending { return .init(ending: ending) }
        if credential.isExpired(at: .now) {
            subscriber.end(.expired)
            return .init(ending: .expired)
        }
        if !joined, let batch = await catchUp() { return batch }
        let batch = await subscriber.next()
        if let last = batch.events.last { cursor = max(cursor, last.sequence) }
        if let position = batch.keepAlive {
            cursor = max(cursor, position)
            if let ending = service.recheck(credential) {
                subscriber.end(ending)
                return .init(ending: ending)
            }
        }
        return batch
    }

    /// Reads the log after ``cursor`` until it finds events to send (returned) or reaches the
    /// hub's position and joins it (nil: continue with the hub).
    private mutating func catchUp() async -> EventSubscriber.Batch? {
        let ledger = service.ledger
        let scope = subscriber.scope
        let limit = EventHub.batch
        let began = ContinuousClock.now
        while true {
            if let ending = subscriber.ending { return .init(ending: ending) }
            let from = cursor
            let summaries: [CommitSummary]
            do {
                summaries = try await NIOThreadPool.singleton.runIfActive { try ledger.commitSummaries(after: from, limit: limit) }
            } catch {
                service.logger.error("an event stream could not read the log", metadata: ["error": "\(error)"])
                subscriber.end(.failed)
                return .init(ending: .failed)
            }
            let events = summaries.filter { scope.matches($0.stream) }.map(StreamEvent.init)
            if let last = summaries.last { cursor = last.sequence }
            if summaries.count < limit, service.hub.join(subscriber, after: cursor) {
                joined = true
                return events.isEmpty ? nil : .init(events: events)
            }
            if !events.isEmpty { return .init(events: events) }
            // A long stretch of other identities' entries: tell the client where it stands.
            if ContinuousClock.now - began >= service.options.keepAlive { return .init(keepAlive: cursor) }
        }
    }

    /// Ends the session: it leaves the hub and the reason is counted. Its place under the
    /// bounds is given back when the session is dropped.
    func close(_ reason: EventSubscriber.Ending) {
        subscriber.end(reason)
        service.hub.leave(subscriber)
        let ending = subscriber.ending ?? reason
        service.metrics.closed(ending)
        service.logger.debug("event stream ended", metadata: [
            "reason": "\(ending.rawValue)", "identity": "\(EventService.identity(credential) ?? "-")", "position": "\(cursor)",
        ])
    }
}
