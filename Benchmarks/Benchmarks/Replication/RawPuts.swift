import BenchSupport
import LedgerStorage
import SyncLedger

/// One LMDB put, prepared ahead so that a raw baseline times LMDB and nothing else.
struct RawPut {
    /// Which of ``RawLedgerDatabases`` it goes to.
    let database: RawLedgerDatabases.Name
    let key: [UInt8]
    let value: [UInt8]
    /// `MDB_APPEND` (the log).
    let append: Bool
    /// Delete `key` instead (a record's row leaving its old sync count).
    var delete = false
}

/// The ledger's databases (docs/storage-format.md), opened in a raw environment.
struct RawLedgerDatabases {
    /// The databases the write path touches.
    enum Name: Int, CaseIterable {
        case log, index, streams, streamNames, records, recordsBySyncCount, datasets, pools
        var lmdbName: String {
            switch self {
            case .log: "log"
            case .index: "index"
            case .streams: "streams"
            case .streamNames: "stream-names"
            case .records: "records"
            case .recordsBySyncCount: "records-by-sync-count"
            case .datasets: "datasets"
            case .pools: "pools"
            }
        }
    }

    let handles: [Database]

    init(_ environment: Environment) throws {
        handles = try Name.allCases.map { try environment.openDatabase($0.lmdbName) }
    }

    /// Performs `puts` in `txn` (one marked `delete` deletes its key).
    func apply(_ puts: [RawPut], in txn: Transaction) throws {
        for put in puts {
            if put.delete {
                try txn.delete(handles[put.database.rawValue], key: put.key)
            } else {
                try txn.put(handles[put.database.rawValue], key: put.key, value: put.value, flags: put.append ? .append : [])
            }
        }
    }
}

/// Turns log entries into the puts the ledger makes when it appends them — `Ledger.append` and
/// `appendExisting` in the library: the log entry (`MDB_APPEND`), the index, the stream head,
/// the stream's name the first time, and through `StoredDatasetView.flush` each changed record (and its `records-by-sync-count` row),
/// the dataset state and the pool aggregate — with keys and values in the formats of
/// docs/storage-format.md and of the same sizes. Keeps the state those values depend on
/// (stream ids, commit sequence, record counts and bytes), so entries must come in feed order.
struct RawPutBuilder {
    private var ids: [StreamName: UInt64] = [:]
    private var sequence: UInt64 = 0
    /// Per stream: UTF-8 bytes of each record's key and value, and the dataset's creation time.
    private var datasets: [StreamName: (records: [String: Int], created: Int64)] = [:]
    /// Per stream and record key: the sync count its `records-by-sync-count` row is under.
    private var syncCounts: [StreamName: [String: UInt64]] = [:]
    private var poolBytes: [String: Int] = [:]

    init() {}

    /// The puts of one entry (offset, time, author, events and the 32-byte hash it carries;
    /// `body` is the canonical entry body stored after the id and hash).
    mutating func puts(for entry: LogEntry, body: [UInt8]) -> [RawPut] {
        var result: [RawPut] = []
        result.reserveCapacity(7)
        let stream = entry.stream
        let streamKey = EventData.streamKey(stream)
        let id: UInt64
        if let known = ids[stream] {
            id = known
        } else {
            id = UInt64(ids.count + 1)
            ids[stream] = id
            result.append(RawPut(database: .streamNames, key: bigEndianBytes(id), value: streamKey, append: false))
        }
        sequence += 1
        let idBytes = bigEndianBytes(id)
        result.append(RawPut(database: .log, key: bigEndianBytes(sequence), value: idBytes + entry.hash + body, append: true))
        result.append(RawPut(database: .index, key: idBytes + bigEndianBytes(entry.offset), value: bigEndianBytes(sequence), append: false))
        result.append(RawPut(database: .streams, key: streamKey, value: idBytes + bigEndianBytes(entry.offset) + entry.hash, append: false))

        var dataset = datasets[stream] ?? (records: [:], created: entry.time.milliseconds)
        let before = dataset.records.values.reduce(0, +)
        for event in entry.events {
            guard case .put(let key, let value, _) = event else { continue }
            dataset.records[key] = key.utf8.count + value.utf8.count
            // Record state: flags, sync count, last modified, author, value.
            var record = ByteBuilder(capacity: 24 + entry.author.utf8.count + value.utf8.count)
            record.byte(0)
            record.varint(entry.offset)
            record.signed(entry.time.milliseconds)
            record.string(entry.author)
            record.raw(value.utf8)
            result.append(RawPut(database: .records, key: idBytes + Array(key.utf8), value: record.bytes, append: false))
            if let old = syncCounts[stream, default: [:]][key] {
                result.append(RawPut(database: .recordsBySyncCount, key: idBytes + bigEndianBytes(old) + Array(key.utf8), value: [], append: false, delete: true))
            }
            result.append(RawPut(database: .recordsBySyncCount, key: idBytes + bigEndianBytes(entry.offset) + Array(key.utf8), value: [], append: false))
            syncCounts[stream, default: [:]][key] = entry.offset
        }
        datasets[stream] = dataset
        let bytes = dataset.records.values.reduce(0, +)
        // Dataset state: deleted, sync count, record count, bytes, created, modified, last delete, author.
        var state = ByteBuilder(capacity: 48 + entry.author.utf8.count)
        state.byte(0)
        state.varint(entry.offset)
        state.varint(UInt64(dataset.records.count))
        state.varint(UInt64(bytes))
        state.signed(dataset.created)
        state.signed(entry.time.milliseconds)
        state.varint(0)
        state.string(entry.author)
        state.varint(0)  // tombstones
        result.append(RawPut(database: .datasets, key: idBytes, value: state.bytes, append: false))
        // Pool aggregate: bytes, last modified.
        let pool = stream.pool.rawValue
        poolBytes[pool, default: 0] += bytes - before
        var poolState = ByteBuilder(capacity: 16)
        poolState.varint(UInt64(poolBytes[pool]!))
        poolState.signed(entry.time.milliseconds)
        result.append(RawPut(database: .pools, key: Array(pool.utf8), value: poolState.bytes, append: false))
        return result
    }
}
