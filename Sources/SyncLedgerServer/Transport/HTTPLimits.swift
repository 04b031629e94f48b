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
    /// A connection with response bytes waiting to be sent, none of which the client took for
    /// this long, is closed (a client that stopped reading: its answers, or its event stream).
    var writeTimeout: Duration = .seconds(30)
    /// The most requests of one connection read and not yet answered (HTTP pipelining); the
    /// next is refused with 429 and the connection closed once the earlier ones are answered.
    var maxPipelined = 8
    /// While more than this many response bytes of a connection wait to be sent, no more of its
    /// requests are read.
    var maxOutboundBytes = 1 << 20
    /// At the connection limit, a busy connection whose response has made no progress for this
    /// long may be closed to make room (after idle and receiving connections).
    var stallGrace: Duration = .seconds(1)
}

/// Counters of what the transport refused or cut, set into `/metrics` at scrape time.
final class TransportMetrics: Sendable {
    enum Event: String, CaseIterable, Sendable {
        case connectionRefused = "connection_refused"
        case connectionEvicted = "connection_evicted"
        case headerTimeout = "header_timeout"
        case bodyTimeout = "body_timeout"
        case bodyTooLarge = "body_too_large"
        case bodyBudgetExhausted = "body_budget_exhausted"
        case writeTimeout = "write_timeout"
        case tooManyPipelined = "too_many_pipelined"
        case stalledEvicted = "stalled_connection_evicted"
    }

    private let counts = Mutex([Event: UInt64]())

    func count(_ event: Event) {
        counts.withLock { $0[event, default: 0] += 1 }
    }

    func value(_ event: Event) -> UInt64 { counts.withLock { $0[event] ?? 0 } }

    /// Sets these counters and the connection and budget gauges at scrape time.
    func refresh(connections: ConnectionRegistry, budget: BodyBudget, into scrape: inout MetricsScrape) {
        let snapshot = counts.withLock { $0 }
        scrape.gauge("syncledger_http_connections", help: "Open HTTP connections.", connections.open)
        let states = connections.counts
        for (state, count) in [("idle", states.idle), ("receiving", states.receiving), ("busy", states.busy)] {
            scrape.gauge("syncledger_http_connections_by_state",
                         help: "Open HTTP connections: idle (no request in progress), receiving (a request head or body arriving), busy (a request read and being handled, or its response being written).",
                         labels: [("state", state)], count)
        }
        scrape.gauge("syncledger_http_stalled_connections",
                     help: "Connections whose response bytes have waited for their client, none taken, for a second or more (closed at --write-timeout; the first to make room at --max-connections after idle and receiving ones).",
                     states.stalled)
        scrape.gauge("syncledger_http_buffered_body_bytes", help: "Request-body bytes received and being buffered now.", budget.inUse)
        scrape.gauge("syncledger_http_buffered_body_pool_bytes", help: "Of those, the bytes held beyond each connection's own share, from the common pool.", budget.poolInUse)
        scrape.gauge("syncledger_http_buffered_body_pool_capacity_bytes", help: "The common pool's size: --max-buffered-body-bytes less every connection's share.", budget.poolCapacity)
        for event in Event.allCases {
            scrape.counter("syncledger_http_refusals_total", help: "Connections and requests the transport refused or cut, by reason.",
                           labels: [("reason", event.rawValue)], total: snapshot[event] ?? 0)
        }
    }
}

/// How a connection's response bytes drain: written by its ``ConnectionGuard`` on its event
/// loop, read by admissions on any thread.
final class OutboundProgress: Sendable {
    /// Uptime nanoseconds since which response bytes have waited with none of them sent; 0:
    /// none wait.
    private let stalled = Atomic<UInt64>(0)

    init() {}

    /// Bytes wait, and none was sent since `instant`.
    func waiting(since instant: NIODeadline) { stalled.store(max(1, instant.uptimeNanoseconds), ordering: .relaxed) }

    /// Nothing waits to be sent.
    func drained() { stalled.store(0, ordering: .relaxed) }

    /// Since when bytes have waited with no progress; nil: none wait.
    var stalledSince: NIODeadline? {
        let value = stalled.load(ordering: .relaxed)
        return value == 0 ? nil : .uptimeNanoseconds(value)
    }
}

/// The open connections, bounded by `--max-connections`, and what each is doing.
///
/// A connection is *busy* while it has a request that was read to its end and is being
/// handled, or a response being written; otherwise it is *idle* (no request in progress: a new
/// connection that has sent nothing, or keep-alive between requests) or *receiving* (a request
/// head or body has started to arrive but is not complete). A connection whose response bytes
/// wait for its client (``OutboundProgress``) counts as writing, whatever its requests' state,
/// and is *stalled* once none of them was taken for ``HTTPLimits/stallGrace``: a client that
/// stopped reading. When a connection arrives at the limit, the longest-idle connection is
/// closed to make room, else the receiving connection whose request started the longest ago,
/// else the connection stalled the longest; only when every connection is busy or writing to a
/// client that reads is the new one closed at once. Neither idle sockets, nor sockets that declare a body and never send
/// it, nor sockets that ask and never read the answers can therefore lock clients out —
/// `/health` answers under any number of them — and a request being handled, or an answer
/// being read, is never cut for a newcomer.
final class ConnectionRegistry: Sendable {
    /// What a connection is doing, as far as eviction is concerned.
    enum State: Equatable, Sendable {
        /// No request in progress, since then.
        case idle(since: ContinuousClock.Instant)
        /// A request head or body is arriving; its first byte came then.
        case receiving(since: ContinuousClock.Instant)
        /// A request read to its end is being handled, or a response is being written.
        case busy
    }

    /// Who was closed to make room.
    enum Victim: Sendable {
        /// The longest-idle connection.
        case idle
        /// The connection whose unfinished request started the longest ago (none was idle).
        case receiving
        /// The connection whose client has taken none of its response bytes for the longest (no
        /// connection was idle or receiving with nothing to send).
        case stalled
    }

    private struct Entry {
        let channel: any Channel
        var state: State
        let progress: OutboundProgress?
    }

    /// What ``admit(_:progress:)`` decided.
    enum Admission {
        case admitted
        /// Admitted in place of this connection, which the caller closes.
        case admittedEvicting(any Channel, Victim)
        case refused
    }

    /// The most connections open at once.
    let maximum: Int
    /// A busy connection stalled at least this long may make room.
    let stallGrace: Duration
    private let entries = Mutex([ObjectIdentifier: Entry]())

    init(maximum: Int, stallGrace: Duration = .seconds(1)) {
        self.maximum = maximum
        self.stallGrace = stallGrace
    }

    /// Open connections now.
    var open: Int { entries.withLock { $0.count } }

    /// Open connections now by state: idle, receiving, busy; and, whatever their state, those
    /// whose response bytes have waited with none taken for at least the stall grace.
    var counts: (idle: Int, receiving: Int, busy: Int, stalled: Int) {
        let stalledBefore = Self.deadline(before: stallGrace)
        return entries.withLock { entries in
            var counts = (idle: 0, receiving: 0, busy: 0, stalled: 0)
            for entry in entries.values {
                switch entry.state {
                case .idle: counts.idle += 1
                case .receiving: counts.receiving += 1
                case .busy: counts.busy += 1
                }
                if let since = entry.progress?.stalledSince, since <= stalledBefore { counts.stalled += 1 }
            }
            return counts
        }
    }

    /// Registers a new connection (idle from now), making room when full by evicting the
    /// longest-idle connection, else the one whose incomplete request started the longest ago,
    /// else the busy one stalled the longest.
    func admit(_ channel: any Channel, progress: OutboundProgress? = nil) -> Admission {
        let id = ObjectIdentifier(channel)
        let now = ContinuousClock.now
        let stalledBefore = Self.deadline(before: stallGrace)
        return entries.withLock { entries in
            let entry = Entry(channel: channel, state: .idle(since: now), progress: progress)
            if entries.count < maximum {
                entries[id] = entry
                return .admitted
            }
            var idle: (ObjectIdentifier, ContinuousClock.Instant)?
            var receiving: (ObjectIdentifier, ContinuousClock.Instant)?
            var stalled: (ObjectIdentifier, NIODeadline)?
            for (key, candidate) in entries {
                // Response bytes wait for this client: an answer is being written, whatever the
                // state of its requests. It makes room only when its client took none for the grace.
                if let since = candidate.progress?.stalledSince {
                    if since <= stalledBefore, stalled == nil || since < stalled!.1 { stalled = (key, since) }
                    continue
                }
                switch candidate.state {
                case .idle(let since):
                    if idle == nil || since < idle!.1 { idle = (key, since) }
                case .receiving(let since):
                    if receiving == nil || since < receiving!.1 { receiving = (key, since) }
                case .busy:
                    continue
                }
            }
            let victim: (ObjectIdentifier, Victim)? = idle.map { ($0.0, .idle) } ?? receiving.map { ($0.0, .receiving) }
                ?? stalled.map { ($0.0, .stalled) }
            guard let (victimID, kind) = victim, let evicted = entries.removeValue(forKey: victimID) else { return .refused }
            entries[id] = entry
            return .admittedEvicting(evicted.channel, kind)
        }
    }

    /// The uptime deadline `duration` ago.
    private static func deadline(before duration: Duration) -> NIODeadline {
        let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
        return .now() - .nanoseconds(nanoseconds)
    }

    /// Records what a connection is doing now (nothing if it was evicted or never admitted).
    func update(_ channel: any Channel, _ state: State) {
        let id = ObjectIdentifier(channel)
        entries.withLock { entries in
            guard entries[id] != nil else { return }
            entries[id]!.state = state
        }
    }

    /// Forgets a closed connection (nothing if it was evicted or never admitted).
    func remove(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        _ = entries.withLock { $0.removeValue(forKey: id) }
    }
}

/// The global budget of request-body bytes buffered at once (`--max-buffered-body-bytes`).
///
/// Bytes are taken as they *arrive*, before they are passed on to be buffered, and given back
/// when the request's response has been written or its connection closes: a connection holds
/// only what it has sent, so declaring a large `Content-Length` and sending nothing pins
/// nothing. It bounds the memory a large-body attack can pin, whatever the number of
/// connections.
///
/// A quarter of the budget (at most all of it less one largest body) is set apart in equal
/// shares, one per connection the server may hold (`--max-connections`): the first
/// ``share`` bytes a connection holds come from its own share, and always fit; only the bytes
/// beyond it come from the common pool, first come first served, and are refused when it is
/// full. The shares add up to no more than what was set apart, so the total stays within the
/// budget; and however many connections fill the pool, a request whose body fits in one share
/// (64 KiB with the defaults: any ordinary UpdateRecords) is never refused for want of budget.
final class BodyBudget: Sendable {
    /// The budget in bytes.
    let capacity: Int
    /// The bytes every connection may hold from its own share.
    let share: Int
    /// The bytes connections share beyond their own: `capacity` less every connection's share.
    let poolCapacity: Int
    private let pool = Atomic<Int>(0)
    private let used = Atomic<Int>(0)

    /// - Parameters:
    ///   - connections: the most connections open at once (one share each).
    ///   - largestBody: `--max-body-bytes`; the pool always fits one body this large.
    init(capacity: Int, connections: Int = 1, largestBody: Int = 0) {
        self.capacity = capacity
        let connections = max(1, connections)
        let share = max(0, min(capacity / 4 / connections, (capacity - largestBody) / connections))
        self.share = share
        self.poolCapacity = capacity - share * connections
    }

    /// Bytes held now, over all connections.
    var inUse: Int { used.load(ordering: .relaxed) }

    /// Bytes of the common pool held now.
    var poolInUse: Int { pool.load(ordering: .relaxed) }

    /// What of `held` bytes a connection holds comes from the pool.
    private func pooled(_ held: Int) -> Int { max(0, held - share) }

    /// Takes `bytes` more for a connection that holds `held` bytes already, if they fit; false
    /// (and nothing taken) otherwise.
    func acquire(_ bytes: Int, holding held: Int) -> Bool {
        guard bytes > 0 else { return true }
        let fromPool = pooled(held + bytes) - pooled(held)
        if fromPool > 0 {
            var current = pool.load(ordering: .relaxed)
            while true {
                guard fromPool <= poolCapacity - current else { return false }
                let (exchanged, original) = pool.compareExchange(expected: current, desired: current + fromPool, ordering: .relaxed)
                if exchanged { break }
                current = original
            }
        }
        used.add(bytes, ordering: .relaxed)
        return true
    }

    /// Gives back `bytes` of the `held` bytes a connection holds (taken by ``acquire(_:holding:)``).
    func release(_ bytes: Int, holding held: Int) {
        guard bytes > 0 else { return }
        let toPool = pooled(held) - pooled(held - bytes)
        if toPool > 0 { pool.subtract(toPool, ordering: .relaxed) }
        used.subtract(bytes, ordering: .relaxed)
    }
}

/// What the guards of every connection share.
struct TransportShared: Sendable {
    let limits: HTTPLimits
    let connections: ConnectionRegistry
    let budget: BodyBudget
    let metrics: TransportMetrics
}
