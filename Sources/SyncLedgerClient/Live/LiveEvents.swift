public import AsyncHTTPClient
public import Foundation
import NIOCore
import SyncLedgerWire
import Synchronization

/// One event of the server's live stream (`GET /events`).
public struct LiveEvent: Sendable, Hashable {
    /// The event's id: for SyncLedger, the change-feed position (resume after it with
    /// ``LiveEvents/init(endpoint:region:pool:credentials:dataset:lastEventID:httpClient:idleTimeout:maxEventBytes:maxBackoff:connectTimeout:)``'s
    /// `lastEventID`).
    public var id: String
    /// The event type: `dataset` for a dataset's change (`message` when the server named none).
    public var type: String
    /// The data as sent (for `dataset`, one JSON object).
    public var data: String
    /// The data's JSON members (`identityPoolId`, `identityId`, `datasetName`, `syncCount`,
    /// `sequence`, `deleted`, `deviceId`, …): numbers and booleans as their JSON text, null
    /// members, arrays and objects left out. Empty when the data is not a JSON object.
    public var fields: [String: String]

    /// An event.
    public init(id: String, type: String, data: String, fields: [String: String]) {
        self.id = id
        self.type = type
        self.data = data
        self.fields = fields
    }

    init(_ message: SSEMessage) {
        let object = try? JSONDecoder().decode([String: JSONScalar].self, from: Data(message.data.utf8))
        self.init(id: message.lastEventID, type: message.type, data: message.data, fields: object?.compactMapValues(\.text) ?? [:])
    }
}

/// A consumer of SyncLedger's live event stream (`GET /events`, Server-Sent Events): it opens
/// the stream for the credentials' identity (optionally one dataset), signed with SigV4 for
/// `cognito-sync`, and keeps it open until cancelled — reconnecting with `Last-Event-ID` (so no
/// change is missed, none delivered twice), after the server's `retry` delay, else 1 s doubling
/// to ``maxBackoff`` while connecting fails (reset once a stream opens).
///
/// A stream on which nothing (not even the server's keep-alive comment, every 15 s by default)
/// arrives for ``idleTimeout`` is dropped and opened again; so is one whose line or event exceeds
/// ``maxEventBytes``, or which the server ends. Connecting again is not tried after an answer
/// that will not change by itself — 400 (a bad dataset name, an event id the server's log has
/// not reached: it came from another ledger), 403 (refused credentials), 404, another 4xx but
/// 408 and 429, or a 2xx that is not an event stream: ``run(onEvent:)`` throws it as a
/// ``SyncClientError``. A 204 ends it without an error (the server asks not to reconnect).
///
/// Without a `lastEventID` the first stream starts at the current end of the server's log: sync
/// once after starting to catch up with what came before. The identity is asked of the
/// credentials provider at each connection (a login can merge it into another). Credentials
/// and tokens are never logged nor put in errors.
public final class LiveEvents: Sendable {
    /// The identity pool.
    public let pool: String
    /// The region requests are signed for.
    public let region: String
    /// Signs each connection and names its identity.
    public let credentials: any CredentialsProvider
    /// Only this dataset's events, or every dataset's of the identity.
    public let dataset: String?
    /// How long a stream may stay silent before it is opened again (3 keep-alive intervals of
    /// the server's default `--events-keepalive 15`).
    public let idleTimeout: Duration
    /// The largest line, and the largest data of one event, read from the stream.
    public let maxEventBytes: Int
    /// The longest wait between attempts to connect.
    public let maxBackoff: Duration
    /// How long connecting and the answer's head may take.
    public let connectTimeout: Duration
    private let endpoint: Result<HTTPEndpoint, SyncClientError>
    private let client: HTTPClient
    private let state: Mutex<State>

    private struct State {
        var lastEventID: String?
        var retry: Duration?
        var connections = 0
        var ended = 0
    }

    /// A consumer of the event stream of the server at `endpoint`.
    ///
    /// - Parameters:
    ///   - endpoint: `http://` or `https://` with a host (and a port), as for ``CognitoSyncTransport``.
    ///   - region: the region in the signatures' scope.
    ///   - pool: the identity pool id.
    ///   - credentials: sign each connection; `identityID()` names whose events.
    ///   - dataset: only this dataset's events (nil: every dataset of the identity).
    ///   - lastEventID: resume after this event id (the ``LiveEvent/id`` last handled).
    ///   - httpClient: the AsyncHTTPClient to connect with.
    public init(endpoint: URL, region: String = "us-east-1", pool: String, credentials: any CredentialsProvider, dataset: String? = nil,
                lastEventID: String? = nil, httpClient: HTTPClient = CognitoSyncTransport.defaultHTTPClient,
                idleTimeout: Duration = .seconds(45), maxEventBytes: Int = 1 << 20, maxBackoff: Duration = .seconds(60),
                connectTimeout: Duration = .seconds(30)) {
        self.endpoint = HTTPEndpoint.parse(endpoint)
        self.region = region
        self.pool = pool
        self.credentials = credentials
        self.dataset = dataset
        self.client = httpClient
        self.idleTimeout = idleTimeout
        self.maxEventBytes = maxEventBytes
        self.maxBackoff = maxBackoff
        self.connectTimeout = connectTimeout
        self.state = Mutex(State(lastEventID: lastEventID))
    }

    /// The last event id the stream gave (an event handled, or the position a stream started
    /// from): where the next connection resumes. Nil before the first stream opened.
    public var lastEventID: String? { state.withLock { $0.lastEventID } }

    /// How many streams opened so far.
    public var connections: Int { state.withLock { $0.connections } }

    /// How many of them ended (for tests).
    var endedStreams: Int { state.withLock { $0.ended } }

    /// Reads the stream until the task is cancelled (then returns without an error), calling
    /// `onEvent` with each event in order; an event's id becomes ``lastEventID`` once `onEvent`
    /// returned. Use one loop at a time per instance.
    ///
    /// - Throws: an error `onEvent` threw; a ``SyncClientError`` when the server's answer will
    ///   not change by reconnecting (see ``LiveEvents``) or the endpoint is not a valid URL.
    public func run(onEvent: @escaping @Sendable (LiveEvent) async throws -> Void) async throws {
        let endpoint = try self.endpoint.get()
        var failures = 0
        while !Task.isCancelled {
            let outcome: Outcome
            do {
                outcome = try await connect(endpoint, onEvent: onEvent)
            } catch {
                if Task.isCancelled { return }
                if Self.isFinal(error) { throw error }
                outcome = .failed
            }
            switch outcome {
            case .stop: return
            case .failed: failures += 1
            case .ended(let error):
                if let error = error as? ConsumerError, !(error.error is ConsumerTooSlow) { throw error.error }
                failures = 0
            }
            do { try await Task.sleep(for: delay(failures: failures)) } catch { return }
        }
    }

    /// The events, reconnecting as ``run(onEvent:)`` does until the stream's consumer goes away
    /// (the iterating task is cancelled). Events wait in a buffer of 1,024; when it is full the
    /// stream is opened again later after the last event buffered, so nothing is skipped.
    /// ``lastEventID`` is the last event *buffered*: to resume exactly, keep the id of the last
    /// event handled.
    public func events() -> AsyncThrowingStream<LiveEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: LiveEvent.self, bufferingPolicy: .bufferingOldest(1024))
        let task = Task {
            do {
                try await run { event in
                    if case .dropped = continuation.yield(event) { throw ConsumerTooSlow() }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// Passes each `dataset` event's fields to `scheduler`'s
    /// ``SyncScheduler/handleNotification(_:)`` (which queues a sync for a change of another
    /// device newer than the store) until the task is cancelled. An error — the scheduler's, or
    /// one that ends ``run(onEvent:)`` — goes to `onError`; after the latter the stream is opened
    /// again after ``maxBackoff``. A 204 from the server ends the feed.
    public func feed(_ scheduler: SyncScheduler, onError: (@Sendable (any Error) -> Void)? = nil) async {
        while !Task.isCancelled {
            do {
                try await run { event in
                    guard event.type == "dataset" else { return }
                    do { try await scheduler.handleNotification(event.fields) } catch { onError?(error) }
                }
                return
            } catch {
                onError?(error)
                do { try await Task.sleep(for: maxBackoff) } catch { return }
            }
        }
    }

    // MARK: One connection

    private enum Outcome {
        /// The server answered 204: do not reconnect.
        case stop
        /// A stream opened and ended: by the server, for silence, an oversize event, a network
        /// failure, or an error of the consumer (a ``ConsumerError``).
        case ended((any Error)?)
        /// No stream opened, for a reason that may pass.
        case failed
    }

    /// Opens one stream and reads it to its end. Throws what prevented the stream from opening.
    private func connect(_ endpoint: HTTPEndpoint, onEvent: @escaping @Sendable (LiveEvent) async throws -> Void) async throws -> Outcome {
        let key = try await credentials.credentials()
        let identity = try await credentials.identityID()
        let resumeID = state.withLock { $0.lastEventID }
        var query = [("identityPoolId", pool), ("identityId", identity)]
        if let dataset { query.append(("datasetName", dataset)) }
        let rawQuery = query.map { SigV4.uriEncode($0.0) + "=" + SigV4.uriEncode($0.1) }.joined(separator: "&")
        let rawPath = endpoint.pathPrefix + "/events"
        var headers = [("accept", "text/event-stream")]
        if let resumeID, !resumeID.isEmpty { headers.append(("last-event-id", resumeID)) }
        var request = HTTPClientRequest(url: endpoint.origin + rawPath + "?" + rawQuery)
        request.method = .GET
        request.headers.add(name: "host", value: endpoint.hostHeader)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let signer = SigV4Signer(accessKeyID: key.accessKeyID, secretAccessKey: key.secretAccessKey, sessionToken: key.sessionToken,
                                 region: region, service: "cognito-sync")
        for (name, value) in signer.sign(method: "GET", host: endpoint.hostHeader, rawPath: rawPath, rawQuery: rawQuery, headers: headers, body: []) {
            request.headers.add(name: name, value: value)
        }

        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: TimeAmount(connectTimeout))
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw SyncClientError.network("GET /events at \(endpoint.origin): \(error)")
        }
        let activity = Activity()
        let status = Int(response.status.code)
        if status == 204 { return .stop }
        guard status == 200 else {
            let body = try await Self.withIdleTimeout(idleTimeout, activity) {
                (try? await response.body.collect(upTo: 64 << 10)).map { Array($0.readableBytesView) } ?? []
            }
            throw AWSErrorBody(HTTPAnswer(status: status, headers: response.headers, body: body)).clientError(status: status)
        }
        guard response.headers.first(name: "content-type")?.lowercased().hasPrefix("text/event-stream") == true else {
            throw SyncClientError.server(status: status, type: "InvalidResponse", message: "GET /events did not answer an event stream")
        }
        state.withLock { $0.connections += 1 }

        let maxEventBytes = self.maxEventBytes
        do {
            try await Self.withIdleTimeout(idleTimeout, activity) {
                var parser = SSEParser(lastEventID: resumeID ?? "", maxEventBytes: maxEventBytes)
                for try await chunk in response.body {
                    activity.touch()
                    for message in parser.feed(chunk.readableBytesView) {
                        activity.touch(busy: true)
                        do { try await onEvent(LiveEvent(message)) } catch { throw ConsumerError(error: error) }
                        activity.touch()
                        self.state.withLock { $0.lastEventID = message.lastEventID }
                    }
                    let (id, retry) = (parser.lastEventID, parser.reconnectionTime)
                    self.state.withLock { s in
                        s.lastEventID = id
                        if let retry { s.retry = .milliseconds(min(retry, 3_600_000)) }
                    }
                    if parser.overflowed { throw SSEParser.TooLarge(limit: maxEventBytes) }
                }
            }
        } catch {
            if Task.isCancelled { throw CancellationError() }
            state.withLock { $0.ended += 1 }
            return .ended(error)
        }
        state.withLock { $0.ended += 1 }
        return .ended(nil)
    }

    private func delay(failures: Int) -> Duration {
        Self.backoff(retry: state.withLock { $0.retry }, failures: failures, max: maxBackoff)
    }

    /// The wait before the next attempt: the server's `retry` (at least 100 ms) or 1 s, doubled
    /// for each attempt in a row after the first that could not open a stream (`failures`), at
    /// most `max` (unless the server's `retry` is longer).
    static func backoff(retry: Duration?, failures: Int, max maxDelay: Duration) -> Duration {
        let base = retry.map { max($0, .milliseconds(100)) } ?? .seconds(1)
        var delay = base
        for _ in 0..<min(max(failures - 1, 0), 64) where delay < maxDelay { delay *= 2 }
        return max(base, min(delay, maxDelay))
    }

    /// Whether reconnecting cannot change the outcome of `error`.
    private static func isFinal(_ error: any Error) -> Bool {
        switch error as? SyncClientError {
        case .invalidParameter, .notAuthorized, .notFound, .conflict: return true
        case .server(let status, _, _): return status < 500 && status != 408 && status != 429
        default: return false
        }
    }


    /// Runs `operation`, failing with ``IdleTimeout`` (and cancelling it) when `activity` was
    /// not touched for `idle`, unless it is busy (the consumer has an event).
    private static func withIdleTimeout<T: Sendable>(_ idle: Duration, _ activity: Activity,
                                                     _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                while true {
                    let (last, busy) = activity.state.withLock { ($0.last, $0.busy) }
                    if !busy, ContinuousClock.now >= last + idle { return nil }
                    try await Task.sleep(until: busy ? ContinuousClock.now + idle : last + idle, clock: .continuous)
                }
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let result = first else { throw IdleTimeout(idle: idle) }
            return result
        }
    }
}

/// The stream was silent for longer than the idle timeout.
struct IdleTimeout: Error, CustomStringConvertible {
    let idle: Duration
    var description: String { "nothing arrived on the event stream for \(idle)" }
}

/// The ``LiveEvents/events()`` buffer is full: open the stream again later.
private struct ConsumerTooSlow: Error {}

/// An error of the consumer of an event.
private struct ConsumerError: Error {
    let error: any Error
}

/// When a stream last made progress, and whether its consumer has an event.
private final class Activity: Sendable {
    let state = Mutex<(last: ContinuousClock.Instant, busy: Bool)>((.now, false))

    func touch(busy: Bool = false) { state.withLock { $0 = (.now, busy) } }
}

/// A JSON value as text: a string as is, a number or boolean as written; nil for null, an array
/// or an object.
private struct JSONScalar: Decodable {
    var text: String?

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { text = nil }
        else if let b = try? c.decode(Bool.self) { text = b ? "true" : "false" }
        else if let i = try? c.decode(Int64.self) { text = String(i) }
        else if let u = try? c.decode(UInt64.self) { text = String(u) }
        else if let d = try? c.decode(Double.self) { text = String(d) }
        else { text = try? c.decode(String.self) }
    }
}
