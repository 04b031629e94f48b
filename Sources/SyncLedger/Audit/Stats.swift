import LedgerStorage

/// How ``Ledger/statistics(by:filter:countBytes:progress:_:)`` groups its rows.
public enum StatisticsGrouping: String, Hashable, Sendable, CaseIterable {
    /// One row per identity pool.
    case pool
    /// One row per identity (within its pool).
    case identity
    /// One row per stream (dataset).
    case dataset
}

/// Entries, streams and stored bytes of one pool, identity or stream — or of everything the
/// filter let through (the total, whose names are nil).
public struct StatisticsRow: Hashable, Sendable {
    /// The pool (nil in the total).
    public var pool: IdentityPoolID?
    /// The identity (rows grouped by identity or dataset).
    public var identity: IdentityID?
    /// The dataset (rows grouped by dataset).
    public var dataset: DatasetName?
    /// Streams with at least one entry the filter let through.
    public var streams: UInt64 = 0
    /// Entries the filter let through.
    public var entries: UInt64 = 0
    /// Stored bytes of those entries: each log value (stream id, hash, body) as LMDB holds it,
    /// without LMDB's own page overhead. Zero when bytes were not counted.
    public var bytes: UInt64 = 0

    /// A row.
    public init(pool: IdentityPoolID? = nil, identity: IdentityID? = nil, dataset: DatasetName? = nil,
                streams: UInt64 = 0, entries: UInt64 = 0, bytes: UInt64 = 0) {
        self.pool = pool
        self.identity = identity
        self.dataset = dataset
        self.streams = streams
        self.entries = entries
        self.bytes = bytes
    }
}

extension Ledger {
    /// Streams named per read transaction while statistics walk the `streams` database.
    static let statisticsStreamBatch = 256
    /// Index entries read per read transaction while one stream is counted.
    static let statisticsEntryBatch = 4096

    /// Calls `body` with one row per pool, identity or stream (`grouping`) of the streams the
    /// filter lets through, in name order, and returns the total.
    ///
    /// Constant memory: streams are walked in key order (pool, identity, dataset), so rows are
    /// finished one after the other and nothing is kept per identity.
    ///
    /// - With `countBytes` false and no entry filter (author, device, time), entries come from
    ///   the stream heads alone (offsets run 1…head without gaps): one read per stream.
    /// - Otherwise each entry's stored value is read through the stream's index (its size;
    ///   for a time filter the head of its body; for author or device the author and device):
    ///   one lookup per entry, its events never made.
    ///
    /// - Parameters:
    ///   - filter: pool, identity, dataset, system streams, author, device, time range and
    ///     sync-count range; the key is ignored.
    ///   - progress: called now and then with the streams walked and the streams in all (the
    ///     `streams` database's count).
    @discardableResult
    public func statistics(by grouping: StatisticsGrouping = .identity, filter: AuditFilter = AuditFilter(), countBytes: Bool = true,
                           progress: AuditProgress? = nil, _ body: (StatisticsRow) throws -> Bool) throws -> StatisticsRow {
        try filter.validate()
        let prefix: [UInt8] = filter.pool.map { StreamName.prefix(pool: $0, identity: filter.identity) } ?? []
        let totalStreams = try read { UInt64(try $0.count(schema.streams)) }
        var total = StatisticsRow()
        var row: StatisticsRow?
        var walked: UInt64 = 0
        var start: [UInt8]?
        var stopped = false
        progress?(0, totalStreams)
        /// Ends the current row if `stream` starts another; false when `body` asked to stop.
        func emit(before stream: StreamName?) throws -> Bool {
            guard let current = row else { return true }
            if let stream, Self.sameGroup(current, stream, grouping) { return true }
            row = nil
            guard current.streams > 0 else { return true }
            return try body(current)
        }
        repeat {
            var batch: [(StreamName, StreamHead)] = []
            try read { txn in
                try forEachStream(txn, prefix: prefix, from: start) { stream, head in
                    batch.append((stream, head))
                    return batch.count < Self.statisticsStreamBatch
                }
            }
            guard let last = batch.last else { break }
            start = last.0.key + [0]
            for (stream, head) in batch {
                walked += 1
                if walked % 64 == 0 { progress?(walked, max(walked, totalStreams)) }
                guard filter.matches(stream) else { continue }
                guard try emit(before: stream) else { stopped = true; break }
                let (entries, bytes) = try count(stream, head: head, filter: filter, countBytes: countBytes)
                if row == nil {
                    row = StatisticsRow(pool: stream.pool, identity: grouping == .pool ? nil : stream.identity,
                                        dataset: grouping == .dataset ? stream.dataset : nil)
                }
                guard entries > 0 else { continue }
                row!.streams += 1
                row!.entries += entries
                row!.bytes += bytes
                total.streams += 1
                total.entries += entries
                total.bytes += bytes
            }
            if batch.count < Self.statisticsStreamBatch { break }
        } while !stopped
        if !stopped { _ = try emit(before: nil) }
        progress?(walked, max(walked, totalStreams))
        return total
    }

    /// Whether `stream` belongs to the same row as `row`.
    private static func sameGroup(_ row: StatisticsRow, _ stream: StreamName, _ grouping: StatisticsGrouping) -> Bool {
        guard row.pool == stream.pool else { return false }
        switch grouping {
        case .pool: return true
        case .identity: return row.identity == stream.identity
        case .dataset: return row.identity == stream.identity && row.dataset == stream.dataset
        }
    }

    /// Entries and stored bytes of one stream that pass the filter's entry tests.
    private func count(_ stream: StreamName, head: StreamHead, filter: AuditFilter, countBytes: Bool) throws -> (entries: UInt64, bytes: UInt64) {
        let low = max(filter.minimumSyncCount ?? 1, 1)
        let high = min(filter.maximumSyncCount ?? head.offset, head.offset)
        guard low <= high else { return (0, 0) }
        if !countBytes, !filter.filtersEntries { return (high - low + 1, 0) }
        var entries: UInt64 = 0, bytes: UInt64 = 0
        var next = low
        let prefix = [UInt8].bigEndian(head.id)
        var lastOffset: UInt64 = 0
        while next <= high {
            let read = try self.read { txn -> UInt64 in
                var seen: UInt64 = 0
                try txn.withCursor(schema.index) { cursor in
                    var pair = try cursor.seek(atLeast: Schema.indexKey(stream: head.id, offset: next))
                    while let current = pair, current.key.starts(with: prefix), seen < UInt64(Self.statisticsEntryBatch) {
                        let offset = current.key.bigEndianUInt64(at: 8)
                        guard offset <= high else { return }
                        seen += 1
                        lastOffset = offset
                        pair = try cursor.next()
                        let sequence = current.value.bigEndianUInt64()
                        guard let value = try txn.get(schema.log, key: .bigEndian(sequence)), value.count > 40 else {
                            throw LedgerError(.corruptData, "the index names sequence \(sequence), which the log lacks", stream: stream, offset: offset)
                        }
                        if filter.filtersEntries {
                            let origin: Attribution
                            do { origin = try Attribution.decodeHead(body: value[40...], sequence: sequence) } catch {
                                throw LedgerError(.corruptData, "log entry at sequence \(sequence) does not decode: \(error)", stream: stream, offset: offset)
                            }
                            guard filter.matches(origin) else { continue }
                        }
                        entries += 1
                        bytes += UInt64(value.count)
                    }
                }
                return seen
            }
            guard read == UInt64(Self.statisticsEntryBatch) else { break }
            next = lastOffset + 1
        }
        return (entries, countBytes ? bytes : 0)
    }
}
