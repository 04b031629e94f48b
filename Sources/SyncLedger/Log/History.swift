import LedgerStorage

/// One change of one key, from ``Ledger/history(of:in:from:_:)``.
public struct KeyChange: Hashable, Sendable {
    /// The entry that made it.
    public let offset: UInt64
    /// Its commit sequence.
    public let sequence: UInt64
    /// Server time.
    public let time: Timestamp
    /// Who made it: the authenticated caller.
    public let author: String
    /// The device it was made from, when the entry names one.
    public let device: String?
    /// The event (a put or remove of the key, or the dataset's delete).
    public let event: Event
}

extension Ledger {
    /// Entries read per read transaction while streaming history: memory stays bounded and
    /// no read transaction stays open while the caller's closure runs.
    static let scanBatch = 256

    /// Calls `body` with each entry of `stream` from offset `start` on, in order, until it
    /// returns false or the stream ends. Reads in short batches; memory stays bounded.
    public func forEachEntry(in stream: StreamName, from start: UInt64 = 1, _ body: (LogEntry) throws -> Bool) throws {
        var next = max(start, 1)
        while true {
            let batch = try read { txn -> [LogEntry] in
                guard let head = try head(txn, stream), head.offset >= next else { return [] }
                return try entries(txn, stream: stream, id: head.id, from: next, limit: Self.scanBatch)
            }
            for entry in batch {
                guard try body(entry) else { return }
            }
            guard batch.count == Self.scanBatch, let last = batch.last else { return }
            next = last.offset + 1
        }
    }

    /// Up to `limit` entries of `stream` from offset `start`, in one read transaction.
    public func entries(in stream: StreamName, from start: UInt64 = 1, limit: Int = 1000) throws -> [LogEntry] {
        try read { txn in
            guard let head = try head(txn, stream) else { return [] }
            return try entries(txn, stream: stream, id: head.id, from: max(start, 1), limit: limit)
        }
    }

    func entries(_ txn: Transaction, stream: StreamName, id: UInt64, from start: UInt64, limit: Int) throws -> [LogEntry] {
        var result: [LogEntry] = []
        let prefix = [UInt8].bigEndian(id)
        try txn.withCursor(schema.index) { cursor in
            var pair = try cursor.seek(atLeast: Schema.indexKey(stream: id, offset: start))
            while let current = pair, current.key.starts(with: prefix), result.count < limit {
                let sequence = current.value.bigEndianUInt64()
                guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)) else {
                    throw LedgerError(.corruptData, "the index names sequence \(sequence), which the log lacks", stream: stream, offset: current.key.bigEndianUInt64(at: 8))
                }
                let (entry, _) = try decodeEntry(bytes, sequence: sequence, stream: stream, txn: txn)
                result.append(entry)
                pair = try cursor.next()
            }
        }
        return result
    }

    /// Calls `body` with each change of `key` in `stream` (puts, removes and dataset deletes),
    /// oldest first.
    public func history(of key: String, in stream: StreamName, from start: UInt64 = 1, _ body: (KeyChange) throws -> Bool) throws {
        try forEachEntry(in: stream, from: start) { entry in
            for event in entry.events where event.key.map({ $0.utf8.elementsEqual(key.utf8) }) == true || event == .deleteDataset {
                guard try body(KeyChange(offset: entry.offset, sequence: entry.sequence, time: entry.time, author: entry.author, device: entry.device, event: event)) else { return false }
            }
            return true
        }
    }

    /// The dataset as it was right after the entry at `syncCount` (0: before any), rebuilt by
    /// replaying the log with ``apply(_:to:)``.
    public func dataset(_ stream: StreamName, asOfSyncCount syncCount: UInt64) throws -> MemoryDatasetView {
        var view = MemoryDatasetView()
        try forEachEntry(in: stream) { entry in
            guard entry.offset <= syncCount else { return false }
            try apply(entry, to: &view)
            return true
        }
        return view
    }

    /// The dataset as it was at `time`: every entry committed at or before it, replayed.
    public func dataset(_ stream: StreamName, asOf time: Timestamp) throws -> MemoryDatasetView {
        var view = MemoryDatasetView()
        try forEachEntry(in: stream) { entry in
            guard entry.time <= time else { return false }
            try apply(entry, to: &view)
            return true
        }
        return view
    }

    /// Calls `body` with every entry of the ledger in commit order, from the sequence after
    /// `sequence` on (the change feed), until it returns false.
    public func forEachCommit(after sequence: UInt64 = 0, _ body: (LogEntry) throws -> Bool) throws {
        guard sequence < UInt64.max else { return }  // nothing can follow the last sequence
        var next = sequence + 1
        var names: [UInt64: StreamName] = [:]
        while true {
            let batch = try read { txn -> [LogEntry] in
                var result: [LogEntry] = []
                try txn.withCursor(schema.log) { cursor in
                    var pair = try cursor.seek(atLeast: .bigEndian(next))
                    while let current = pair, result.count < Self.scanBatch {
                        let seq = current.key.bigEndianUInt64()
                        let id = current.value.bigEndianUInt64()
                        if names[id] == nil {
                            if names.count > 4096 { names.removeAll() }
                            names[id] = try streamName(txn, id: id)
                        }
                        result.append(try decodeEntry(current.value, sequence: seq, stream: names[id], txn: txn).0)
                        pair = try cursor.next()
                    }
                }
                return result
            }
            for entry in batch {
                guard try body(entry) else { return }
            }
            guard batch.count == Self.scanBatch, let last = batch.last else { return }
            next = last.sequence + 1
        }
    }

    /// The sequence of the latest commit (0 when the ledger is empty).
    public var lastSequence: UInt64 {
        get throws {
            try read { txn in try txn.withCursor(schema.log) { try $0.last() }?.key.bigEndianUInt64() ?? 0 }
        }
    }

    /// Every stream of the ledger, in name order.
    public func streams(pool: IdentityPoolID? = nil) throws -> [(stream: StreamName, syncCount: UInt64)] {
        try read { txn in
            var result: [(StreamName, UInt64)] = []
            try forEachStream(txn, prefix: pool.map { StreamName.prefix(pool: $0) } ?? []) { stream, head in
                result.append((stream, head.offset))
                return true
            }
            return result
        }
    }

    /// Calls `body` for each stream whose key starts with `prefix`, from `start` on, in key
    /// order, until it returns false.
    func forEachStream(_ txn: Transaction, prefix: [UInt8], from start: [UInt8]? = nil, _ body: (StreamName, StreamHead) throws -> Bool) throws {
        try txn.withCursor(schema.streams) { cursor in
            var pair = try cursor.seek(atLeast: start ?? prefix)
            while let current = pair, current.key.starts(with: prefix) {
                let stream = try StreamName(key: current.key)
                let head: StreamHead
                do { head = try StreamHead(decoding: current.value) } catch {
                    throw LedgerError(.corruptData, "stream head does not decode: \(error)", stream: stream)
                }
                guard try body(stream, head) else { return }
                pair = try cursor.next()
            }
        }
    }

    /// Every pool that has a stream, in id order (see ``forEachPoolWithStreams(_:from:_:)``).
    func poolsWithStreams() throws -> [IdentityPoolID] {
        try read { txn in
            var pools: [IdentityPoolID] = []
            try forEachPoolWithStreams(txn) { pools.append($0); return true }
            return pools
        }
    }

    /// Calls `body` for each pool that has a stream, in id order, from the first pool whose
    /// stream keys sort at or after `start` on, until it returns false: one seek per pool,
    /// however many streams each holds (the stream keys of a pool share the prefix `pool ␀`,
    /// and no id holds a byte below `␁`).
    func forEachPoolWithStreams(_ txn: Transaction, from start: [UInt8] = [], _ body: (IdentityPoolID) throws -> Bool) throws {
        try txn.withCursor(schema.streams) { cursor in
            var pair = try start.isEmpty ? cursor.first() : cursor.seek(atLeast: start)
            while let current = pair {
                guard let end = current.key.firstIndex(of: 0) else {
                    throw LedgerError(.corruptData, "a stream key has no separator")
                }
                let name = Array(current.key[..<end])
                guard try body(try IdentityPoolID(String(decoding: name, as: UTF8.self))) else { return }
                pair = try cursor.seek(atLeast: name + [1])
            }
        }
    }
}
