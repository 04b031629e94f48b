import LedgerStorage

/// What a write expects of a dataset's records, checked on the view just before its entry
/// (rule 1 of ``Ledger/appendUser(_:to:origin:change:admission:expecting:)``). A value, not a
/// closure: the write path reads it, in its place among the other rules.
enum Expectation: Sendable {
    /// Nothing (a merge's copy, a redaction, a fast-forwarded offline entry).
    case nothing
    /// Each record is as the caller last saw it (UpdateRecords; the SyncTrigger's path adds
    /// the values it read before calling the hook). Any that is not fails the write with
    /// `.conflict`, naming every such key.
    case records([ExpectedRecord])
    /// The dataset exists and is not deleted (DeleteDataset); else `.notFound`.
    case datasetExists
    /// An offline merge's: no record of the change was changed on the server after `base`.
    /// With `partial`, records changed since are left out of the entry (and reported) rather
    /// than failing it; a change left with nothing to write fails all the same.
    case unchangedSince(base: UInt64, partial: Bool)
}

/// One record as a writer expects to find it.
struct ExpectedRecord: Sendable {
    /// The record's key.
    let key: String
    /// The sync count the caller last saw (0: it did not exist); a conflict reports it.
    let syncCount: UInt64
    /// What must still hold.
    let compare: Compare

    enum Compare: Sendable {
        /// The record's sync count is still ``ExpectedRecord/syncCount``.
        case syncCount
        /// The record's value is still this one (nil: absent or removed).
        case value(String?)
    }

    /// The record's sync count is `syncCount` (0: absent).
    static func syncCount(_ key: String, _ syncCount: UInt64) -> ExpectedRecord { .init(key: key, syncCount: syncCount, compare: .syncCount) }
}

/// What ``Ledger/appendUser(_:to:origin:change:admission:expecting:)`` wrote.
struct UserAppend {
    /// The entry.
    let entry: LogEntry
    /// The dataset's view after it (its `original` is the dataset before it).
    let view: StoredDatasetView
    /// The events written: the change's, or those a partial offline merge kept.
    let events: [Event]
    /// Records a partial offline merge left out, changed on the server since its base.
    let skipped: [LedgerError.Conflict]
}

extension Expectation {
    /// Checks the expectation on `view` (the dataset before the entry).
    /// - Returns: the events to write (all of `events` but for a partial merge's skipped ones)
    ///   and the skipped records.
    /// - Throws: `.conflict` naming each record that is not as expected, `.notFound`.
    func check(_ events: [Event], on view: StoredDatasetView, stream: StreamName) throws -> (events: [Event], skipped: [LedgerError.Conflict]) {
        switch self {
        case .nothing:
            return (events, [])
        case .datasetExists:
            guard let meta = view.dataset, !meta.deleted else {
                throw LedgerError(.notFound, "dataset \(stream.dataset) does not exist", stream: stream)
            }
            return (events, [])
        case .records(let expected):
            var conflicts: [LedgerError.Conflict] = []
            for record in expected {
                let now = try view.record(record.key)
                switch record.compare {
                case .syncCount:
                    let actual = now?.syncCount ?? 0
                    if actual != record.syncCount { conflicts.append(.init(key: record.key, expected: record.syncCount, actual: actual)) }
                case .value(let value):
                    if now?.value != value { conflicts.append(.init(key: record.key, expected: record.syncCount, actual: now?.syncCount ?? 0)) }
                }
            }
            if !conflicts.isEmpty { throw Ledger.conflictError(conflicts, stream: stream) }
            return (events, [])
        case .unchangedSince(let base, let partial):
            var kept: [Event] = []
            var conflicts: [LedgerError.Conflict] = []
            for event in events {
                guard let key = event.key else { kept.append(event); continue }
                let current = try view.record(key)?.syncCount ?? 0
                if current > base { conflicts.append(.init(key: key, expected: base, actual: current)) } else { kept.append(event) }
            }
            if !conflicts.isEmpty && !partial || kept.isEmpty {
                let list = conflicts.map { "\(quoted($0.key)) (base \($0.expected), server \($0.actual))" }.joined(separator: ", ")
                var error = LedgerError(.conflict, "records changed on the server since the device's base sync count \(base): \(list)", stream: stream)
                error.conflicts = conflicts
                throw error
            }
            return (kept, conflicts)
        }
    }
}

extension Ledger {
    /// The `.conflict` error of records not as the caller last saw them, naming each key with
    /// the sync count sent and the current one.
    static func conflictError(_ conflicts: [LedgerError.Conflict], stream: StreamName) -> LedgerError {
        let list = conflicts.map { "\(quoted($0.key)) (sent sync count \($0.expected), current \($0.actual))" }.joined(separator: ", ")
        var error = LedgerError(.conflict, "records changed since the caller's sync count: \(list)", stream: stream)
        error.conflicts = conflicts
        return error
    }
}
