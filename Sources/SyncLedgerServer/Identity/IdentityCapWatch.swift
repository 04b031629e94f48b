import Synchronization

/// The identity pools that passed 80 % of their cap (`--max-identities-per-pool`, counted as
/// the limit counts: records of the pool's identities stream), seen when a call creates an
/// identity. A pool is warned about once each time it passes the mark; it is shown in
/// `/metrics` while it stays above.
final class IdentityCapWatch: Sendable {
    /// The share of the cap past which a pool is reported.
    static let warningShare = 0.8
    /// The most pools shown; past it, the fullest are kept.
    static let maxShown = 1000

    private struct State {
        var above: [String: UInt64] = [:]
        var warnings: UInt64 = 0
    }

    let cap: Int
    private let state = Mutex(State())

    init(cap: Int) {
        self.cap = cap
    }

    /// The count past which a pool is reported.
    var threshold: UInt64 { UInt64((Double(cap) * Self.warningShare).rounded(.up)) }

    /// Records `pool`'s count of identity records.
    /// - Returns: true when it has just passed the mark (the caller logs the warning).
    func observe(pool: String, records: UInt64) -> Bool {
        state.withLock { s in
            guard records >= threshold else {
                s.above[pool] = nil
                return false
            }
            let first = s.above[pool] == nil
            s.above[pool] = records
            if first { s.warnings += 1 }
            if s.above.count > Self.maxShown, let least = s.above.min(by: { $0.value < $1.value }) { s.above[least.key] = nil }
            return first
        }
    }

    /// Sets the cap, the warnings and each pool past the mark at scrape time (a pool back under
    /// it is no longer shown).
    func refresh(into scrape: inout MetricsScrape) {
        let (above, warnings) = state.withLock { ($0.above, $0.warnings) }
        scrape.gauge("syncledger_identity_pool_cap", help: "Identity records one Cognito Identity pool may hold (--max-identities-per-pool).", cap)
        scrape.counter("syncledger_identity_pool_cap_warnings_total", help: "Times a pool passed 80 % of its cap (each also logged as a warning).", total: warnings)
        for (pool, count) in above {
            scrape.gauge("syncledger_identity_pool_records", help: "Identity records of the pools past 80 % of their cap, as last seen.",
                         labels: [("pool", pool)], count)
        }
    }
}
