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
        guard sequence < UInt64.max else { return nil }  // nothing can follow the last sequence
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
        guard offset < UInt64.max else { return nil }  // nothing can follow the last offset
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
        if size < Self.dictionaryThreshold, !stream.isInternal, let dictionary = try currentDictionary(pool: stream.pool) {
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
    func segmentEntry(_ stored: [UInt8], sequence: UInt64, stream: StreamName, previous: (UInt64) throws -> [UInt8]) throws -> Segment.Entry {
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
        defer { if segment.touchesConfiguration { dictionaries.configurationChanged() } }
        return try await write { [self] txn in try self.merge(segment, txn) }
    }

    /// Merges a segment pulled from a leader's feed and records, in the same transaction, the
    /// leader's sequence of its last entry as this ledger's replication checkpoint.
    ///
    /// - Parameter leaderID: the ``id`` of the ledger that sent it. The first merge records it;
    ///   a later one from a different ledger is refused with `.wrongLedger` (another ledger now
    ///   answers at the leader's address), and nothing is merged.
    @discardableResult
    public func mergeFromLeader(_ segment: Segment, leaderID: String) async throws -> MergeReport {
        let schema = self.schema
        defer { if segment.touchesConfiguration { dictionaries.configurationChanged() } }
        return try await write { [self] txn in
            try self.checkLeader(txn, leaderID)
            let report = try self.merge(segment, txn)
            try txn.put(schema.meta, key: Array("replication-checkpoint".utf8), value: .bigEndian(report.lastSourceSequence))
            return report
        }
    }

    /// Records `leaderID` as the ledger this one replicates, or refuses another one.
    private func checkLeader(_ txn: Transaction, _ leaderID: String) throws {
        let key = Array("replication-leader".utf8)
        guard let stored = try txn.get(schema.meta, key: key) else {
            try txn.put(schema.meta, key: key, value: Array(leaderID.utf8))
            return
        }
        let known = String(decoding: stored, as: UTF8.self)
        guard known == leaderID else {
            throw LedgerError(.wrongLedger, "the leader's address now answers with ledger \(leaderID.prefix(64)), but this follower replicates ledger \(known); nothing was merged")
        }
    }

    /// The id of the ledger this one replicates (nil before its first merge from a leader).
    public var replicationLeaderID: String? {
        get throws {
            try read { txn in try txn.get(schema.meta, key: Array("replication-leader".utf8)).map { String(decoding: $0, as: UTF8.self) } }
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
        try await merge(try decodeSegment(bytes))
    }

    func merge(_ segment: Segment, _ txn: Transaction) throws -> MergeReport {
        /// One stream the segment touches: its stored head, and where pass 1 has taken it.
        struct Target {
            let stored: StreamHead?
            var offset: UInt64
            var hash: [UInt8]
            /// The time of its last entry (local, or accepted from the segment so far).
            var time: Timestamp?
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
                let time = try stored.flatMap { try self.dataset(txn, id: $0.id, stream: stream)?.lastModified }
                targets.append(Target(stored: stored, offset: stored?.offset ?? 0, hash: stored?.hash ?? LogEntry.genesisHash, time: time))
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
            if let version = entries[i].body.first, version <= 2 {
                // Written before format 3: its hash commits to its values, which no redaction
                // could then erase. Such a segment is merged into a ledger of its own format only.
                throw refuse("it was written by format 2 or older (values inline, body version \(version)); merge it into a ledger of that format, or export it again from a migrated ledger")
            }
            let time: Timestamp
            do { time = try LogEntry.peekOffsetAndTime(entries[i].body).time } catch { throw refuse("its body does not decode: \(error)") }
            if let previous = head.time, time < previous {
                throw refuse("its time \(time) is before the previous entry's \(previous) (time only moves forward in a stream)")
            }
            targets[t].offset = offset
            targets[t].hash = entries[i].hash
            targets[t].time = time
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
            let entry = LogEntry(stream: e.stream, offset: e.offset, sequence: sequence, time: decoded.time, author: decoded.author, device: decoded.device, events: decoded.events, hash: e.hash)
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
