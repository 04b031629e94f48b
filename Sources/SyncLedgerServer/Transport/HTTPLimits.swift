import NIOCore
import Synchronization

/// The HTTP server's bounds on connections, time and request bodies (from
/// ``ServerConfiguration``), shared by every connection's guards.
struct HTTPLimits: Sendable {
    /// A connection with no request in progress for this long is closed.
    var idleTimeout: Duration
    /// A request head must be complete this long after the connection opened, or after the
    /// first byte of a later request arrived.
    var headerTimeout: Duration
    /// A request body must be complete this long after its head.
    var bodyTimeout: Duration
    /// Request bodies above this many bytes are refused (413) before they are read.
    var maxBodyBytes: Int
    /// After refusing a request, how long the server keeps reading (and discarding) what the
    /// client still sends, so that the client reads the refusal before the connection closes.
    var linger: Duration = .seconds(2)
}

/// Counters of what the transport refused or cut, rendered into `/metrics`.
final class TransportMetrics: Sendable {
    enum Event: String, CaseIterable, Sendable {
        case connectionRefused = "connection_refused"
        case connectionEvicted = "connection_evicted"
        case headerTimeout = "header_timeout"
        case bodyTimeout = "body_timeout"
        case bodyTooLarge = "body_too_large"
        case bodyBudgetExhausted = "body_budget_exhausted"
    }

    private let counts = Mutex([Event: UInt64]())

    func count(_ event: Event) {
        counts.withLock { $0[event, default: 0] += 1 }
    }

    func value(_ event: Event) -> UInt64 { counts.withLock { $0[event] ?? 0 } }

    /// The Prometheus text of these counters and of the connection and budget gauges.
    func render(connections: ConnectionRegistry, budget: BodyBudget) -> String {
        let snapshot = counts.withLock { $0 }
        var out = "# HELP syncledger_http_connections Open HTTP connections.\n# TYPE syncledger_http_connections gauge\n"
        out += "syncledger_http_connections \(connections.open)\n"
        out += "# HELP syncledger_http_buffered_body_bytes Request-body bytes being buffered now.\n# TYPE syncledger_http_buffered_body_bytes gauge\n"
        out += "syncledger_http_buffered_body_bytes \(budget.inUse)\n"
        out += "# HELP syncledger_http_refusals_total Connections and requests the transport refused or cut, by reason.\n# TYPE syncledger_http_refusals_total counter\n"
        for event in Event.allCases {
            out += "syncledger_http_refusals_total{reason=\"\(event.rawValue)\"} \(snapshot[event] ?? 0)\n"
        }
        return out
    }
}

/// The open connections, bounded by `--max-connections`.
///
/// When a connection arrives at the limit, the connection that has waited longest for a request
/// (no request in progress: idle keep-alive, or a head still arriving) is closed to make room;
/// only when every connection has a request in progress is the new one closed at once. Idle
/// sockets can therefore never lock clients out — `/health` answers under any number of them —
/// and a request in progress is never cut for a newcomer.
final class ConnectionRegistry: Sendable {
    private struct Entry {
        let channel: any Channel
        /// When it last became free of requests; nil while a request is in progress.
        var idleSince: ContinuousClock.Instant?
    }

    /// What ``admit(_:)`` decided.
    enum Admission {
        case admitted
        /// Admitted in place of this connection, which the caller closes.
        case admittedEvicting(any Channel)
        case refused
    }

    /// The most connections open at once.
    let maximum: Int
    private let entries = Mutex([ObjectIdentifier: Entry]())

    init(maximum: Int) { self.maximum = maximum }

    /// Open connections now.
    var open: Int { entries.withLock { $0.count } }

    /// Registers a new connection, making room by evicting the longest-idle one when full.
    func admit(_ channel: any Channel) -> Admission {
        let id = ObjectIdentifier(channel)
        return entries.withLock { entries in
            let entry = Entry(channel: channel, idleSince: .now)
            if entries.count < maximum {
                entries[id] = entry
                return .admitted
            }
            var victim: (ObjectIdentifier, ContinuousClock.Instant)?
            for (key, candidate) in entries {
                guard let since = candidate.idleSince else { continue }
                if victim == nil || since < victim!.1 { victim = (key, since) }
            }
            guard let (victimID, _) = victim, let evicted = entries.removeValue(forKey: victimID) else { return .refused }
            entries[id] = entry
            return .admittedEvicting(evicted.channel)
        }
    }

    /// Marks a connection as serving a request (`busy`) or free of requests.
    func setBusy(_ channel: any Channel, _ busy: Bool) {
        let id = ObjectIdentifier(channel)
        entries.withLock { entries in
            guard entries[id] != nil else { return }
            entries[id]!.idleSince = busy ? nil : .now
        }
    }

    /// Forgets a closed connection (nothing if it was evicted or never admitted).
    func remove(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        _ = entries.withLock { $0.removeValue(forKey: id) }
    }
}

/// The global budget of request-body bytes buffered at once (`--max-buffered-body-bytes`): a
/// request takes its Content-Length (or each chunk as it arrives) before anything is buffered,
/// and gives it back when its response is written. It bounds the memory a large-body attack
/// can pin, whatever the number of connections.
final class BodyBudget: Sendable {
    /// The budget in bytes.
    let capacity: Int
    private let used = Atomic<Int>(0)

    init(capacity: Int) { self.capacity = capacity }

    /// Bytes taken now.
    var inUse: Int { used.load(ordering: .relaxed) }

    /// Takes `bytes` if they fit in what is left; false (and nothing taken) otherwise.
    func acquire(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return true }
        var current = used.load(ordering: .relaxed)
        while true {
            guard bytes <= capacity - current else { return false }
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    /// Gives back bytes taken by ``acquire(_:)``.
    func release(_ bytes: Int) {
        if bytes > 0 { used.subtract(bytes, ordering: .relaxed) }
    }
}

/// What the guards of every connection share.
struct TransportShared: Sendable {
    let limits: HTTPLimits
    let connections: ConnectionRegistry
    let budget: BodyBudget
    let metrics: TransportMetrics
}
