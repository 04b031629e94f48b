import LedgerStorage

/// Read and write access to one dataset's view, as ``apply(_:to:)`` needs it. Implemented over
/// LMDB (the maintained views) and over memory (replay, verification, tests).
public protocol DatasetView {
    /// The dataset's metadata; nil before its first entry.
    var dataset: DatasetState? { get set }
    /// The record under `key`, tombstones included.
    func record(_ key: String) throws -> RecordState?
    /// Sets the record under `key`.
    mutating func setRecord(_ key: String, _ record: RecordState) throws
    /// Removes every record (a dataset delete).
    mutating func removeAllRecords() throws
}

/// The one function that turns log entries into state. The write path runs it inside the
/// append transaction; rebuild, replay and verify run it over the log. It reads nothing but
/// `view` and `entry`.
public func apply<View: DatasetView>(_ entry: LogEntry, to view: inout View) throws {
    // Cognito's LastModifiedBy: the device when the entry names one, else the caller.
    let by = entry.device ?? entry.author
    var meta = view.dataset ?? DatasetState(
        syncCount: 0, recordCount: 0, bytes: 0, created: entry.time, lastModified: entry.time,
        lastModifiedBy: by, deleted: false, lastDeleteSyncCount: 0)
    for event in entry.events {
        switch event {
        case .put(let key, _, let device), .remove(let key, let device), .erased(let key, let device):
            if meta.deleted {
                meta.deleted = false
                meta.created = entry.time
            }
            // An erased value (a redaction took it) replays as the empty string; the redaction
            // removed the record afterwards, so no current view holds one.
            let value: String? = switch event {
            case .put(_, let value, _): value
            case .erased: ""
            default: nil
            }
            // Take out what the record counted for, then count it as it is now: a value in the
            // records and bytes, a removed record in the markers and their key bytes.
            if let old = try view.record(key) { meta.count(key: key, value: old.value, adding: false) }
            meta.count(key: key, value: value, adding: true)
            try view.setRecord(key, RecordState(value: value, syncCount: entry.offset, lastModified: entry.time, lastModifiedBy: by, deviceModified: device))
        case .deleteDataset:
            try view.removeAllRecords()
            meta.recordCount = 0
            meta.bytes = 0
            meta.tombstones = 0
            meta.tombstoneBytes = 0
            meta.deleted = true
            meta.lastDeleteSyncCount = entry.offset
        }
    }
    meta.syncCount = entry.offset
    meta.lastModified = entry.time
    meta.lastModifiedBy = by
    view.dataset = meta
}

extension DatasetState {
    /// Adds (or takes out) one record's share of the counts: a value counts in the records and
    /// the bytes, a removed record (nil) in the markers and their key bytes.
    mutating func count(key: String, value: String?, adding: Bool) {
        if let value {
            let size = UInt64(key.utf8.count + value.utf8.count)
            if adding { recordCount += 1; bytes += size } else { recordCount -= 1; bytes -= size }
        } else {
            let size = UInt64(key.utf8.count)
            if adding { tombstones += 1; tombstoneBytes += size } else { tombstones -= 1; tombstoneBytes -= size }
        }
    }
}

/// A record key compared byte for byte (UTF-8), as Cognito compares keys: `"é"` (U+00E9) and
/// `"e\u{301}"` are two different keys, although Swift's `String` calls them equal.
public struct RecordKey: Hashable, Comparable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The key.
    public let string: String

    /// Wraps a key.
    public init(_ string: String) { self.string = string }
    public init(stringLiteral value: String) { self.string = value }

    public static func == (a: RecordKey, b: RecordKey) -> Bool { Bytes.equalUTF8(a.string, b.string) }
    public static func < (a: RecordKey, b: RecordKey) -> Bool { Bytes.lessUTF8(a.string, b.string) }
    public func hash(into hasher: inout Hasher) { hasher.combine(utf8Of: string) }
    public var description: String { string }
}

/// A dataset's view held in memory: what replay and time travel return.
public struct MemoryDatasetView: DatasetView, Hashable, Sendable {
    /// The metadata; nil before the first entry.
    public var dataset: DatasetState?
    /// Every record, tombstones included, by key (compared byte for byte).
    public var records: [RecordKey: RecordState]

    /// An empty view (before the first entry).
    public init() {
        dataset = nil
        records = [:]
    }

    public func record(_ key: String) throws -> RecordState? { records[RecordKey(key)] }
    public mutating func setRecord(_ key: String, _ record: RecordState) throws { records[RecordKey(key)] = record }
    public mutating func removeAllRecords() throws { records.removeAll() }

    /// The records that have a value, by key.
    public var liveRecords: [RecordKey: String] {
        records.compactMapValues { $0.value }
    }
}
