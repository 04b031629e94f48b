import Foundation
import Synchronization

/// A token bucket: holds at most ``burst`` tokens, gains ``rate`` a second, and a request
/// takes one. Time is passed in (seconds of a monotonic clock), so it is tested without sleeping.
public struct TokenBucket: Sendable, Equatable {
    /// Tokens gained per second.
    public let rate: Double
    /// The most tokens it holds: how many requests pass at once after a quiet spell.
    public let burst: Double
    /// Tokens now (as of ``updated``).
    public private(set) var tokens: Double
    /// When ``tokens`` was last brought up to date.
    public private(set) var updated: Double

    /// A full bucket at `now`.
    public init(rate: Double, burst: Double, now: Double) {
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.updated = now
    }

    /// Adds what `now - updated` earned (a clock that went back earns nothing).
    public mutating func refill(now: Double) {
        guard now > updated else { return }
        tokens = min(burst, tokens + (now - updated) * rate)
        updated = now
    }

    /// What a token may lack for rounding (0.1 s at 10 a second earns 0.99999999999999 tokens).
    static let epsilon = 1e-9

    /// Takes one token when there is one.
    /// - Returns: whether the request may pass.
    public mutating func take(now: Double) -> Bool {
        refill(now: now)
        guard tokens >= 1 - Self.epsilon else { return false }
        tokens = max(0, tokens - 1)
        return true
    }

    /// Seconds from `now` until a token is there (0 when one is).
    public func secondsUntilToken(now: Double) -> Double {
        var copy = self
        copy.refill(now: now)
        return copy.tokens >= 1 - Self.epsilon || rate <= 0 ? 0 : (1 - copy.tokens) / rate
    }

    /// Whether it would be full at `now` (then forgetting it changes nothing).
    public func isFull(now: Double) -> Bool {
        var copy = self
        copy.refill(now: now)
        return copy.tokens >= burst
    }
}

/// The limits of the unsigned Cognito Identity operations (GetId, GetCredentialsForIdentity,
/// GetOpenIdToken, UnlinkIdentity): one token bucket per source and one per identity pool,
/// shared by the four operations. A rate of 0 turns that bucket off.
public struct IdentityThrottleOptions: Sendable, Equatable {
    /// Requests a second one source may make (`--identity-source-rate`); a source is an IPv4
    /// address or an IPv6 /64 (``ClientSource``).
    public var sourceRate: Double = 20
    /// Requests one source may make at once (`--identity-source-burst`).
    public var sourceBurst: Double = 100
    /// Requests a second one identity pool takes from every source together (`--identity-pool-rate`).
    public var poolRate: Double = 200
    /// Requests one identity pool takes at once (`--identity-pool-burst`).
    public var poolBurst: Double = 1000
    /// Addresses of reverse proxies (or cluster nodes) whose `X-Forwarded-For` is believed
    /// (`--trusted-proxy`, exact addresses). From any other peer the header is ignored: its
    /// sender could name any source he likes.
    public var trustedProxies: [String] = []
    /// The most buckets kept per kind; past it, full ones are forgotten first.
    public var maxTracked: Int = 100_000

    /// The defaults above.
    public init() {}

    /// Checks the values.
    /// - Throws: ``StartupError`` naming the flag.
    public func validate() throws {
        for (name, value) in [("--identity-source-rate", sourceRate), ("--identity-pool-rate", poolRate)] {
            guard value.isFinite, (0...1_000_000).contains(value) else { throw StartupError("\(name) must be 0 (off) to 1000000 requests a second, not \(value)") }
        }
        for (name, value) in [("--identity-source-burst", sourceBurst), ("--identity-pool-burst", poolBurst)] {
            guard value.isFinite, (1...10_000_000).contains(value) else { throw StartupError("\(name) must be 1 to 10000000 requests, not \(value)") }
        }
        for proxy in trustedProxies where ClientSource.normalizedAddress(proxy) == nil {
            throw StartupError("--trusted-proxy must be an IPv4 or IPv6 address, not \(String(proxy.prefix(80)))")
        }
        guard maxTracked >= 1 else { throw StartupError("the identity throttle must track at least one bucket") }
    }
}

/// The token buckets of the unsigned Cognito Identity operations, and their counts for
/// `/metrics`. Every node of a cluster keeps its own.
final class IdentityThrottle: Sendable {
    /// The operations it limits.
    static let operations: Set<String> = ["GetId", "GetCredentialsForIdentity", "GetOpenIdToken", "UnlinkIdentity"]

    /// Which bucket refused a request.
    enum Limit: String, Sendable {
        case source
        case pool
    }

    private struct State {
        var sources: [String: TokenBucket] = [:]
        var pools: [String: TokenBucket] = [:]
        /// Refusals by operation and limit.
        var refused: [String: UInt64] = [:]
    }

    let options: IdentityThrottleOptions
    /// How a request's source is found (`--trusted-proxy`), shared with `GET /events`.
    let sources: ClientSource
    private let clock: @Sendable () -> Double
    private let state = Mutex(State())

    /// - Parameter clock: seconds of a monotonic clock (tests give their own).
    init(options: IdentityThrottleOptions, clock: @escaping @Sendable () -> Double = IdentityThrottle.monotonicSeconds) {
        self.options = options
        self.sources = ClientSource(trustedProxies: options.trustedProxies)
        self.clock = clock
    }

    /// Seconds since an arbitrary start, never going back.
    static func monotonicSeconds() -> Double {
        let d = ContinuousClock.now - start
        return d.inSeconds
    }
    private static let start = ContinuousClock.now

    /// The source a request is counted against (``ClientSource``): its peer's address or, from a
    /// trusted proxy, the client `X-Forwarded-For` names; an IPv6 address counts as its /64;
    /// "unknown" when the peer is unknown.
    func source(peer: String?, forwardedFor: String?) -> String {
        sources.source(peer: peer, forwardedFor: forwardedFor) ?? "unknown"
    }

    /// The source of `request` (see ``source(peer:forwardedFor:)``).
    func source(of request: WireRequest) -> String { sources.source(of: request) ?? "unknown" }

    /// Takes a token from `source`'s bucket.
    /// - Returns: nil when the request may pass, else the seconds until it could.
    func admit(source: String, operation: String) -> Double? {
        guard options.sourceRate > 0 else { return nil }
        return take(.source, key: source, operation: operation, rate: options.sourceRate, burst: options.sourceBurst)
    }

    /// Takes a token from the bucket of identity pool `pool`.
    /// - Returns: nil when the request may pass, else the seconds until it could.
    func admit(pool: String, operation: String) -> Double? {
        guard options.poolRate > 0 else { return nil }
        return take(.pool, key: pool, operation: operation, rate: options.poolRate, burst: options.poolBurst)
    }

    private func take(_ limit: Limit, key: String, operation: String, rate: Double, burst: Double) -> Double? {
        let now = clock()
        let max = options.maxTracked
        return state.withLock { s -> Double? in
            func run(_ buckets: inout [String: TokenBucket]) -> Double? {
                if buckets[key] == nil, buckets.count >= max {
                    // A full bucket is what a new one would be: forgetting those changes nothing.
                    buckets = buckets.filter { !$0.value.isFull(now: now) }
                    // Still too many (a flood from many sources): forget the oldest half. They
                    // start full again; the pool's bucket still bounds what they can do.
                    if buckets.count >= max {
                        let keep = buckets.sorted { $0.value.updated > $1.value.updated }.prefix(max / 2)
                        buckets = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
                    }
                }
                var bucket = buckets[key] ?? TokenBucket(rate: rate, burst: burst, now: now)
                let passed = bucket.take(now: now)
                buckets[key] = bucket
                return passed ? nil : bucket.secondsUntilToken(now: now)
            }
            let wait = limit == .source ? run(&s.sources) : run(&s.pools)
            if wait != nil { s.refused["\(operation)\u{0}\(limit.rawValue)", default: 0] += 1 }
            return wait
        }
    }

    /// Sets the limits, the refusals and the buckets kept at scrape time.
    func refresh(into scrape: inout MetricsScrape) {
        let (refused, sources, pools) = state.withLock { ($0.refused, $0.sources.count, $0.pools.count) }
        for operation in Self.operations.sorted() {
            for limit in [Limit.source, .pool] {
                scrape.counter("syncledger_identity_throttled_total",
                               help: "Unsigned Cognito Identity calls refused with 429 TooManyRequestsException, by operation and the bucket that refused them (source or pool).",
                               labels: [("operation", operation), ("limit", limit.rawValue)], total: refused["\(operation)\u{0}\(limit.rawValue)"] ?? 0)
            }
        }
        for (limit, rate, burst, kept) in [(Limit.source, options.sourceRate, options.sourceBurst, sources), (.pool, options.poolRate, options.poolBurst, pools)] {
            scrape.gauge("syncledger_identity_throttle_rate", help: "Requests a second a bucket of the unsigned Cognito Identity calls refills (0: off).",
                         labels: [("limit", limit.rawValue)], rate)
            scrape.gauge("syncledger_identity_throttle_burst", help: "Requests a full bucket lets through at once.", labels: [("limit", limit.rawValue)], burst)
            scrape.gauge("syncledger_identity_throttle_buckets", help: "Buckets kept now (sources and pools seen lately).", labels: [("limit", limit.rawValue)], kept)
        }
    }
}
