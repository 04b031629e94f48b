/// One record that differs between two points of a dataset, from
/// ``Ledger/diff(_:from:to:filter:progress:_:)``.
public struct DiffLine: Hashable, Sendable {
    /// How the record changed.
    public enum Change: String, Hashable, Sendable {
        /// No value at the first point, a value at the second.
        case added
        /// A value at the first point, none at the second (removed, or its dataset deleted).
        case removed
        /// Different values at both points.
        case changed
    }

    /// The record key.
    public let key: String
    /// Its value at the first point (nil: none).
    public let before: String?
    /// Its value at the second point (nil: none).
    public let after: String?
    /// The entry that gave it its value at the second point: the last put or remove of the key,
    /// or the dataset delete that removed it.
    public let origin: Attribution

    /// A diff line.
    public init(key: String, before: String?, after: String?, origin: Attribution) {
        self.key = key
        self.before = before
        self.after = after
        self.origin = origin
    }

    /// Added, removed or changed.
    public var change: Change {
        before == nil ? .added : after == nil ? .removed : .changed
    }
}

/// The two sync counts a diff compared (a time resolves to the last entry at or before it).
public struct DiffSummary: Hashable, Sendable {
    /// The dataset.
    public let stream: StreamName
    /// The sync count of the first point.
    public let fromSyncCount: UInt64
    /// The sync count of the second point.
    public let toSyncCount: UInt64
    /// Lines passed to the caller (after the filter).
    public let lines: Int
}

extension Ledger {
    /// Calls `body`, in key order, with each record whose value differs between two points of
    /// `stream`: the state right after `from` against the state right after `to` (nil: now).
    /// Values are compared, not histories: a record removed and put back with the same value
    /// does not differ, nor does one removed at both points.
    ///
    /// One replay of the stream up to `to`, keeping the values at `from` and each key's last
    /// setter: memory follows the dataset's records at the two points (bounded by Cognito's
    /// limits), not the stream's length; the cost follows the entries up to `to`, not the
    /// ledger's size.
    ///
    /// - Parameters:
    ///   - filter: key, author, device, time and sync-count tests on the entry that made the
    ///     value at `to`; the stream fields are ignored.
    ///   - progress: called now and then (entries read, entries to read).
    /// - Throws: `.notFound` when the dataset has no entries; `.invalidParameter` when a sync
    ///   count is past the head, a time is in the future, `from` is after `to`, or a filter
    ///   range is empty.
    @discardableResult
    public func diff(_ stream: StreamName, from: AuditPoint, to: AuditPoint? = nil, filter: AuditFilter = AuditFilter(),
                     progress: AuditProgress? = nil, _ body: (DiffLine) throws -> Bool) throws -> DiffSummary {
        try filter.validate()
        let head = try existingHead(stream).offset
        let to = to ?? .syncCount(head)
        try check(from, head: head, stream: stream, name: "from")
        try check(to, head: head, stream: stream, name: "to")
        switch (from, to) {
        case (.syncCount(let a), .syncCount(let b)) where a > b:
            throw LedgerError(.invalidParameter, "from sync count \(a) is after to sync count \(b)", stream: stream)
        case (.time(let a), .time(let b)) where a > b:
            throw LedgerError(.invalidParameter, "from time \(a) is after to time \(b)", stream: stream)
        default: break
        }
        var tracker = SetterTracker()
        var before: [RecordKey: String]?
        var fromSyncCount: UInt64 = 0
        let total: UInt64 = if case .syncCount(let n) = to { n } else { head }
        try replay(stream, through: to, head: head, total: total, progress: progress) { entry in
            if before == nil, !from.includes(offset: entry.offset, time: entry.time) {
                before = tracker.records.compactMapValues(\.value)
                fromSyncCount = tracker.syncCount
            }
            tracker.apply(entry)
        }
        if before == nil {
            before = tracker.records.compactMapValues(\.value)
            fromSyncCount = tracker.syncCount
        }
        // A time range given backwards in sync counts (a mixed pair of points) is caught here.
        guard fromSyncCount <= tracker.syncCount else {
            throw LedgerError(.invalidParameter, "from (\(from), sync count \(fromSyncCount)) is after to (\(to), sync count \(tracker.syncCount))", stream: stream)
        }
        var keys = Set(before!.keys)
        for (key, setter) in tracker.records where setter.value != nil || before![key] != nil { keys.insert(key) }
        var passed = 0
        for key in keys.sorted() {
            let old = before![key]
            let setter = tracker.records[key]
            let new = setter?.value
            guard !Self.sameValue(old, new), filter.matches(key: key.string) else { continue }
            // Gone from the tracker: the last dataset delete after `from` removed it.
            guard let origin = setter?.origin ?? tracker.lastDelete else { continue }
            guard filter.matches(origin) else { continue }
            passed += 1
            guard try body(DiffLine(key: key.string, before: old, after: new, origin: origin)) else { break }
        }
        return DiffSummary(stream: stream, fromSyncCount: fromSyncCount, toSyncCount: tracker.syncCount, lines: passed)
    }

    /// Values compared byte for byte (UTF-8), as Cognito compares them: `String`'s `==` calls
    /// canonically equivalent texts equal.
    static func sameValue(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let a?, let b?): a.utf8.elementsEqual(b.utf8)
        default: false
        }
    }
}
