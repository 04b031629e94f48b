import Foundation
import LedgerStorage

/// The push outbox: notifications waiting for delivery, the dead letters, the counters, and
/// the change-feed position up to which notifications have been derived.
///
/// It is its own LMDB environment (`push` inside the data directory), apart from the ledger:
/// the write path never waits on it, a follower never receives it, and it can be deleted and
/// rebuilt from the log. Rows are derived from the change feed *after* the commit (see
/// docs/push.md): the cursor and the rows it produced are written in one transaction, so a
/// crash either keeps both or loses both — and then the same rows are derived again. Delivery
/// is at least once.
///
/// Several processes may open it (the server, and `syncledger push …` beside it).
public final class PushOutbox: Sendable {
    let environment: Environment
    let meta: Database
    let pending: Database
    let due: Database
    let dead: Database

    /// The outbox's folder.
    public var directory: String { environment.path }

    /// Opens (creating if needed) the outbox in `directory`.
    ///
    /// - Parameter durable: flush every commit to disk (as the ledger does). The outbox flushes
    ///   only the data, not the meta page (`MDB_NOMETASYNC`): a power cut may undo its latest
    ///   commit, which costs nothing but a repeat — a cursor move is derived again from the
    ///   log, a settled notification is sent again (at least once).
    /// - Throws: ``LedgerError`` `.storage` when the folder cannot be made or opened.
    public init(directory: String, durable: Bool = true) throws {
        try makePrivateDirectory(directory, what: "the push outbox folder")
        var options = EnvironmentOptions()
        options.initialMapSize = 64 << 20
        options.maxDatabases = 8
        options.durable = durable
        options.syncsMetadata = false
        do {
            environment = try Environment(path: directory, options: options)
            meta = try environment.openDatabase("meta")
            pending = try environment.openDatabase("pending")
            due = try environment.openDatabase("due")
            dead = try environment.openDatabase("dead")
        } catch {
            throw LedgerError(.storage, "cannot open the push outbox in \(directory): \(error)", underlying: error)
        }
    }

    func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        do { return try environment.read(body) } catch let error as LedgerError { throw error } catch {
            throw LedgerError(.storage, "cannot read the push outbox in \(directory): \(error)", underlying: error)
        }
    }

    func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        do {
            if environment.isOutOfSpace() { try environment.grow() }
            return try environment.write(body)
        } catch let error as LedgerError { throw error } catch {
            throw LedgerError(.storage, "cannot write the push outbox in \(directory): \(error)", underlying: error)
        }
    }

    // MARK: Rows

    /// A row's bytes: version 1, then the fields in a fixed order (a compact binary form; the
    /// outbox rewrites rows often under load, and JSON would cost more than the rest).
    static func encode(_ n: PushNotification) -> [UInt8] {
        var w = ByteWriter(capacity: 160 + n.token.utf8.count)
        w.byte(n.custom == nil ? 1 : 2)
        for text in [n.pool, n.identity, n.dataset, n.deviceID, n.platform.rawValue, n.token] { w.string(text) }
        w.varint(n.syncCount)
        w.varint(n.sequence)
        w.signed(n.committed.milliseconds)
        w.varint(UInt64(max(n.attempts, 0)))
        w.signed(n.nextAttempt.milliseconds)
        w.byte(n.inFlight ? 1 : 0)
        for time in [n.deadSince, n.retried] {
            if let time { w.byte(1); w.signed(time.milliseconds) } else { w.byte(0) }
        }
        if let error = n.lastError { w.byte(1); w.string(error) } else { w.byte(0) }
        if let custom = n.custom {
            w.varint(UInt64(custom.count))
            for (key, value) in custom.sorted(by: { $0.key < $1.key }) { w.string(key); w.string(value) }
        }
        return w.bytes
    }

    static func decode(_ bytes: [UInt8]) throws -> PushNotification {
        do throws(DecodeFailure) {
            var r = ByteReader(bytes[...])
            let version = try r.byte()
            guard version == 1 || version == 2 else { throw DecodeFailure(description: "unknown row version") }
            let pool = try r.string(), identity = try r.string(), dataset = try r.string(), device = try r.string()
            guard let platform = Platform(rawValue: try r.string()) else { throw DecodeFailure(description: "unknown platform") }
            let token = try r.string()
            var n = PushNotification(pool: pool, identity: identity, dataset: dataset, deviceID: device, platform: platform, token: token,
                                     syncCount: try r.varint(), sequence: try r.varint(), committed: Timestamp(milliseconds: try r.signed()))
            n.attempts = Int(clamping: try r.varint())
            n.nextAttempt = Timestamp(milliseconds: try r.signed())
            n.inFlight = try r.byte() == 1
            n.deadSince = try r.byte() == 1 ? Timestamp(milliseconds: try r.signed()) : nil
            n.retried = try r.byte() == 1 ? Timestamp(milliseconds: try r.signed()) : nil
            n.lastError = try r.byte() == 1 ? try r.string() : nil
            if version == 2 {
                var custom: [String: String] = [:]
                for _ in 0..<min(try r.varint(), 10_000) { custom[try r.string()] = try r.string() }
                n.custom = custom
            }
            try r.expectEnd()
            return n
        } catch {
            throw LedgerError(.corruptData, "a push outbox row does not decode: \(error)")
        }
    }

    static func dueKey(_ n: PushNotification) -> [UInt8] {
        [UInt8].bigEndian(UInt64(bitPattern: max(n.nextAttempt.milliseconds, 0))) + n.key
    }

    /// Writes `n` as the pending row of its key, moving its due-index entry from `old`'s.
    func putPending(_ txn: Transaction, _ n: PushNotification, replacing old: PushNotification?) throws {
        if let old { _ = try txn.delete(due, key: Self.dueKey(old)) }
        try txn.put(pending, key: n.key, value: Self.encode(n))
        try txn.put(due, key: Self.dueKey(n), value: [])
    }

    func removePending(_ txn: Transaction, _ n: PushNotification) throws {
        _ = try txn.delete(due, key: Self.dueKey(n))
        _ = try txn.delete(pending, key: n.key)
    }

    // MARK: Counters

    /// A counter kept per transport: `count/<transport>/<name>`.
    static func counterKey(_ transport: PushTransportKind, _ name: PushCounter) -> [UInt8] {
        Array("count/\(transport.rawValue)/\(name.rawValue)".utf8)
    }

    func counter(_ txn: Transaction, _ transport: PushTransportKind, _ name: PushCounter) throws -> Int64 {
        guard let bytes = try txn.get(meta, key: Self.counterKey(transport, name)), bytes.count == 8 else { return 0 }
        return Int64(bitPattern: bytes.bigEndianUInt64())
    }

    func bump(_ txn: Transaction, _ transport: PushTransportKind, _ name: PushCounter, by delta: Int64 = 1) throws {
        let value = try counter(txn, transport, name) &+ delta
        try txn.put(meta, key: Self.counterKey(transport, name), value: [UInt8].bigEndian(UInt64(bitPattern: max(value, 0))))
    }

    // MARK: Cursor

    private static let cursorKey = Array("cursor".utf8)

    /// The change-feed sequence up to which notifications have been derived (0: none yet).
    public func cursor() throws -> UInt64 {
        try read { txn in try txn.get(meta, key: Self.cursorKey).map { $0.count == 8 ? $0.bigEndianUInt64() : 0 } ?? 0 }
    }

    /// Sets the cursor to `sequence` unless the outbox has one: a new outbox starts at the
    /// end of the log, so a server that gains push delivery does not notify all of history.
    public func startCursor(at sequence: UInt64) throws {
        try write { txn in
            if try txn.get(meta, key: Self.cursorKey) == nil { try txn.put(meta, key: Self.cursorKey, value: [UInt8].bigEndian(sequence)) }
        }
    }

    /// Adds `notifications` and moves the cursor to `cursor`, in one transaction.
    ///
    /// A row already pending for the same device and dataset stands for the new change too
    /// (collapse: it is sent with the dataset's sync count at sending time); only a row being
    /// sent records the newer sync count, so that it is sent again afterwards. Its attempts and
    /// schedule stay: a transport in backoff is not hammered by a busy dataset.
    /// - Returns: how many rows were new or replaced.
    @discardableResult
    public func enqueue(_ notifications: [PushNotification], cursor: UInt64, skipped: [PushTransportKind: Int64] = [:],
                        collapsed: [PushTransportKind: Int64] = [:]) throws -> Int {
        try write { txn in
            var changed = 0
            for n in notifications {
                if let bytes = try txn.get(pending, key: n.key) {
                    // A row waiting to be sent already stands for this change: it is sent with
                    // the dataset's sync count at sending time, the newest. Only a row being
                    // sent must learn that a newer change came, to be sent again after.
                    try bump(txn, n.transport, .collapsed)
                    try bump(txn, n.transport, .queued)
                    var row = try Self.decode(bytes)
                    guard row.inFlight, n.syncCount > row.syncCount else { continue }
                    let old = row
                    row.syncCount = n.syncCount
                    row.sequence = n.sequence
                    try putPending(txn, row, replacing: old)
                } else {
                    try putPending(txn, n, replacing: nil)
                    try bump(txn, n.transport, .pending)
                    try bump(txn, n.transport, .queued)
                }
                changed += 1
            }
            for (transport, count) in skipped where count > 0 { try bump(txn, transport, .skipped, by: count) }
            for (transport, count) in collapsed where count > 0 {
                try bump(txn, transport, .collapsed, by: count)
                try bump(txn, transport, .queued, by: count)
            }
            let current = try txn.get(meta, key: Self.cursorKey).map { $0.count == 8 ? $0.bigEndianUInt64() : 0 } ?? 0
            if cursor > current { try txn.put(meta, key: Self.cursorKey, value: [UInt8].bigEndian(cursor)) }
            return changed
        }
    }

    // MARK: Time to live

    static func ttlKey(_ pool: String) -> [UInt8] { Array("ttl/\(pool)".utf8) }

    /// The pool's time-to-live, nil when it has none of its own.
    public func timeToLive(pool: String) throws -> Duration? {
        try read { txn in try ttl(txn, pool: pool) }
    }

    func ttl(_ txn: Transaction, pool: String) throws -> Duration? {
        guard let bytes = try txn.get(meta, key: Self.ttlKey(pool)), bytes.count == 8 else { return nil }
        return .milliseconds(Int64(bitPattern: bytes.bigEndianUInt64()))
    }

    /// Sets (or with nil, removes) the pool's time-to-live.
    /// - Throws: `.invalidParameter` unless it is 1 second to 28 days (FCM's and APNs's longest).
    public func setTimeToLive(pool: String, _ ttl: Duration?) throws {
        if let ttl, ttl < .seconds(1) || ttl > .seconds(28 * 86_400) {
            throw LedgerError(.invalidParameter, "a push time-to-live must be 1 second to 28 days (2419200 seconds)")
        }
        try write { txn in
            if let ttl {
                try txn.put(meta, key: Self.ttlKey(pool), value: [UInt8].bigEndian(UInt64(bitPattern: ttl.milliseconds)))
            } else {
                _ = try txn.delete(meta, key: Self.ttlKey(pool))
            }
        }
    }

    /// When `n` expires: its commit (or its manual retry) plus its pool's time-to-live.
    func expiry(_ txn: Transaction, _ n: PushNotification, policy: PushPolicy) throws -> Timestamp {
        (n.retried ?? n.committed).adding(try ttl(txn, pool: n.pool) ?? policy.defaultTimeToLive)
    }
}

/// The counters the outbox keeps per transport.
public enum PushCounter: String, Sendable, CaseIterable, Codable {
    /// Rows waiting now (in flight included).
    case pending
    /// Rows with an attempt under way now.
    case inFlight = "in_flight"
    /// Rows in the dead-letter list now.
    case deadNow = "dead_now"
    /// Notifications ever made.
    case queued
    /// Notifications replaced by a newer sync count before they went out.
    case collapsed
    /// Accepted by the push service.
    case delivered
    /// Dropped unsent because their time-to-live passed.
    case expired
    /// Sent to the dead letters.
    case dead
    /// Dropped because the service reported the token dead (the token was disabled).
    case tokenDisabled = "token_disabled"
    /// Attempts that failed and were scheduled again.
    case retried
    /// Changes not notified: the device's token was disabled, or the pool has no push sync
    /// configured for the device's platform.
    case skipped
    /// Dropped unsent because the device left before its turn: logged out, logged in as
    /// another identity, or without a token now.
    case unrouted
}
