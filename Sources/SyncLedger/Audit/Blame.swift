import LedgerStorage

/// One record of a dataset with the entry that last set it, from
/// ``Ledger/blame(_:at:filter:includeRemoved:progress:_:)``.
public struct BlameLine: Hashable, Sendable {
    /// The record key.
    public let key: String
    /// Its value; nil when the entry that last touched it removed it (listed only with
    /// `includeRemoved`).
    public let value: String?
    /// The entry that last put or removed it.
    public let origin: Attribution
    /// Whether a redaction erased the value that entry put (``value`` is then empty).
    public var erased = false

    /// A blame line.
    public init(key: String, value: String?, origin: Attribution) {
        self.key = key
        self.value = value
        self.origin = origin
    }

    /// Whether the record was removed.
    public var isRemoved: Bool { value == nil }
}

/// What a blame looked at: the stream, the sync count it was taken at, and whether the dataset
/// was deleted there.
public struct BlameSummary: Hashable, Sendable {
    /// The dataset.
    public let stream: StreamName
    /// The sync count the records are shown at (the head for a blame of now).
    public let syncCount: UInt64
    /// Whether the dataset was deleted at that point (and not written since the delete).
    public let deleted: Bool
    /// Lines passed to the caller (after the filter).
    public let lines: Int
}

/// How far a long query is: entries read so far and the entries it expects to read in all.
public typealias AuditProgress = (_ done: UInt64, _ total: UInt64) -> Void

/// Per-key last setter while a stream is replayed: what blame at a point and diff keep. Its
/// size follows the dataset's records at the point reached (a dataset delete empties it),
/// never the stream's length.
struct SetterTracker {
    struct Setter: Hashable {
        var value: String?
        var origin: Attribution
        /// A redaction erased the value (replayed as the empty string, as `apply` does).
        var erased = false
    }

    var records: [RecordKey: Setter] = [:]
    /// The latest dataset delete applied.
    var lastDelete: Attribution?
    /// Whether the dataset stands deleted (a delete with no write after it).
    var deleted = false
    /// The offset of the last entry applied (0: none).
    var syncCount: UInt64 = 0

    mutating func apply(_ entry: LogEntry) {
        let origin = Attribution(entry)
        for event in entry.events {
            switch event {
            case .put(let key, let value, _):
                records[RecordKey(key)] = Setter(value: value, origin: origin)
                deleted = false
            case .erased(let key, _):
                records[RecordKey(key)] = Setter(value: "", origin: origin, erased: true)
                deleted = false
            case .remove(let key, _):
                records[RecordKey(key)] = Setter(value: nil, origin: origin)
                deleted = false
            case .deleteDataset:
                records.removeAll(keepingCapacity: true)
                lastDelete = origin
                deleted = true
            }
        }
        syncCount = entry.offset
    }
}

extension Ledger {
    /// Entries between two progress calls.
    static let progressEvery: UInt64 = 1024

    /// Calls `body` with each record of `stream`, in key order, and the entry that last set it
    /// (its sync count, sequence, time, author and device), until `body` returns false.
    ///
    /// - `at` nil (now): read from the dataset's view — one lookup per record of the entry
    ///   that set it; the cost follows the dataset's record count, not the stream's length or
    ///   the ledger's size. The records are read in one read transaction (a consistent
    ///   snapshot), so memory follows the dataset's size, which Cognito's limits bound
    ///   (1,024 records, 1 MB, 10,240 removal markers).
    /// - `at` a sync count or time: the stream is replayed once up to that point keeping each
    ///   key's last setter (memory as above: the dataset as it was there).
    ///
    /// - Parameters:
    ///   - filter: key, author, device, time and sync-count tests on the entry that set each
    ///     record; the stream fields are ignored.
    ///   - includeRemoved: list removed records (their removal marker) too.
    ///   - progress: called now and then while replaying (entries read, entries to read).
    /// - Throws: `.notFound` when the dataset has no entries; `.invalidParameter` for a sync
    ///   count past the head or a time in the future, or an empty filter range.
    @discardableResult
    public func blame(_ stream: StreamName, at point: AuditPoint? = nil, filter: AuditFilter = AuditFilter(),
                      includeRemoved: Bool = false, progress: AuditProgress? = nil,
                      _ body: (BlameLine) throws -> Bool) throws -> BlameSummary {
        try filter.validate()
        let head = try existingHead(stream)
        let summaryAndLines: (syncCount: UInt64, deleted: Bool, lines: [BlameLine])
        if let point {
            try check(point, head: head.offset, stream: stream, name: "the")
            summaryAndLines = try blameByReplay(stream, at: point, head: head.offset, filter: filter, includeRemoved: includeRemoved, progress: progress)
        } else {
            summaryAndLines = try blameFromView(stream, filter: filter, includeRemoved: includeRemoved)
        }
        var passed = 0
        for line in summaryAndLines.lines {
            passed += 1
            guard try body(line) else { break }
        }
        return BlameSummary(stream: stream, syncCount: summaryAndLines.syncCount, deleted: summaryAndLines.deleted, lines: passed)
    }

    /// Blame of now: the records of the view, each with the entry at its sync count.
    private func blameFromView(_ stream: StreamName, filter: AuditFilter, includeRemoved: Bool) throws -> (syncCount: UInt64, deleted: Bool, lines: [BlameLine]) {
        try read { txn in
            guard let head = try head(txn, stream) else {
                throw LedgerError(.notFound, "dataset \(stream) does not exist: it has no entries", stream: stream)
            }
            let meta = try dataset(txn, id: head.id, stream: stream)
            var lines: [BlameLine] = []
            var origins: [UInt64: Attribution] = [:]
            let prefix = [UInt8].bigEndian(head.id)
            try txn.withCursor(schema.records) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    pair = try cursor.next()
                    let (key, state): (String, RecordState)
                    do { (key, state) = try Schema.decodeRecord(key: current.key, value: current.value) } catch {
                        throw LedgerError(.corruptData, "a record does not decode: \(error)", stream: stream)
                    }
                    guard includeRemoved || !state.isTombstone, filter.matches(key: key) else { continue }
                    let origin: Attribution
                    if let known = origins[state.syncCount] {
                        origin = known
                    } else {
                        origin = try attribution(txn, stream: stream, id: head.id, offset: state.syncCount)
                        origins[state.syncCount] = origin
                    }
                    guard filter.matches(origin) else { continue }
                    lines.append(BlameLine(key: key, value: state.value, origin: origin))
                }
            }
            lines.sort { RecordKey($0.key) < RecordKey($1.key) }
            return (head.offset, meta?.deleted ?? false, lines)
        }
    }

    /// Blame at a past point: one replay of the stream up to it.
    private func blameByReplay(_ stream: StreamName, at point: AuditPoint, head: UInt64, filter: AuditFilter, includeRemoved: Bool,
                               progress: AuditProgress?) throws -> (syncCount: UInt64, deleted: Bool, lines: [BlameLine]) {
        var tracker = SetterTracker()
        let total: UInt64 = if case .syncCount(let n) = point { n } else { head }
        try replay(stream, through: point, head: head, total: total, progress: progress) { tracker.apply($0) }
        let lines = tracker.records
            .filter { (includeRemoved || $0.value.value != nil) && filter.matches(key: $0.key.string) && filter.matches($0.value.origin) }
            .sorted { $0.key < $1.key }
            .map { line in
                var blame = BlameLine(key: line.key.string, value: line.value.value, origin: line.value.origin)
                blame.erased = line.value.erased
                return blame
            }
        return (tracker.syncCount, tracker.deleted, lines)
    }

    /// Calls `body` with each entry of `stream` at or before `point` (and at or below `head`,
    /// so that a replay concurrent with writes stops where it started), in order.
    func replay(_ stream: StreamName, through point: AuditPoint, head: UInt64, total: UInt64, progress: AuditProgress?,
                _ body: (LogEntry) throws -> Void) throws {
        var done: UInt64 = 0
        progress?(0, total)
        try forEachEntry(in: stream) { entry in
            guard entry.offset <= head, point.includes(offset: entry.offset, time: entry.time) else { return false }
            try body(entry)
            done += 1
            if done % Self.progressEvery == 0 { progress?(done, total) }
            return true
        }
        progress?(done, max(done, total))
    }

    /// The attribution of the entry at `offset` of stream `id`, read from the index and the
    /// head of its body (its events are not made).
    func attribution(_ txn: Transaction, stream: StreamName, id: UInt64, offset: UInt64) throws -> Attribution {
        guard let sequenceBytes = try txn.get(schema.index, key: Schema.indexKey(stream: id, offset: offset)) else {
            throw LedgerError(.corruptData, "the view names sync count \(offset), which the index lacks", stream: stream, offset: offset)
        }
        let sequence = sequenceBytes.bigEndianUInt64()
        guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)), bytes.count > 40 else {
            throw LedgerError(.corruptData, "the index names sequence \(sequence), which the log lacks", stream: stream, offset: offset)
        }
        do {
            return try Attribution.decodeHead(body: bytes[40...], sequence: sequence)
        } catch {
            throw LedgerError(.corruptData, "log entry at sequence \(sequence) does not decode: \(error)", stream: stream, offset: offset)
        }
    }
}
