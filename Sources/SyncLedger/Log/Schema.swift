import LedgerStorage
import Crypto

/// The named LMDB databases of a ledger and the layout of their keys. See docs/storage-format.md.
struct Schema: Sendable {
    /// The on-disk format this code writes; a directory with a higher one is refused. Version 2
    /// moved the secrets out (see ``SecretStore``), added `records-by-sync-count` and the
    /// tombstone count of dataset views; version 3 commits to values through salted hashes, so a
    /// redaction can erase them (``Ledger/migrateToValueCommitments(_:)``). An older directory is
    /// migrated when opened.
    static let formatVersion: UInt64 = 3

    /// `format`, `ledger-id`, `replication-checkpoint`, …: settings of the directory.
    let meta: Database
    /// stream key (pool␀identity␀dataset) → ``StreamHead`` (id, head offset, head hash).
    let streams: Database
    /// stream id (8 B BE) → stream key.
    let streamNames: Database
    /// commit sequence (8 B BE) → stream id (8 B BE) ‖ hash (32 B) ‖ entry body. Appended only.
    let log: Database
    /// stream id (8 B BE) ‖ offset (8 B BE) → commit sequence (8 B BE).
    let index: Database
    /// View: stream id (8 B BE) ‖ record key (UTF-8) → ``RecordState``.
    let records: Database
    /// View: stream id (8 B BE) → ``DatasetState``.
    let datasets: Database
    /// View: stream id (8 B BE) ‖ sync count (8 B BE) ‖ the record's key suffix as in
    /// `records` → empty. Every record (tombstones too) by the offset that last changed it, so
    /// that ListRecords reads a page, not the dataset.
    let recordsBySyncCount: Database
    /// View: pool id (UTF-8) → ``PoolState`` (bytes, last modified).
    let pools: Database
    /// pool id (UTF-8) → sync sessions issued (8 B BE).
    let sessions: Database
    /// Format 1 only: access key id → credential. Emptied when the directory is migrated.
    let legacyCredentials: Database
    /// View: commit sequence (8 B BE) of a device message → ``MessageIndexRow`` (times, stream,
    /// idempotency key): what consumers walk. Purged with the idempotency keys.
    let messageIndex: Database
    /// View: pool␀identity␀device␀message id → commit sequence (8 B BE) ‖ SHA-256 of the
    /// stored message (32 B): a message's idempotency key and its acknowledgement.
    let messageIDs: Database
    /// pool␀identity␀dataset␀key → ``StoredIdempotency`` of an UpdateRecords call with an
    /// `Idempotency-Key` (not a view: the log does not carry the key).
    let idempotency: Database
    /// time (8 B BE) ‖ `idempotency` key → empty: the order of their purge.
    let idempotencyByTime: Database
    /// consumer name → ``MessageConsumer`` (JSON): durable cursors of message consumers.
    let consumers: Database
    /// Derived: level (1 B) ‖ index (8 B BE) → SHA-256 of the complete Merkle subtree over
    /// leaves `[index·2^level, (index+1)·2^level)` of the log, from level
    /// ``Ledger/merkleStoredLevel`` up; built on demand (see docs/proofs.md).
    let merkle: Database
    /// Cluster replicas: shard (8 B BE) ‖ message sequence (8 B BE) → the feed position of its
    /// first entry here (8 B BE) ‖ its entry count (8 B BE), for each applied shard message that
    /// carried entries (see `ShardStreams.swift`). A table of its own, so the checkpoint keys in
    /// `meta` that every applied message rewrites stay in a one-page tree.
    let shardIndex: Database

    init(environment env: Environment) throws {
        meta = try env.openDatabase("meta")
        streams = try env.openDatabase("streams")
        streamNames = try env.openDatabase("stream-names")
        log = try env.openDatabase("log")
        index = try env.openDatabase("index")
        records = try env.openDatabase("records")
        datasets = try env.openDatabase("datasets")
        recordsBySyncCount = try env.openDatabase("records-by-sync-count")
        pools = try env.openDatabase("pools")
        sessions = try env.openDatabase("sessions")
        legacyCredentials = try env.openDatabase("credentials")
        messageIndex = try env.openDatabase("messages")
        messageIDs = try env.openDatabase("message-ids")
        idempotency = try env.openDatabase("idempotency")
        idempotencyByTime = try env.openDatabase("idempotency-by-time")
        consumers = try env.openDatabase("message-consumers")
        merkle = try env.openDatabase("merkle")
        shardIndex = try env.openDatabase("shard-index")
    }

    /// The databases that hold views (rebuilt from the log).
    var views: [Database] { [records, datasets, recordsBySyncCount, pools, messageIndex, messageIDs] }

    /// `meta` key: the commit sequence up to which the log predates the rule that time only
    /// moves forward in a stream (entries written by format 1); absent: the whole log follows it.
    static let timeRuleFromKey = Array("time-rule-from".utf8)

    /// Keys longer than this many UTF-8 bytes do not fit an LMDB key (511 bytes) whole.
    static let maxInlineKeyBytes = 400

    /// stream id ‖ UTF-8 key; for a key over ``maxInlineKeyBytes``: stream id ‖ its first 400
    /// bytes ‖ 0xFF (never in UTF-8) ‖ SHA-256 of the whole key, which is then kept in the value.
    static func recordKey(stream id: UInt64, key: String) -> [UInt8] {
        var w = ByteWriter(capacity: 8 + min(key.utf8.count, maxInlineKeyBytes + 33))
        w.fixed64(id)
        if key.utf8.count <= maxInlineKeyBytes {
            w.raw(key.utf8)
        } else {
            w.raw(key.utf8.prefix(maxInlineKeyBytes))
            w.byte(0xFF)
            w.raw(SHA256.hash(data: Array(key.utf8)))
        }
        return w.bytes
    }

    /// Whether a record key is stored in the long form (whole key in the value).
    static func isLong(_ key: String) -> Bool { key.utf8.count > maxInlineKeyBytes }

    /// Decodes a stored record pair into its key and state.
    static func decodeRecord(key storedKey: [UInt8], value: [UInt8]) throws(DecodeFailure) -> (String, RecordState) {
        var fullKey: String?
        let state = try RecordState(decoding: value, fullKey: &fullKey)
        if let fullKey { return (fullKey, state) }
        guard storedKey.count >= 8, let key = utf8String(storedKey[8...]) else {
            throw DecodeFailure(description: "record key is not UTF-8")
        }
        return (key, state)
    }

    /// stream id ‖ sync count ‖ the key suffix of ``recordKey(stream:key:)``.
    static func syncCountKey(stream id: UInt64, syncCount: UInt64, recordKey: [UInt8]) -> [UInt8] {
        var w = ByteWriter(capacity: recordKey.count + 8)
        w.fixed64(id)
        w.fixed64(syncCount)
        w.raw(recordKey.dropFirst(8))
        return w.bytes
    }

    static func indexKey(stream id: UInt64, offset: UInt64) -> [UInt8] {
        var w = ByteWriter(capacity: 16)
        w.fixed64(id)
        w.fixed64(offset)
        return w.bytes
    }
}

/// The head of a stream, kept with its name: where the next entry goes and what it chains to.
struct StreamHead: Hashable {
    /// The stream's local id (keys of the index and views).
    var id: UInt64
    /// The offset of its last entry (0: none yet).
    var offset: UInt64
    /// The hash of its last entry (``LogEntry/genesisHash`` when none).
    var hash: [UInt8]

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 48)
        w.fixed64(id)
        w.fixed64(offset)
        w.raw(hash)
        return w.bytes
    }

    init(id: UInt64, offset: UInt64, hash: [UInt8]) {
        self.id = id
        self.offset = offset
        self.hash = hash
    }

    init(decoding bytes: [UInt8]) throws(DecodeFailure) {
        var r = ByteReader(bytes)
        id = try r.fixed64()
        offset = try r.fixed64()
        hash = Array(try r.raw(32))
        try r.expectEnd()
    }
}

/// The aggregate view of one identity pool.
struct PoolState: Hashable {
    var bytes: UInt64
    var lastModified: Timestamp

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 16)
        w.varint(bytes)
        w.signed(lastModified.milliseconds)
        return w.bytes
    }

    init(bytes: UInt64, lastModified: Timestamp) {
        self.bytes = bytes
        self.lastModified = lastModified
    }

    init(decoding data: [UInt8]) throws(DecodeFailure) {
        var r = ByteReader(data)
        bytes = try r.varint()
        lastModified = Timestamp(milliseconds: try r.signed())
        try r.expectEnd()
    }
}

/// A ``DatasetView`` over the LMDB views inside a write transaction. Reads go to the
/// transaction; writes collect in memory until ``flush()``, so a write can be checked against
/// limits before anything is stored.
struct StoredDatasetView: DatasetView {
    let txn: Transaction
    let schema: Schema
    let streamID: UInt64
    let stream: StreamName
    let original: DatasetState?
    var dataset: DatasetState?
    private(set) var changed: [RecordKey: RecordState] = [:]
    private var cleared = false
    /// The stored sync count of each record read before it changed (nil: absent), so that
    /// ``flush()`` can move its `records-by-sync-count` row without reading it again. A class,
    /// so that `record(_:)` stays non-mutating as ``DatasetView`` wants; copies of a view share
    /// it, which is right because they read the same transaction's stored state.
    private let storedCounts = StoredCounts()

    private final class StoredCounts {
        var byKey: [RecordKey: UInt64?] = [:]
    }

    init(txn: Transaction, schema: Schema, stream: StreamName, streamID: UInt64) throws {
        self.txn = txn
        self.schema = schema
        self.stream = stream
        self.streamID = streamID
        original = try txn.get(schema.datasets, key: .bigEndian(streamID)).map { bytes in
            do { return try DatasetState(decoding: bytes) } catch {
                throw LedgerError(.corruptData, "dataset view does not decode: \(error)", stream: stream)
            }
        }
        dataset = original
    }

    func record(_ key: String) throws -> RecordState? {
        let k = RecordKey(key)
        if let hit = changed[k] { return hit }
        if cleared { return nil }
        let stored = try storedRecord(key)
        storedCounts.byKey[k] = .some(stored?.syncCount)
        return stored
    }

    func storedRecord(_ key: String) throws -> RecordState? {
        guard let bytes = try txn.get(schema.records, key: Schema.recordKey(stream: streamID, key: key)) else { return nil }
        do { return try RecordState(decoding: bytes) } catch {
            throw LedgerError(.corruptData, "record \(quoted(key)) does not decode: \(error)", stream: stream)
        }
    }

    mutating func setRecord(_ key: String, _ record: RecordState) throws { changed[RecordKey(key)] = record }

    /// The stored records with a value whose keys start with `prefix` (at most 400 UTF-8
    /// bytes), in key order. Changes not yet flushed are not seen.
    func storedRecords(prefix: String) throws -> [(key: String, value: String)] {
        var result: [(key: String, value: String)] = []
        try forEachStoredRecord(prefix: prefix, after: nil) { key, value in
            result.append((key, value))
            return true
        }
        return result
    }

    /// Calls `body` with each stored record with a value whose key starts with `prefix` (at
    /// most 400 UTF-8 bytes) and comes after `after` (nil: from the first), in key order, until
    /// it returns false: one seek, then one step per record read, whatever the dataset holds.
    /// `after` must be an inline key (at most 400 bytes). Changes not yet flushed are not seen.
    func forEachStoredRecord(prefix: String, after: String?, _ body: (String, String) throws -> Bool) throws {
        precondition(prefix.utf8.count <= Schema.maxInlineKeyBytes && (after?.utf8.count ?? 0) <= Schema.maxInlineKeyBytes)
        let start = Schema.recordKey(stream: streamID, key: prefix)
        try txn.withCursor(schema.records) { cursor in
            // Every key above `after` is at least `after ‖ 0x00`.
            var pair = try cursor.seek(atLeast: after.map { Schema.recordKey(stream: streamID, key: $0) + [0] } ?? start)
            while let current = pair, current.key.starts(with: start) {
                guard let (key, state) = try? Schema.decodeRecord(key: current.key, value: current.value) else {
                    throw LedgerError(.corruptData, "a record does not decode", stream: stream)
                }
                if let value = state.value, try !body(key, value) { return }
                pair = try cursor.next()
            }
        }
    }

    /// How many stored records with a value have keys starting with `prefix` (at most 400
    /// UTF-8 bytes), counting up to `limit` at most. Changes not yet flushed are not seen.
    func countStored(prefix: String, limit: Int) throws -> Int {
        precondition(prefix.utf8.count <= Schema.maxInlineKeyBytes)
        let start = Schema.recordKey(stream: streamID, key: prefix)
        var count = 0
        try txn.withCursor(schema.records) { cursor in
            var pair = try cursor.seek(atLeast: start)
            while let current = pair, current.key.starts(with: start), count < limit {
                if current.value.first.map({ $0 & 1 == 0 }) == true { count += 1 }  // flag 1: a tombstone
                pair = try cursor.next()
            }
        }
        return count
    }

    mutating func removeAllRecords() throws {
        cleared = true
        changed.removeAll()
        storedCounts.byKey.removeAll()
    }

    /// Writes the collected changes: records, dataset metadata and the pool aggregate.
    func flush() throws {
        let prefix = [UInt8].bigEndian(streamID)
        if cleared {
            for db in [schema.records, schema.recordsBySyncCount] {
                try txn.withCursor(db) { cursor in
                    var pair = try cursor.seek(atLeast: prefix)
                    while let current = pair, current.key.starts(with: prefix) {
                        try cursor.deleteCurrent()
                        pair = try cursor.seek(atLeast: prefix)
                    }
                }
            }
        }
        // In key order, for B-tree locality; sorting the keys alone moves far less than
        // sorting (key, record) pairs.
        for key in changed.keys.sorted() {
            let record = changed[key]!
            let recordKey = Schema.recordKey(stream: streamID, key: key.string)
            let before: UInt64? = cleared ? nil : try storedCounts.byKey[key] ?? storedRecord(key.string)?.syncCount
            try txn.put(schema.records, key: recordKey, value: record.encoded(fullKey: Schema.isLong(key.string) ? key.string : nil))
            if let before, before != record.syncCount {
                try txn.delete(schema.recordsBySyncCount, key: Schema.syncCountKey(stream: streamID, syncCount: before, recordKey: recordKey))
            }
            try txn.put(schema.recordsBySyncCount, key: Schema.syncCountKey(stream: streamID, syncCount: record.syncCount, recordKey: recordKey), value: [])
        }
        guard let dataset else { return }
        try txn.put(schema.datasets, key: prefix, value: dataset.encoded())
        guard !stream.isInternal else { return }  // not user data
        let poolKey = Array(stream.pool.rawValue.utf8)
        var pool = try txn.get(schema.pools, key: poolKey).map { try PoolState(decoding: $0) }
            ?? PoolState(bytes: 0, lastModified: dataset.lastModified)
        pool.bytes = pool.bytes + dataset.bytes - (original?.bytes ?? 0)
        pool.lastModified = max(pool.lastModified, dataset.lastModified)
        try txn.put(schema.pools, key: poolKey, value: pool.encoded())
    }
}
