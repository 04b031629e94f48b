public import Foundation
import LedgerStorage

/// Where a named sync is (Mobile Sync's `SyncState.Status`).
public enum SyncStatus: String, Sendable, Hashable, Codable {
    /// Registered, never run.
    case new = "NEW"
    /// Running now.
    case running = "RUNNING"
    /// The last run finished.
    case done = "DONE"
    /// The last run failed; ``SyncState/error`` says why.
    case failed = "FAILED"
    /// The last run was interrupted (the process ended, or the task was cancelled) before it
    /// finished; ``SyncManager/reSync(_:)`` resumes it from its cursors.
    case stopped = "STOPPED"
}

/// One dataset of a named sync: its cursor and what the current (or last) run did to it.
public struct DatasetSyncState: Sendable, Hashable, Codable {
    /// The server sync count this named sync has pulled the dataset up to — the analog of
    /// Mobile Sync's `maxTimeStamp`. ``SyncManager/reSync(_:)`` pulls only what came after it.
    /// Kept per named sync: it is not the store's dataset cursor (``LocalDataset/lastSyncCount``),
    /// which ``SyncClient/synchronize(_:handler:)`` shares.
    public var syncCount: UInt64 = 0
    /// Records the server returned to this run's pulls (all attempts).
    public var fetched = 0
    /// Records written locally from the server in this run.
    public var pulled = 0
    /// Records pushed and accepted in this run.
    public var pushed = 0
    /// Records left alone by ``MergeMode/leaveIfChanged`` in this run (dirty locally on the
    /// way down; changed on the server on the way up).
    public var skipped = 0
    /// Whether this run has finished the dataset.
    public var done = false

    /// A dataset's state.
    public init(syncCount: UInt64 = 0) { self.syncCount = syncCount }
}

/// A named sync's persisted state, after Mobile Sync's `SyncState`: its definition, status,
/// progress, cursors, times and error. Stored as JSON in the client store (database `syncs`,
/// keyed by name) on every change, so it survives the process.
public struct SyncState: Sendable, Hashable, Codable {
    /// The sync's name.
    public var name: String
    /// Its direction.
    public var type: SyncType
    /// Its datasets (the target).
    public var datasets: [String]
    /// Its options.
    public var options: SyncOptions
    /// Where it is.
    public var status: SyncStatus
    /// 0-100: steps finished × 100 / steps, a step being one dataset in one direction (a
    /// ``SyncType/sync`` has two per dataset). 100 when ``SyncStatus/done``.
    public var progress: Int
    /// Records this run has met so far: fetched from the server plus dirty records considered
    /// for a push (it grows as datasets are processed: the server does not say in advance);
    /// -1 before the run has fetched anything (a run and a ``SyncManager/reSync(_:)`` set it to -1).
    public var totalSize: Int
    /// Per dataset: cursor and this run's counts.
    public var datasetStates: [String: DatasetSyncState]
    /// The identity the cursors belong to; a run under another identity (a login merged it)
    /// starts every cursor again from 0.
    public var identity: String?
    /// When the current (or last) run started (to the millisecond, as stored).
    public var startTime: Date?
    /// When the last run ended (nil while it runs).
    public var endTime: Date?
    /// Why the last run failed (``SyncStatus/failed``).
    public var error: String?

    /// The cursors per dataset (Mobile Sync's `maxTimeStamp`).
    public var cursors: [String: UInt64] { datasetStates.mapValues(\.syncCount) }
    /// Records written locally from the server in this run, all datasets.
    public var pulled: Int { datasetStates.values.reduce(0) { $0 + $1.pulled } }
    /// Records pushed and accepted in this run, all datasets.
    public var pushed: Int { datasetStates.values.reduce(0) { $0 + $1.pushed } }
    /// Records left alone in this run, all datasets.
    public var skipped: Int { datasetStates.values.reduce(0) { $0 + $1.skipped } }
    /// Records the server returned in this run, all datasets.
    public var fetched: Int { datasetStates.values.reduce(0) { $0 + $1.fetched } }

    /// The state of a sync just registered (``SyncStatus/new``).
    public init(definition: SyncDefinition) {
        name = definition.syncName
        type = definition.syncType
        datasets = definition.datasets
        options = definition.options
        status = .new
        progress = 0
        totalSize = -1
        datasetStates = Dictionary(uniqueKeysWithValues: definition.datasets.map { ($0, DatasetSyncState()) })
    }

    /// Steps of a run: datasets × directions.
    var steps: Int { datasets.count * (type == .sync ? 2 : 1) }

    // MARK: Stored form

    /// Now, to the millisecond: what the stored form keeps, so a state read back equals the one saved.
    static func now() -> Date { Date(timeIntervalSince1970: Double(milliseconds(Date())) / 1000) }

    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        e.dateEncodingStrategy = .custom { date, encoder in
            var c = encoder.singleValueContainer()
            try c.encode(milliseconds(date))
        }
        return e
    }()

    func encoded() throws -> [UInt8] {
        do { return Array(try Self.encoder.encode(self)) } catch { throw SyncClientError.store("sync \(name) does not encode: \(error)") }
    }

    static func decode(_ bytes: [UInt8]) throws -> SyncState {
        let d = JSONDecoder()
        d.dateDecodingStrategy = .custom { decoder in
            Date(timeIntervalSince1970: Double(try decoder.singleValueContainer().decode(Int64.self)) / 1000)
        }
        do { return try d.decode(SyncState.self, from: Data(bytes)) } catch { throw SyncClientError.store("a stored named sync does not decode: \(error)") }
    }
}

extension ClientStore {
    /// Every stored named sync state.
    func namedSyncStates() throws -> [SyncState] {
        try read { txn in
            var found: [SyncState] = []
            try txn.withCursor(syncs) { cursor in
                var pair = try cursor.first()
                while let current = pair {
                    found.append(try SyncState.decode(current.value))
                    pair = try cursor.next()
                }
            }
            return found
        }
    }

    /// Stores a named sync's state (one write transaction).
    func saveNamedSync(_ state: SyncState) throws {
        let bytes = try state.encoded()
        try write { txn in try txn.put(syncs, key: Array(state.name.utf8), value: bytes) }
    }

    /// Stores a named sync's state unless one of that name exists.
    /// - Returns: whether it was stored.
    func addNamedSync(_ state: SyncState) throws -> Bool {
        let bytes = try state.encoded()
        return try write { txn in
            if try txn.get(syncs, key: Array(state.name.utf8)) != nil { return false }
            try txn.put(syncs, key: Array(state.name.utf8), value: bytes)
            return true
        }
    }

    /// Forgets a named sync.
    func removeNamedSync(_ name: String) throws {
        try write { txn in _ = try txn.delete(syncs, key: Array(name.utf8)) }
    }

    /// Removes a clean record for good (``SyncManager/cleanResyncGhosts(_:)``): only when it is
    /// still the one read (same ``LocalRecord/version``) and still clean.
    /// - Returns: whether it was removed.
    func removeCleanRecord(identity: String, dataset name: String, key: String, version: UInt64) throws -> Bool {
        try write { txn in
            guard var d = try dataset(txn, identity, name), let current = try record(txn, d.id, key),
                  !current.isDirty, current.version == version else { return false }
            _ = try txn.delete(records, key: Self.recordKey(d.id, key).bytes)
            adjust(&d, removing: (key, current.value), adding: nil)
            try putDataset(txn, identity, name, d)
            return true
        }
    }
}
