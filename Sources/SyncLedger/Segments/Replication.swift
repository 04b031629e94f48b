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
    ///
    /// Entries are passed through as stored — body and hash — without decoding them.
    public func feedSegment(after sequence: UInt64, maxBytes: Int = 4 << 20, level: Int32 = 3) throws -> Segment? {
        /// A stream met in this segment: its name and the hash of its last entry so far.
        struct Seen {
            let stream: StreamName
            var lastHash: [UInt8]?
        }
        var seen: [Seen] = []
        var seenByID: [UInt64: Int] = [:]
        let (entries, _) = try collectSegmentEntries(maxBytes: maxBytes) { entries, size in
            let next = (entries.last?.sequence ?? sequence) + 1
            return try read { txn -> Bool in
                var taken = 0
                try txn.withCursor(schema.log) { cursor in
                    var pair = try cursor.seek(atLeast: .bigEndian(next))
                    while let current = pair, taken < Self.scanBatch, size < maxBytes {
                        let id = current.value.bigEndianUInt64()
                        let s: Int
                        if let known = seenByID[id] {
                            s = known
                        } else {
                            s = seen.count
                            seen.append(Seen(stream: try streamName(txn, id: id), lastHash: nil))
                            seenByID[id] = s
                        }
                        let stream = seen[s].stream
                        let e = try segmentEntry(current.value, sequence: current.key.bigEndianUInt64(), stream: stream) { offset in
                            try seen[s].lastHash ?? storedHash(txn, streamID: id, stream: stream, offset: offset - 1)
                        }
                        seen[s].lastHash = e.hash
                        size += e.body.count + 48
                        entries.append(e)
                        taken += 1
                        pair = try cursor.next()
                    }
                }
                return taken == Self.scanBatch
            }
        }
        return entries.isEmpty ? nil : Segment(scope: .feed, entries: entries, compressionLevel: level)
    }

    /// The next segment of one stream: its entries from offset `after + 1`, up to about
    /// `maxBytes`. Nil when the stream has nothing after that offset.
    public func streamSegment(_ stream: StreamName, after offset: UInt64, maxBytes: Int = 4 << 20, level: Int32 = 3) throws -> Segment? {
        var previous = LogEntry.genesisHash
        let (entries, size) = try collectSegmentEntries(maxBytes: maxBytes) { entries, size in
            let next = (entries.last?.offset ?? offset) + 1
            return try read { txn -> Bool in
                guard let head = try head(txn, stream), head.offset >= next else { return false }
                if entries.isEmpty {
                    previous = try storedHash(txn, streamID: head.id, stream: stream, offset: next - 1)
                }
                var chain = entries.last?.hash ?? previous
                var taken = 0
                let prefix = [UInt8].bigEndian(head.id)
                try txn.withCursor(schema.index) { cursor in
                    var pair = try cursor.seek(atLeast: Schema.indexKey(stream: head.id, offset: next))
                    while let current = pair, current.key.starts(with: prefix), taken < Self.scanBatch, size < maxBytes {
                        let sequence = current.value.bigEndianUInt64()
                        guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)) else {
                            throw LedgerError(.corruptData, "the index names sequence \(sequence), which the log lacks", stream: stream)
                        }
                        let e = try segmentEntry(bytes, sequence: sequence, stream: stream) { _ in chain }
                        chain = e.hash
                        size += e.body.count + 48
                        entries.append(e)
                        taken += 1
                        pair = try cursor.next()
                    }
                }
                return taken == Self.scanBatch
            }
        }
        guard !entries.isEmpty else { return nil }
        var segment = Segment(scope: .stream(stream), previousHash: previous, entries: entries, compressionLevel: level)
        if size < Self.dictionaryThreshold, stream.identity != Self.systemIdentity, let dictionary = try currentDictionary(pool: stream.pool) {
            segment.dictionary = (dictionary.id, dictionary.bytes)
        }
        return segment
    }

    /// Gathers entries in read transactions of at most ``scanBatch`` entries each, until about
    /// `maxBytes` of bodies: `fetch` appends entries after the last one gathered (the first
    /// call gets none), counts their size, stops at `maxBytes`, and says whether it stopped
    /// only because its batch was full. Returns the entries and their size.
    private func collectSegmentEntries(maxBytes: Int, _ fetch: (inout [Segment.Entry], inout Int) throws -> Bool) throws -> ([Segment.Entry], Int) {
        var entries: [Segment.Entry] = []
        var size = 0
        while size < maxBytes, try fetch(&entries, &size) {}
        return (entries, size)
    }

    /// A stored log value (`stream id ‖ hash ‖ body`) as a segment entry, passed through
    /// without decoding the body: only its offset is read.
    private func segmentEntry(_ stored: [UInt8], sequence: UInt64, stream: StreamName, previous: (UInt64) throws -> [UInt8]) throws -> Segment.Entry {
        let offset: UInt64
        do {
            var reader = ByteReader(stored, position: 40)
            offset = try LogEntry.peekOffset(&reader)
        } catch {
            throw LedgerError(.corruptData, "log entry at sequence \(sequence) does not decode: \(error)", stream: stream)
        }
        return Segment.Entry(stream: stream, sequence: sequence, offset: offset, previous: try previous(offset), hash: Array(stored[8..<40]), body: stored[40...])
    }

    /// The stored hash of the entry at `offset` of a stream (``LogEntry/genesisHash`` for 0).
    /// - Throws: `.corruptData` when the stream has no such entry.
    func storedHash(_ txn: Transaction, streamID: UInt64, stream: StreamName, offset: UInt64) throws -> [UInt8] {
        guard offset > 0 else { return LogEntry.genesisHash }
        guard let seq = try txn.get(schema.index, key: Schema.indexKey(stream: streamID, offset: offset)),
              let bytes = try txn.get(schema.log, key: .bigEndian(seq.bigEndianUInt64())), bytes.count >= 40 else {
            throw LedgerError(.corruptData, "the log lacks the entry at this offset", stream: stream, offset: offset)
        }
        return Array(bytes[8..<40])
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
        /// One stream the segment touches: its stored head, and where pass 1 has taken it.
        struct Target {
            let stored: StreamHead?
            var offset: UInt64
            var hash: [UInt8]
        }
        var targets: [Target] = []
        var numbering = StreamNumbering()
        var ordinals: [Int] = []
        ordinals.reserveCapacity(segment.entries.count)
        var plan: [Bool] = []  // true: apply
        plan.reserveCapacity(segment.entries.count)
        var report = MergeReport()

        // Pass 1, reads only: decide for every entry, so a refusal leaves nothing written. An
        // entry's own hash follows from its `previous` (see `Segment.Entry`), so chaining it
        // to the local head is comparing `previous` with the head's hash.
        let entries = segment.entries
        for i in entries.indices {
            let stream = entries[i].stream
            let (t, isNew) = numbering.ordinal(of: stream)
            if isNew {
                let stored = try self.head(txn, stream)
                targets.append(Target(stored: stored, offset: stored?.offset ?? 0, hash: stored?.hash ?? LogEntry.genesisHash))
            }
            ordinals.append(t)
            let head = targets[t]
            let offset = entries[i].offset
            func refuse(_ why: String) -> LedgerError {
                LedgerError(.invalidParameter, "segment refused at entry \(i) (\(stream) offset \(offset)): \(why); nothing was applied", stream: stream, offset: offset)
            }
            if offset <= head.offset {
                // Already here? Only entries the ledger held before this merge can be: pass 1
                // appends nothing, and offsets within the segment rise.
                guard let stored = head.stored, offset <= stored.offset else { throw refuse("the local stream lacks that offset") }
                let local = offset == stored.offset ? stored.hash : try storedHash(txn, streamID: stored.id, stream: stream, offset: offset)
                guard local == entries[i].hash else { throw refuse("the local entry at that offset differs: the histories diverged") }
                plan.append(false)
                report.skipped += 1
                continue
            }
            guard offset == head.offset + 1 else { throw refuse("a gap: the local head is at offset \(head.offset)") }
            guard entries[i].previous == head.hash else {
                throw refuse("it does not chain to the local entry at offset \(head.offset)")
            }
            targets[t].offset = offset
            targets[t].hash = entries[i].hash
            plan.append(true)
            report.applied += 1
        }
        report.lastSourceSequence = segment.entries.last?.sequence ?? 0
        guard report.applied > 0 else { return report }

        // Pass 2: append what is new, each entry applied to its stream's view; every stream's
        // head and view are written once, after its last entry.
        var sequence = try nextSequence(txn)
        var newStreamID: UInt64?
        var writers: [StreamWriter?] = Array(repeating: nil, count: targets.count)
        var buffers = AppendBuffers()
        for i in entries.indices where plan[i] {
            let e = entries[i]
            let t = ordinals[i]
            if writers[t] == nil {
                let id: UInt64
                if let stored = targets[t].stored {
                    id = stored.id
                } else {
                    id = try newStreamID ?? nextStreamID(txn)
                    newStreamID = id + 1
                }
                writers[t] = StreamWriter(id: id, newStream: targets[t].stored == nil,
                                          view: try StoredDatasetView(txn: txn, schema: schema, stream: e.stream, streamID: id))
            }
            let decoded = try e.entry
            let entry = LogEntry(stream: e.stream, offset: e.offset, sequence: sequence, time: decoded.time, author: decoded.author, events: decoded.events, hash: e.hash)
            try apply(entry, to: &writers[t]!.view)
            try storeLog(txn, entry, body: e.body, streamID: writers[t]!.id, buffers: &buffers)
            writers[t]!.last = entry
            sequence += 1
        }
        for writer in writers {
            guard let writer, let last = writer.last else { continue }
            try storeHead(txn, last, streamID: writer.id, newStream: writer.newStream, view: writer.view)
        }
        return report
    }

    /// A stream that a merge appends to: its local id and its view across the segment.
    private struct StreamWriter {
        let id: UInt64
        let newStream: Bool
        var view: StoredDatasetView
        var last: LogEntry?
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
        let base = first.offset - 1
        // The device's last intent per key, in the order first touched.
        var order: [RecordKey] = []
        var final: [RecordKey: Event] = [:]
        var deletes = false
        for e in segment.entries {
            for event in try e.entry.events {
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
                report.syncCount = segment.entries.last!.offset
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
