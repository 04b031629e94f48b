import Synchronization

/// The options of `GET /events` (``ServerConfiguration/events``).
public struct EventStreamOptions: Sendable {
    /// How often a stream with nothing to send gets a keep-alive (an SSE comment, a WebSocket
    /// ping): 15 s, as the SSE specification suggests for proxies.
    public var keepAlive: Duration = .seconds(15)
    /// The most streams open at once that watch one identity (`--events-per-identity`).
    public var perIdentity = 8
    /// The most streams open at once from one client (`--events-per-source`); 0: no such bound.
    /// The client is its ``ClientSource``, as for the identity throttle: the peer, or from a
    /// `--trusted-proxy` the client its `X-Forwarded-For` names; an IPv6 address counts as its
    /// /64. Identities are free to make, so the per-identity bound alone does not stop one
    /// client from opening many.
    public var perSource = 32
    /// The furthest back a stream may resume (`Last-Event-ID`), in change-feed entries behind
    /// the end of the log (`--events-max-resume`): catching up reads every entry since, whoever
    /// it is for. A resume from further back is refused (400) with a message that says to
    /// re-sync (ListRecords) and open the stream without an event id.
    public var maxResume: UInt64 = 100_000
    /// The most streams open at once (`--max-event-streams`); nil: half of
    /// ``ServerConfiguration/maxConnections``, so that ordinary requests always find room.
    public var maxStreams: Int?
    /// The most events queued for one stream; a client slower than that is disconnected and
    /// resumes from the log.
    public var queueCapacity = 1024

    /// The defaults.
    public init() {}

    /// The total bound for a server of `maxConnections` connections.
    func total(maxConnections: Int) -> Int { maxStreams ?? maxConnections / 2 }

    /// Checks the values.
    /// - Throws: ``StartupError`` naming the option and the value.
    func validate(maxConnections: Int) throws {
        guard keepAlive >= .milliseconds(100), keepAlive <= .seconds(3600) else {
            throw StartupError("--events-keepalive must be 0.1 to 3600 seconds")
        }
        guard perIdentity >= 1 else { throw StartupError("--events-per-identity must be at least 1, not \(perIdentity)") }
        guard perSource >= 0 else { throw StartupError("--events-per-source must be 0 (no bound) or more, not \(perSource)") }
        guard maxResume >= 1 else { throw StartupError("--events-max-resume must be at least 1, not \(maxResume)") }
        if let maxStreams {
            guard maxStreams >= 0, maxStreams < maxConnections else {
                throw StartupError("--max-event-streams must be 0 to \(maxConnections - 1) (below --max-connections \(maxConnections), so that other requests find room), not \(maxStreams)")
            }
        }
        guard (1...1_000_000).contains(queueCapacity) else { throw StartupError("the event queue capacity must be 1 to 1000000") }
    }
}

/// Counts open event streams against their bounds: at most ``perIdentity`` watching one
/// identity (an identity's own streams, and admin streams filtered to it), at most
/// ``perSource`` from one client address (0: unbounded), at most ``total`` in all (admin
/// streams over several identities count only there and per source).
final class EventAdmission: Sendable {
    let perIdentity: Int
    let perSource: Int
    let total: Int
    private struct State {
        var open = 0
        var byIdentity: [IdentityKey: Int] = [:]
        var bySource: [String: Int] = [:]
    }
    private let state = Mutex(State())
    private let metrics: EventMetrics

    /// The bound an admission reached (a metric reason is ``EventMetrics/Refusal``).
    private enum Bound {
        case total
        case perSource
        case perIdentity
    }

    init(perIdentity: Int, perSource: Int = 0, total: Int, metrics: EventMetrics) {
        self.perIdentity = perIdentity
        self.perSource = perSource
        self.total = total
        self.metrics = metrics
    }

    /// Streams open now.
    var open: Int { state.withLock { $0.open } }

    /// Takes a place for a stream watching `identity` (nil: several identities), opened from
    /// client address `source` (nil: unknown, not bounded per source).
    /// - Throws: ``WireError`` TooManyRequestsException (429) at any bound.
    func admit(_ identity: IdentityKey?, source: String? = nil) throws -> EventTicket {
        let source = perSource > 0 ? source : nil
        let refusal = state.withLock { s -> Bound? in
            guard s.open < total else { return .total }
            if let source, s.bySource[source, default: 0] >= perSource { return .perSource }
            if let identity {
                guard s.byIdentity[identity, default: 0] < perIdentity else { return .perIdentity }
                s.byIdentity[identity, default: 0] += 1
            }
            if let source { s.bySource[source, default: 0] += 1 }
            s.open += 1
            return nil
        }
        switch refusal {
        case nil:
            return EventTicket(admission: self, identity: identity, source: source)
        case .perSource?:
            metrics.refused(.perSource)
            throw WireError(type: "TooManyRequestsException", status: 429, message: "client address \(source ?? "") already has \(perSource) event streams open, the most allowed (--events-per-source); close one or retry later")
        case .perIdentity?:
            metrics.refused(.perIdentity)
            throw WireError(type: "TooManyRequestsException", status: 429, message: "identity \(identity.map { "\($0.identity)" } ?? "") already has \(perIdentity) event streams open, the most allowed (--events-per-identity); close one or retry later")
        case .total?:
            metrics.refused(.total)
            throw WireError(type: "TooManyRequestsException", status: 429, message: "the server has \(total) event streams open, the most allowed (--max-event-streams); retry later")
        }
    }

    fileprivate func release(_ identity: IdentityKey?, source: String?) {
        state.withLock { s in
            s.open -= 1
            if let source {
                s.bySource[source, default: 1] -= 1
                if s.bySource[source] == 0 { s.bySource[source] = nil }
            }
            if let identity {
                s.byIdentity[identity, default: 1] -= 1
                if s.byIdentity[identity] == 0 { s.byIdentity[identity] = nil }
            }
        }
    }
}

/// A stream's place under the bounds, given back when the last reference to it goes — however
/// the stream ends, even if it never started.
final class EventTicket: Sendable {
    private let admission: EventAdmission
    private let identity: IdentityKey?
    private let source: String?

    fileprivate init(admission: EventAdmission, identity: IdentityKey?, source: String?) {
        self.admission = admission
        self.identity = identity
        self.source = source
    }

    deinit { admission.release(identity, source: source) }
}

/// Counters and gauges of the event streams, set into `/metrics` at scrape time.
final class EventMetrics: Sendable {
    enum Refusal: String, CaseIterable, Sendable {
        case perIdentity = "per_identity"
        case perSource = "per_source"
        case total
        /// A resume (`Last-Event-ID`) further back than `--events-max-resume` (a 400, not a 429).
        case resumeTooOld = "resume_too_old"
    }

    private let sent = Atomic<UInt64>(0)
    private let closed = Mutex([EventSubscriber.Ending: UInt64]())
    private let refusals = Mutex([Refusal: UInt64]())

    init() {}

    func sent(_ events: Int) { sent.add(UInt64(events), ordering: .relaxed) }
    func closed(_ reason: EventSubscriber.Ending) { closed.withLock { $0[reason, default: 0] += 1 } }
    func refused(_ reason: Refusal) { refusals.withLock { $0[reason, default: 0] += 1 } }

    /// Sets at scrape time: open streams (admitted, and joined to the hub), events sent,
    /// streams ended by reason, streams refused by bound.
    func refresh(open: Int, subscribed: Int, position: UInt64, into scrape: inout MetricsScrape) {
        let closed = closed.withLock { $0 }
        let refusals = refusals.withLock { $0 }
        scrape.gauge("syncledger_event_streams", help: "Open event streams (GET /events, SSE and WebSocket).", open)
        scrape.gauge("syncledger_event_stream_subscribers", help: "Event streams caught up with the log and fed by the hub.", subscribed)
        scrape.gauge("syncledger_event_hub_position", help: "The change-feed position the event hub has handed out.", position)
        scrape.counter("syncledger_events_sent_total", help: "Events written to event streams.", total: sent.load(ordering: .relaxed))
        for reason in EventSubscriber.Ending.allCases {
            scrape.counter("syncledger_event_streams_closed_total", help: "Event streams ended, by reason (overflow: the client read too slowly).",
                           labels: [("reason", reason.rawValue)], total: closed[reason] ?? 0)
        }
        for reason in Refusal.allCases {
            scrape.counter("syncledger_event_streams_refused_total", help: "Event streams refused at a bound (429; resume_too_old: 400).",
                           labels: [("reason", reason.rawValue)], total: refusals[reason] ?? 0)
        }
    }
}
