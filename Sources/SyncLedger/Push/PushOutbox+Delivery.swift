import Foundation
import LedgerStorage

/// Leasing, settling, expiring and dead-lettering outbox rows.
extension PushOutbox {
    /// Takes up to `limit` rows that are due at `now`: each is marked in flight with one more
    /// attempt, until ``settle(_:now:policy:)`` records how it went. Rows whose time-to-live
    /// has passed are dropped and counted as expired instead.
    ///
    /// - Returns: the leased rows, and how many expired.
    public func lease(now: Timestamp, limit: Int, policy: PushPolicy) throws -> (leased: [PushNotification], expired: Int) {
        try write { txn in try lease(txn, now: now, limit: limit, policy: policy) }
    }

    /// Records outcomes (as ``settle(_:now:policy:)``) and leases up to `limit` due rows (as
    /// ``lease(now:limit:policy:)``) in one transaction: the deliverer's one commit per round.
    public func settleAndLease(_ results: [(PushNotification, PushOutcome)], now: Timestamp, limit: Int, policy: PushPolicy) throws
        -> (settled: [Settled], leased: [PushNotification], expired: Int)
    {
        try write { txn in
            let settled = try results.map { try settle(txn, $0.0, $0.1, now: now, policy: policy) }
            let (leased, expired) = limit > 0 ? try lease(txn, now: now, limit: limit, policy: policy) : ([], 0)
            return (settled, leased, expired)
        }
    }

    private func lease(_ txn: Transaction, now: Timestamp, limit: Int, policy: PushPolicy) throws -> (leased: [PushNotification], expired: Int) {
        do {
            var candidates: [[UInt8]] = []
            try txn.withCursor(due) { cursor in
                var pair = try cursor.first()
                while let current = pair, candidates.count < limit {
                    guard current.key.count > 8, Int64(bitPattern: current.key.bigEndianUInt64()) <= now.milliseconds else { break }
                    candidates.append(Array(current.key.dropFirst(8)))
                    pair = try cursor.next()
                }
            }
            var leased: [PushNotification] = []
            var expired = 0
            for key in candidates {
                guard let bytes = try txn.get(pending, key: key) else { continue }
                var row = try Self.decode(bytes)
                let old = row
                if try expiry(txn, row, policy: policy) <= now {
                    try removePending(txn, row)
                    try bump(txn, row.transport, .pending, by: -1)
                    if row.inFlight { try bump(txn, row.transport, .inFlight, by: -1) }
                    try bump(txn, row.transport, .expired)
                    expired += 1
                    continue
                }
                if !row.inFlight { try bump(txn, row.transport, .inFlight) }
                row.inFlight = true
                row.attempts += 1
                row.nextAttempt = Self.never
                try putPending(txn, row, replacing: old)
                leased.append(row)
            }
            return (leased, expired)
        }
    }

    /// The earliest time a pending row is due, or nil when there is none.
    public func nextDue() throws -> Timestamp? {
        try read { txn in
            try txn.withCursor(due) { cursor in
                try cursor.first().map { Timestamp(milliseconds: Int64(bitPattern: $0.key.bigEndianUInt64())) }
            }
        }
    }

    /// Ends every lease: rows in flight when a server stopped (or was killed) are due at once.
    /// Called by a server when it starts, before it delivers anything.
    /// - Returns: how many rows were in flight.
    @discardableResult
    public func releaseLeases(now: Timestamp) throws -> Int {
        try write { txn in
            var rows: [PushNotification] = []
            try txn.withCursor(pending) { cursor in
                var pair = try cursor.first()
                while let current = pair {
                    let row = try Self.decode(current.value)
                    if row.inFlight { rows.append(row) }
                    pair = try cursor.next()
                }
            }
            for old in rows {
                var row = old
                row.inFlight = false
                row.nextAttempt = now
                try putPending(txn, row, replacing: old)
                try bump(txn, row.transport, .inFlight, by: -1)
            }
            return rows.count
        }
    }

    /// What settling a leased row came to.
    public enum Settled: Sendable, Equatable {
        /// Delivered and removed (or a newer sync count is now due).
        case delivered
        /// Scheduled again at this time.
        case retrying(at: Timestamp)
        /// Dropped: its time-to-live ends before the next attempt could be made.
        case expired
        /// Moved to the dead letters.
        case dead(reason: String)
        /// Dropped: the token was reported dead.
        case tokenDisabled
        /// Dropped: the device left (see ``PushOutcome/unrouted(reason:)``).
        case unrouted
        /// The row was no longer there (taken back by `push retry`, or settled already).
        case gone
    }

    /// Records the outcomes of attempts at leased rows (returned by
    /// ``lease(now:limit:policy:)``), all in one transaction.
    ///
    /// When a newer sync count was collapsed into a row while it was in flight, the row stays
    /// and is due at once (unless the token is dead), so the newer count still goes out.
    public func settle(_ results: [(PushNotification, PushOutcome)], now: Timestamp, policy: PushPolicy) throws -> [Settled] {
        try write { txn in try results.map { try settle(txn, $0.0, $0.1, now: now, policy: policy) } }
    }

    /// The due time of a row in flight: never, until it is settled or released.
    static let never = Timestamp(milliseconds: .max)

    private func settle(_ txn: Transaction, _ leased: PushNotification, _ outcome: PushOutcome, now: Timestamp, policy: PushPolicy) throws -> Settled {
        do {
            guard let bytes = try txn.get(pending, key: leased.key) else { return .gone }
            var row = try Self.decode(bytes)
            guard row.inFlight else { return .gone }
            let old = row
            let transport = row.transport
            let newer = row.syncCount > leased.syncCount
            row.inFlight = false
            try bump(txn, transport, .inFlight, by: -1)

            func drop(_ counter: PushCounter) throws {
                try removePending(txn, old)
                try bump(txn, transport, .pending, by: -1)
                try bump(txn, transport, counter)
            }
            func kill(_ reason: String) throws -> Settled {
                try drop(.dead)
                row.lastError = reason
                row.deadSince = now
                if try txn.get(dead, key: row.key) == nil { try bump(txn, transport, .deadNow) }
                try txn.put(dead, key: row.key, value: Self.encode(row))
                return .dead(reason: reason)
            }

            switch outcome {
            case .delivered:
                try bump(txn, transport, .delivered)
                if newer {
                    row.attempts = 0
                    row.lastError = nil
                    row.nextAttempt = now
                    try putPending(txn, row, replacing: old)
                } else {
                    try removePending(txn, old)
                    try bump(txn, transport, .pending, by: -1)
                }
                return .delivered
            case .tokenDead:
                try drop(.tokenDisabled)
                return .tokenDisabled
            case .unrouted:
                try drop(.unrouted)
                return .unrouted
            case .failed(let reason):
                return try kill(reason)
            case .retry(let reason, let after):
                row.lastError = reason
                if let after, after > policy.maxRetryAfter {
                    return try kill("\(reason); the service asked to wait \(after.components.seconds) s, past the \(policy.maxRetryAfter.components.seconds) s limit")
                }
                if row.attempts >= policy.maxAttempts {
                    return try kill("\(reason) (gave up after \(row.attempts) attempts)")
                }
                let delay = max(policy.backoff(afterAttempts: row.attempts), after ?? .zero)
                let next = now.adding(delay)
                if try expiry(txn, row, policy: policy) <= next {
                    try drop(.expired)
                    return .expired
                }
                row.nextAttempt = next
                try putPending(txn, row, replacing: old)
                try bump(txn, transport, .retried)
                return .retrying(at: next)
            }
        }
    }

    // MARK: Operator views

    /// The counts of one transport.
    public struct TransportStatus: Sendable, Equatable, Codable {
        /// The transport.
        public var transport: PushTransportKind
        /// Every counter, by name.
        public var counts: [String: Int64]
    }

    /// Every counter of every transport, and the cursor.
    public func status() throws -> (cursor: UInt64, transports: [TransportStatus]) {
        try read { txn in
            let cursor = try txn.get(meta, key: Array("cursor".utf8)).map { $0.count == 8 ? $0.bigEndianUInt64() : 0 } ?? 0
            let transports = try PushTransportKind.allCases.map { transport in
                TransportStatus(transport: transport, counts: Dictionary(uniqueKeysWithValues: try PushCounter.allCases.map {
                    ($0.rawValue, try counter(txn, transport, $0))
                }))
            }
            return (cursor, transports)
        }
    }

    /// Pending rows in due order (at most `limit`).
    public func pendingRows(limit: Int = 1000) throws -> [PushNotification] {
        try read { txn in
            try txn.withCursor(due) { cursor in
                var rows: [PushNotification] = []
                var pair = try cursor.first()
                while let current = pair, rows.count < limit {
                    if let bytes = try txn.get(pending, key: Array(current.key.dropFirst(8))) { rows.append(try Self.decode(bytes)) }
                    pair = try cursor.next()
                }
                return rows
            }
        }
    }

    /// The dead letters, oldest key first (at most `limit`), optionally of one pool.
    public func deadLetters(pool: String? = nil, limit: Int = 1000) throws -> [PushNotification] {
        try read { txn in
            try txn.withCursor(dead) { cursor in
                var rows: [PushNotification] = []
                var pair = try pool.map { try cursor.seek(atLeast: Array("\($0)\u{0}".utf8)) } ?? cursor.first()
                while let current = pair, rows.count < limit {
                    let row = try Self.decode(current.value)
                    if let pool, row.pool != pool { break }
                    rows.append(row)
                    pair = try cursor.next()
                }
                return rows
            }
        }
    }

    /// Takes dead letters back into the outbox, due at once with fresh attempts and a fresh
    /// time-to-live (from now). A row already pending for the same device and dataset keeps
    /// the newer sync count of the two.
    /// - Parameters:
    ///   - pool: only this pool's; nil: all.
    ///   - deviceID: only this device's; nil: all.
    /// - Returns: how many were taken back.
    public func retryDeadLetters(pool: String? = nil, deviceID: String? = nil, now: Timestamp) throws -> Int {
        try write { txn in
            var rows: [PushNotification] = []
            try txn.withCursor(dead) { cursor in
                var pair = try cursor.first()
                while let current = pair {
                    let row = try Self.decode(current.value)
                    if (pool == nil || row.pool == pool) && (deviceID == nil || row.deviceID == deviceID) { rows.append(row) }
                    pair = try cursor.next()
                }
            }
            for letter in rows {
                _ = try txn.delete(dead, key: letter.key)
                try bump(txn, letter.transport, .deadNow, by: -1)
                var row = letter
                row.attempts = 0
                row.inFlight = false
                row.lastError = nil
                row.deadSince = nil
                row.retried = now
                row.nextAttempt = now
                if let bytes = try txn.get(pending, key: row.key) {
                    let existing = try Self.decode(bytes)
                    if existing.syncCount >= row.syncCount { continue }
                    if existing.inFlight { try bump(txn, row.transport, .inFlight, by: -1) }
                    try putPending(txn, row, replacing: existing)
                } else {
                    try putPending(txn, row, replacing: nil)
                    try bump(txn, row.transport, .pending)
                }
            }
            return rows.count
        }
    }
}
