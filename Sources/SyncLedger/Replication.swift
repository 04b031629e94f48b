import LedgerStorage

/// What ``Ledger/merge(_:)`` did with a segment.
public struct MergeReport: Sendable, Equatable {
    /// Entries appended.
    public var applied = 0
    /// Entries already present (same stream, offset and hash), skipped.
    public var skipped = 0
    /// The source sequence of the segment's last entry (a follower's checkpoint).
    public var lastSourceSequence: UInt64 = 0

    /// An empty report.
    public init() {}
}

extension Ledger {
    // MARK: Export

    /// The next segment of the change feed: entries after commit sequence `after`, up to about
    /// `maxBytes` of encoded entries (at least one entry). Nil when there is nothing after it.
    public func feedSegment(after sequence: UInt64, maxBytes: Int = 4 << 20, level: Int32 = 3) throws -> Segment? {
        var names: [UInt64: StreamName] = [:]
        var lastHash: [StreamName: [UInt8]] = [:]  // per stream, within this segment
        let (entries, _) = try collectSegmentEntries(maxBytes: maxBytes) { last in
            let next = (last?.sequence ?? sequence) + 1
            return try read { txn -> [Segment.Entry] in
                var result: [Segment.Entry] = []
                try txn.withCursor(schema.log) { cursor in
                    var pair = try cursor.seek(atLeast: .bigEndian(next))
                    while let current = pair, result.count < Self.scanBatch {
                        let id = current.value.bigEndianUInt64()
                        if names[id] == nil {
                            if names.count > 4096 { names.removeAll() }
                            names[id] = try streamName(txn, id: id)
                        }
                        let stream = names[id]!
                        let e = try segmentEntry(current.value, sequence: current.key.bigEndianUInt64(), stream: stream, txn: txn) { offset in
                            if let known = lastHash[stream] { return known }
                            return offset > 1 ? try entryAt(txn, streamID: id, stream: stream, offset: offset - 1)?.hash ?? LogEntry.genesisHash : LogEntry.genesisHash
                        }
                        lastHash[stream] = e.hash
                        result.append(e)
                        pair = try cursor.next()
                    }
                }
                return result
            }
        }
        return entries.isEmpty ? nil : Segment(scope: .feed, entries: entries, compressionLevel: level)
    }

    /// The next segment of one stream: its entries from offset `after + 1`, up to about
    /// `maxBytes`. Nil when the stream has nothing after that offset.
    public func streamSegment(_ stream: StreamName, after offset: UInt64, maxBytes: Int = 4 << 20, level: Int32 = 3) throws -> Segment? {
        var previous = LogEntry.genesisHash
        let (entries, size) = try collectSegmentEntries(maxBytes: maxBytes) { last in
            let next = (last?.entry.offset ?? offset) + 1
            return try read { txn -> [Segment.Entry] in
                guard let head = try head(txn, stream), head.offset >= next else { return [] }
                if last == nil, next > 1 {
                    previous = try entryAt(txn, streamID: head.id, stream: stream, offset: next - 1)?.hash ?? LogEntry.genesisHash
                }
                var chain = last?.hash ?? previous
                var result: [Segment.Entry] = []
                let prefix = [UInt8].bigEndian(head.id)
                try txn.withCursor(schema.index) { cursor in
                    var pair = try cursor.seek(atLeast: Schema.indexKey(stream: head.id, offset: next))
                    while let current = pair, current.key.starts(with: prefix), result.count < Self.scanBatch {
                        let sequence = current.value.bigEndianUInt64()
                        guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)) else {
                            throw LedgerError(.corruptData, "the index names sequence \(sequence), which the log lacks", stream: stream)
                        }
                        let e = try segmentEntry(bytes, sequence: sequence, stream: stream, txn: txn) { _ in chain }
                        chain = e.hash
                        result.append(e)
                        pair = try cursor.next()
                    }
                }
                return result
            }
        }
        guard !entries.isEmpty else { return nil }
        var segment = Segment(scope: .stream(stream), previousHash: previous, entries: entries, compressionLevel: level)
        if size < Self.dictionaryThreshold, stream.identity != Self.systemIdentity, let dictionary = try currentDictionary(pool: stream.pool) {
            segment.dictionary = (dictionary.id, dictionary.bytes)
        }
        return segment
    }

    /// Gathers entries batch by batch — `fetch` gets the last entry taken (nil at first) and
    /// returns up to ``scanBatch`` entries after it — until about `maxBytes` of bodies.
    /// Returns the entries and their size.
    private func collectSegmentEntries(maxBytes: Int, _ fetch: (Segment.Entry?) throws -> [Segment.Entry]) throws -> ([Segment.Entry], Int) {
        var entries: [Segment.Entry] = []
        var size = 0
        while size < maxBytes {
            let batch = try fetch(entries.last)
            for e in batch {
                entries.append(e)
                size += e.body.count + 48
                if size >= maxBytes { break }
            }
            guard batch.count == Self.scanBatch else { break }
        }
        return (entries, size)
    }

    private func segmentEntry(_ stored: [UInt8], sequence: UInt64, stream: StreamName, txn: Transaction, previous: (UInt64) throws -> [UInt8]) throws -> Segment.Entry {
        let (entry, _) = try decodeEntry(stored, sequence: sequence, stream: stream, txn: txn)
        return Segment.Entry(stream: stream, sequence: sequence, previous: try previous(entry.offset), hash: entry.hash, body: Array(stored[40...]), entry: entry)
    }

    /// The stored hash of the entry at `offset` of a stream, or nil.
    func entryAt(_ txn: Transaction, streamID: UInt64, stream: StreamName, offset: UInt64) throws -> LogEntry? {
        guard let seq = try txn.get(schema.index, key: Schema.indexKey(stream: streamID, offset: offset)) else { return nil }
        guard let bytes = try txn.get(schema.log, key: .bigEndian(seq.bigEndianUInt64())) else {
            throw LedgerError(.corruptData, "the index names sequence \(seq.bigEndianUInt64()), which the log lacks", stream: stream, offset: offset)
        }
        return try decodeEntry(bytes, sequence: seq.bigEndianUInt64(), stream: stream, txn: txn).0
    }

    // MARK: Merge

    /// Applies a segment's entries to this ledger, all or nothing, in one group commit.
    ///
    /// Entries already present (same stream, offset and hash) are skipped, so merging a segment
    /// twice changes nothing. The segment is refused as a whole — nothing applied — when an entry
    /// leaves a gap (offset beyond the stream's head + 1), does not chain to the local head, or
    /// differs from the local entry at its offset (the histories diverged).
    ///
    /// - Throws: ``LedgerError`` `.invalidParameter` saying which entry and why.
    @discardableResult
    public func merge(_ segment: Segment) async throws -> MergeReport {
        try await write { [self] txn in try self.merge(segment, txn) }
    }

    /// Merges a segment pulled from a leader's feed and records, in the same transaction, the
    /// leader's sequence of its last entry as this ledger's replication checkpoint.
    @discardableResult
    public func mergeFromLeader(_ segment: Segment) async throws -> MergeReport {
        let schema = self.schema
        return try await write { [self] txn in
            let report = try self.merge(segment, txn)
            try txn.put(schema.meta, key: Array("replication-checkpoint".utf8), value: .bigEndian(report.lastSourceSequence))
            return report
        }
    }

    /// The leader's commit sequence up to which this ledger has merged its feed (0: none).
    public var replicationCheckpoint: UInt64 {
        get throws {
            try read { txn in try txn.get(schema.meta, key: Array("replication-checkpoint".utf8))?.bigEndianUInt64() ?? 0 }
        }
    }

    /// Decodes and merges segment file bytes. See ``merge(_:)`` and ``Segment/decode(_:)``.
    @discardableResult
    public func merge(bytes: [UInt8]) async throws -> MergeReport {
        try await merge(try Segment.decode(bytes, dictionaries: dictionaryLookup))
    }

    func merge(_ segment: Segment, _ txn: Transaction) throws -> MergeReport {
        // Pass 1, reads only: decide for every entry, so a refusal leaves nothing written.
        var heads: [StreamName: (offset: UInt64, hash: [UInt8])] = [:]
        var plan: [Bool] = []  // true: apply
        var report = MergeReport()
        for (i, e) in segment.entries.enumerated() {
            let head: (offset: UInt64, hash: [UInt8])
            if let simulated = heads[e.stream] {
                head = simulated
            } else {
                let stored = try self.head(txn, e.stream)
                head = (stored?.offset ?? 0, stored?.hash ?? LogEntry.genesisHash)
            }
            let offset = e.entry.offset
            func refuse(_ why: String) -> LedgerError {
                LedgerError(.invalidParameter, "segment refused at entry \(i) (\(e.stream) offset \(offset)): \(why); nothing was applied", stream: e.stream, offset: offset)
            }
            if offset <= head.offset {
                guard let stored = try self.head(txn, e.stream),
                      let local = try entryAt(txn, streamID: stored.id, stream: e.stream, offset: offset) else {
                    throw refuse("the local stream lacks that offset")
                }
                guard local.hash == e.hash else { throw refuse("the local entry at that offset differs: the histories diverged") }
                plan.append(false)
                report.skipped += 1
                if heads[e.stream] == nil { heads[e.stream] = head }
                continue
            }
            guard offset == head.offset + 1 else { throw refuse("a gap: the local head is at offset \(head.offset)") }
            guard LogEntry.chainHash(previous: head.hash, stream: e.stream, body: e.body) == e.hash else {
                throw refuse("it does not chain to the local entry at offset \(head.offset)")
            }
            heads[e.stream] = (offset, e.hash)
            plan.append(true)
            report.applied += 1
        }
        // Pass 2: append what is new.
        for (e, apply) in zip(segment.entries, plan) where apply {
            try appendExisting(txn, e)
        }
        report.lastSourceSequence = segment.entries.last?.sequence ?? 0
        return report
    }

    /// Appends an entry made elsewhere (its offset, time, author, events and hash kept) with a
    /// local commit sequence, and applies it to the views. The caller checked its chain.
    func appendExisting(_ txn: Transaction, _ e: Segment.Entry) throws {
        let existing = try head(txn, e.stream)
        let id = try existing?.id ?? nextStreamID(txn)
        let entry = LogEntry(stream: e.stream, offset: e.entry.offset, sequence: try nextSequence(txn), time: e.entry.time, author: e.entry.author, events: e.entry.events, hash: e.hash)
        var view = try StoredDatasetView(txn: txn, schema: schema, stream: e.stream, streamID: id)
        try apply(entry, to: &view)
        try store(txn, entry, body: e.body, streamID: id, newStream: existing == nil, view: view)
    }
}

/// What ``Ledger/mergeOffline(_:deviceID:partial:)`` did with a device's offline changes.
public struct OfflineMergeReport: Sendable, Equatable {
    /// The records written (each carrying the dataset's new sync count).
    public var applied: [Record] = []
    /// Keys the server changed after the device's base sync count (not written).
    public var conflicts: [LedgerError.Conflict] = []
    /// Whether the device's entries were appended as they are (the server had not moved on).
    public var fastForward = false
    /// The dataset's sync count afterwards.
    public var syncCount: UInt64 = 0
}

extension Ledger {
    /// Merges a device's offline changes: a stream segment of entries the device made on top of
    /// its last synced state (the base sync count is the segment's first offset − 1).
    ///
    /// When the server's stream is still at the base and the segment chains to it, the entries
    /// are appended as they are (fast-forward). Otherwise the Cognito rule applies per record:
    /// a key the server changed after the base is a conflict. By default (all-or-nothing, like
    /// UpdateRecords) any conflict refuses the whole merge with a `.conflict` error naming each
    /// key and both sync counts; with `partial`, the other keys are written as one new entry
    /// and the conflicts are reported.
    public func mergeOffline(_ segment: Segment, deviceID: String, partial: Bool = false) async throws -> OfflineMergeReport {
        guard case .stream(let stream) = segment.scope, let first = segment.entries.first else {
            throw LedgerError(.invalidParameter, "offline changes come as a non-empty stream segment")
        }
        try Self.requireUserIdentity(stream.identity)
        let base = first.entry.offset - 1
        // The device's last intent per key, in the order first touched.
        var order: [RecordKey] = []
        var final: [RecordKey: Event] = [:]
        var deletes = false
        for e in segment.entries {
            for event in e.entry.events {
                guard let key = event.key else { deletes = true; continue }
                let k = RecordKey(key)
                if final[k] == nil { order.append(k) }
                final[k] = event
            }
        }
        let limits = options.limits
        return try await write { [self, order, final, deletes] txn in
            let head = try self.head(txn, stream)
            if (head?.offset ?? 0) == base, (head?.hash ?? LogEntry.genesisHash) == segment.previousHash {
                _ = try self.merge(segment, txn)
                var report = OfflineMergeReport()
                report.fastForward = true
                report.syncCount = segment.entries.last!.entry.offset
                let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: try self.head(txn, stream)!.id)
                report.applied = try order.compactMap { k in try view.storedRecord(k.string).map { Record(key: k.string, state: $0) } }
                return report
            }
            if deletes {
                throw LedgerError(.conflict, "the device deleted the dataset offline, but the server moved on from sync count \(base) to \(head?.offset ?? 0)", stream: stream)
            }
            var report = OfflineMergeReport()
            var events: [Event] = []
            let (entry, view) = try self.append(txn, to: stream, author: deviceID, events: [], check: { view in
                for k in order {
                    let current = try view.record(k.string)?.syncCount ?? 0
                    if current > base {
                        report.conflicts.append(.init(key: k.string, expected: base, actual: current))
                    } else {
                        events.append(final[k]!)
                    }
                }
                if !report.conflicts.isEmpty && !partial || events.isEmpty {
                    let list = report.conflicts.map { "\(quoted($0.key)) (base \($0.expected), server \($0.actual))" }.joined(separator: ", ")
                    var error = LedgerError(.conflict, "records changed on the server since the device's base sync count \(base): \(list)", stream: stream)
                    error.conflicts = report.conflicts
                    throw error
                }
            }, validate: { view in
                let meta = view.dataset!
                if meta.bytes > limits.maxDatasetBytes || meta.recordCount > limits.maxRecordsPerDataset {
                    throw LedgerError(.limitExceeded, "the merged dataset would exceed its limits (\(meta.bytes) bytes, \(meta.recordCount) records)", stream: stream)
                }
            }, events: { events })
            report.applied = events.compactMap { $0.key }.map { Record(key: $0, state: view.changed[RecordKey($0)]!) }
            report.syncCount = entry.offset
            return report
        }
    }
}
