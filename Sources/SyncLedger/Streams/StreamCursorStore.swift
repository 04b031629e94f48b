import Foundation
import LedgerStorage

/// One pool's Cognito stream target: where its delivery stands in the change feed and what it
/// has delivered.
public struct StreamTarget: Sendable, Hashable, Codable {
    /// The pool.
    public var pool: String
    /// The `StreamName` its records go to.
    public var streamName: String
    /// The last feed position whose records the sink acknowledged (every record up to it was
    /// delivered).
    public var cursor: UInt64
    /// Records acknowledged by the sink, ever.
    public var delivered: Int64 = 0
    /// Batches acknowledged by the sink, ever.
    public var batches: Int64 = 0
    /// Failed delivery attempts (each retried), ever.
    public var failures: Int64 = 0
    /// The latest failure's reason, cleared by the next acknowledged batch.
    public var lastError: String?
    /// When the cursor was made.
    public var created: Timestamp
    /// On a cluster node, the shard whose messages the cursor counts: `cursor` is then a
    /// sequence of that shard's log, the same on every node (nil: a single node's feed position).
    public var shard: Int?

    /// A target starting at `cursor`.
    public init(pool: String, streamName: String, cursor: UInt64, created: Timestamp = .now) {
        self.pool = pool
        self.streamName = streamName
        self.cursor = cursor
        self.created = created
    }
}

/// The Cognito Streams cursors: one per pool and `StreamName`, in their own LMDB environment
/// (`streams` inside the data directory), apart from the ledger like the push outbox — the
/// write path never waits on it, a follower never receives it.
///
/// A cursor moves only after the sink acknowledged the batch up to it, so delivery is at least
/// once: a crash between the acknowledgement and the cursor's commit sends that batch again.
/// Several processes may open it (the server, and `syncledger streams status` beside it).
public final class StreamCursorStore: Sendable {
    let environment: Environment
    let targets: Database
    let bulk: Database

    /// The store's folder.
    public var directory: String { environment.path }

    /// Opens (creating if needed) the store in `directory`.
    /// - Throws: ``LedgerError`` `.storage` when the folder cannot be made or opened.
    public init(directory: String, durable: Bool = true) throws {
        try makePrivateDirectory(directory, what: "the streams folder")
        var options = EnvironmentOptions()
        options.initialMapSize = 8 << 20
        options.maxDatabases = 4
        options.durable = durable
        do {
            environment = try Environment(path: directory, options: options)
            targets = try environment.openDatabase("targets")
            bulk = try environment.openDatabase("bulk-publish")
        } catch {
            throw LedgerError(.storage, "cannot open the stream cursors in \(directory): \(error)", underlying: error)
        }
    }

    func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        do { return try environment.read(body) } catch let error as LedgerError { throw error } catch {
            throw LedgerError(.storage, "cannot read the stream cursors in \(directory): \(error)", underlying: error)
        }
    }

    func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        do {
            if environment.isOutOfSpace() { try environment.grow() }
            return try environment.write(body)
        } catch let error as LedgerError { throw error } catch {
            throw LedgerError(.storage, "cannot write the stream cursors in \(directory): \(error)", underlying: error)
        }
    }

    static func key(pool: String, streamName: String) -> [UInt8] { Array(pool.utf8) + [0] + Array(streamName.utf8) }

    static func decode(_ bytes: [UInt8]) throws -> StreamTarget {
        do { return try JSONDecoder().decode(StreamTarget.self, from: Data(bytes)) } catch {
            throw LedgerError(.corruptData, "a stream cursor does not decode: \(error)")
        }
    }

    static func encode(_ t: StreamTarget) throws -> [UInt8] { Array(try JSONEncoder().encode(t)) }

    /// The target of `pool` and `streamName`, nil when it has no cursor yet.
    public func target(pool: String, streamName: String) throws -> StreamTarget? {
        try read { txn in try txn.get(targets, key: Self.key(pool: pool, streamName: streamName)).map(Self.decode) }
    }

    /// Every target, by pool and stream name.
    public func all() throws -> [StreamTarget] {
        try read { txn in
            try txn.withCursor(targets) { cursor in
                var result: [StreamTarget] = []
                var pair = try cursor.first()
                while let current = pair {
                    result.append(try Self.decode(current.value))
                    pair = try cursor.next()
                }
                return result
            }
        }
    }

    /// Makes the target with its cursor at `cursor` unless it has one; returns the target.
    @discardableResult
    public func start(pool: String, streamName: String, at cursor: UInt64) throws -> StreamTarget {
        try write { txn in
            let key = Self.key(pool: pool, streamName: streamName)
            if let bytes = try txn.get(targets, key: key) { return try Self.decode(bytes) }
            let t = StreamTarget(pool: pool, streamName: streamName, cursor: cursor)
            try txn.put(targets, key: key, value: try Self.encode(t))
            return t
        }
    }

    /// Records that the sink acknowledged `records` records up to feed position `cursor`
    /// (0 records: the feed stretch held none of the pool's syncs), moving the cursor forward.
    @discardableResult
    public func acknowledge(pool: String, streamName: String, through cursor: UInt64, records: Int) throws -> StreamTarget {
        try update(pool: pool, streamName: streamName) { t in
            t.cursor = max(t.cursor, cursor)
            if records > 0 {
                t.delivered += Int64(records)
                t.batches += 1
                t.lastError = nil
            }
        }
    }

    /// Records a failed attempt (it is retried).
    public func recordFailure(pool: String, streamName: String, reason: String) throws {
        try update(pool: pool, streamName: streamName) { t in
            t.failures += 1
            t.lastError = String(reason.prefix(500))
        }
    }

    private func update(pool: String, streamName: String, _ change: (inout StreamTarget) -> Void) throws -> StreamTarget {
        try write { txn in
            let key = Self.key(pool: pool, streamName: streamName)
            guard let bytes = try txn.get(targets, key: key) else {
                throw LedgerError(.notFound, "no stream cursor for pool \(pool) and stream \(streamName)")
            }
            var t = try Self.decode(bytes)
            change(&t)
            try txn.put(targets, key: key, value: try Self.encode(t))
            return t
        }
    }

    /// Removes every target of `streamName` (its cursors restart at the feed's end if it is
    /// configured again). - Returns: how many were removed.
    @discardableResult
    public func remove(streamName: String) throws -> Int {
        try write { txn in
            let doomed = try txn.withCursor(targets) { cursor in
                var keys: [[UInt8]] = []
                var pair = try cursor.first()
                while let current = pair {
                    if try Self.decode(current.value).streamName == streamName { keys.append(Array(current.key)) }
                    pair = try cursor.next()
                }
                return keys
            }
            for key in doomed { _ = try txn.delete(targets, key: key) }
            return doomed.count
        }
    }

    // MARK: Bulk publish

    /// Where `pool`'s bulk publish that started at `started` stands: nil when it has not
    /// published anything yet (or a different run's progress is stored).
    public func bulkProgress(pool: String, started: Timestamp) throws -> BulkPublishProgress? {
        try read { txn in
            guard let bytes = try txn.get(bulk, key: Array(pool.utf8)) else { return nil }
            let p: BulkPublishProgress
            do { p = try JSONDecoder().decode(BulkPublishProgress.self, from: Data(bytes)) } catch {
                throw LedgerError(.corruptData, "the bulk publish progress of pool \(pool) does not decode: \(error)")
            }
            return p.started == started ? p : nil
        }
    }

    /// Stores `progress` (replacing any earlier run's).
    public func saveBulkProgress(_ progress: BulkPublishProgress) throws {
        let bytes = Array(try JSONEncoder().encode(progress))
        try write { txn in try txn.put(bulk, key: Array(progress.pool.utf8), value: bytes) }
    }
}

/// How far a pool's running bulk publish got, kept after each batch the sink acknowledged so a
/// restarted server continues after the last published dataset instead of starting over.
public struct BulkPublishProgress: Sendable, Hashable, Codable {
    /// The pool.
    public var pool: String
    /// The run's start (its `BulkPublishStartTime`): progress of another run is not used.
    public var started: Timestamp
    /// Identity and dataset of the last dataset read (nil: none yet).
    public var afterIdentity: String?
    /// See `afterIdentity`.
    public var afterDataset: String?
    /// Dataset records acknowledged by the sink in this run.
    public var published: Int64 = 0
    /// Failed attempts in a row (reset by an acknowledged batch).
    public var failures: Int = 0

    /// A run with nothing published.
    public init(pool: String, started: Timestamp) {
        self.pool = pool
        self.started = started
    }
}
