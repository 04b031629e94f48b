public import Foundation
import Crypto
import LedgerStorage
public import SyncLedgerWire

/// The client's local store: an LMDB environment in its own directory, written through the
/// project's storage layer. Every change is one write transaction (durable: it survives kill -9
/// and power loss once the call returns).
///
/// Databases: `datasets` (identity ␀ dataset → ``LocalDataset``), `records` (dataset id ‖ key →
/// ``LocalRecord``; keys over 400 bytes are stored as a hash with the key in the value), `dirty`
/// (the keys of the dirty records), `meta`
/// (the next dataset id, the identity in use, the device id), `queue` (syncs to run:
/// identity ␀ dataset → why and since when) and `syncs` (named sync states, JSON).
public final class ClientStore: Sendable {
    let environment: Environment
    let datasets: Database
    let records: Database
    let meta: Database
    let queue: Database
    let syncs: Database
    /// The dirty records' keys (the `records` key), so a push finds them without a scan.
    let dirty: Database
    /// The server's limits, checked locally before a push (and on put).
    public let limits: Limits
    /// The limits of a server with its defaults.
    public static var defaultLimits: Limits { Limits() }

    /// Opens (or creates) the store in `directory`.
    /// - Throws: ``SyncClientError/store(_:)`` when it cannot be opened.
    public init(directory: String, limits: Limits = Limits(), durable: Bool = true) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            var options = EnvironmentOptions()
            options.durable = durable
            options.maxDatabases = 8
            environment = try Environment(path: directory, options: options)
            datasets = try environment.openDatabase("datasets")
            records = try environment.openDatabase("records")
            meta = try environment.openDatabase("meta")
            queue = try environment.openDatabase("queue")
            syncs = try environment.openDatabase("syncs")
            dirty = try environment.openDatabase("dirty")
        } catch let error as SyncClientError {
            throw error
        } catch {
            throw SyncClientError.store("cannot open the store in \(directory): \(error)")
        }
        self.limits = limits
    }

    /// The store's directory.
    public var directory: String { environment.path }

    // MARK: Transactions

    func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        do { return try environment.read(body) } catch let error as SyncClientError { throw error } catch {
            throw SyncClientError.store("\(error)")
        }
    }

    func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        do {
            // A full map grows and the transaction runs again (nothing of it was kept).
            for _ in 0..<8 {
                do { return try environment.write(body) } catch LMDBError.mapFull { try environment.grow() }
            }
            return try environment.write(body)
        } catch let error as SyncClientError { throw error } catch {
            throw SyncClientError.store("\(error)")
        }
    }

    // MARK: Keys

    static func datasetKey(_ identity: String, _ dataset: String) -> [UInt8] {
        Array(identity.utf8) + [0] + Array(dataset.utf8)
    }

    static let maxInlineKey = 400

    /// The LMDB key of record `key` of dataset `id`, and whether the key must be kept in the value.
    static func recordKey(_ id: UInt64, _ key: String) -> (bytes: [UInt8], long: Bool) {
        let utf8 = Array(key.utf8)
        if utf8.count <= maxInlineKey { return ([UInt8].bigEndian(id) + utf8, false) }
        return ([UInt8].bigEndian(id) + [0xFF] + Array(SHA256.hash(data: utf8)), true)
    }

    static func keyOf(_ stored: [UInt8], _ fullKey: String?) throws -> String {
        if let fullKey { return fullKey }
        guard let key = String(validating: stored.dropFirst(8), as: UTF8.self) else { throw SyncClientError.store("a stored key is not UTF-8") }
        return key
    }

    // MARK: Datasets

    func dataset(_ txn: Transaction, _ identity: String, _ name: String) throws -> LocalDataset? {
        try txn.get(datasets, key: Self.datasetKey(identity, name)).map(LocalDataset.decode)
    }

    func putDataset(_ txn: Transaction, _ identity: String, _ name: String, _ dataset: LocalDataset) throws {
        try txn.put(datasets, key: Self.datasetKey(identity, name), value: dataset.encoded())
    }

    /// The dataset, made (empty, never synced) when missing.
    func ensureDataset(_ txn: Transaction, _ identity: String, _ name: String, now: Date) throws -> LocalDataset {
        if let found = try dataset(txn, identity, name) { return found }
        let next = try txn.get(meta, key: Array("next-dataset-id".utf8)).map { $0.bigEndianUInt64() } ?? 1
        try txn.put(meta, key: Array("next-dataset-id".utf8), value: .bigEndian(next + 1))
        let made = LocalDataset(id: next, lastSyncCount: 0, created: now, lastModified: now, recordCount: 0, bytes: 0,
                                lastSyncTime: nil, lastSyncOutcome: .never, lastSyncError: nil)
        try putDataset(txn, identity, name, made)
        return made
    }

    /// The datasets of `identity`, by name.
    public func datasets(identity: String) throws -> [(name: String, dataset: LocalDataset)] {
        try read { txn in
            let prefix = Array(identity.utf8) + [0]
            var found: [(String, LocalDataset)] = []
            try txn.withCursor(datasets) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    guard let name = String(validating: current.key.dropFirst(prefix.count), as: UTF8.self) else { throw SyncClientError.store("a dataset name is not UTF-8") }
                    found.append((name, try LocalDataset.decode(current.value)))
                    pair = try cursor.next()
                }
            }
            return found
        }
    }

    /// The dataset `name` of `identity`, nil when the store has none.
    public func dataset(identity: String, name: String) throws -> LocalDataset? {
        try read { txn in try dataset(txn, identity, name) }
    }

    // MARK: Records

    func record(_ txn: Transaction, _ id: UInt64, _ key: String) throws -> LocalRecord? {
        try txn.get(records, key: Self.recordKey(id, key).bytes).map { try LocalRecord.decode($0).record }
    }

    func putRecord(_ txn: Transaction, _ id: UInt64, _ key: String, _ record: LocalRecord) throws {
        let (bytes, long) = Self.recordKey(id, key)
        try txn.put(records, key: bytes, value: record.encoded(fullKey: long ? key : nil))
        if record.isDirty { try txn.put(dirty, key: bytes, value: []) } else { _ = try txn.delete(dirty, key: bytes) }
    }

    /// The dirty records of dataset `id`, from the dirty index.
    func dirtyRecords(_ txn: Transaction, _ id: UInt64) throws -> [(key: String, record: LocalRecord)] {
        let prefix = [UInt8].bigEndian(id)
        var keys: [[UInt8]] = []
        try txn.withCursor(dirty) { cursor in
            var pair = try cursor.seek(atLeast: prefix)
            while let current = pair, current.key.starts(with: prefix) {
                keys.append(current.key)
                pair = try cursor.next()
            }
        }
        return try keys.compactMap { stored in
            guard let bytes = try txn.get(records, key: stored) else { return nil }
            let (record, fullKey) = try LocalRecord.decode(bytes)
            return (try Self.keyOf(stored, fullKey), record)
        }
    }

    /// Every record of dataset `id` (removed ones too), in key order of their stored form.
    func allRecords(_ txn: Transaction, _ id: UInt64) throws -> [(key: String, record: LocalRecord)] {
        let prefix = [UInt8].bigEndian(id)
        var found: [(String, LocalRecord)] = []
        try txn.withCursor(records) { cursor in
            var pair = try cursor.seek(atLeast: prefix)
            while let current = pair, current.key.starts(with: prefix) {
                let (record, fullKey) = try LocalRecord.decode(current.value)
                found.append((try Self.keyOf(current.key, fullKey), record))
                pair = try cursor.next()
            }
        }
        return found
    }

    func removeAllRecords(_ txn: Transaction, _ id: UInt64) throws {
        let prefix = [UInt8].bigEndian(id)
        for db in [records, dirty] {
            try txn.withCursor(db) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    try cursor.deleteCurrent()
                    pair = try cursor.seek(atLeast: prefix)
                }
            }
        }
    }

    /// Record `key` of the dataset, nil when absent.
    public func record(identity: String, dataset: String, key: String) throws -> LocalRecord? {
        try read { txn in
            guard let d = try self.dataset(txn, identity, dataset) else { return nil }
            return try record(txn, d.id, key)
        }
    }

    /// Every record of the dataset (removed ones too), by key.
    public func records(identity: String, dataset: String) throws -> [String: LocalRecord] {
        try read { txn in
            guard let d = try self.dataset(txn, identity, dataset) else { return [:] }
            return Dictionary(try allRecords(txn, d.id).map { ($0.key, $0.record) }, uniquingKeysWith: { a, _ in a })
        }
    }

    /// Sets (or with nil, removes) record `key` as a local change: dirty, the sync count kept,
    /// the device time now. A value equal to the current one changes nothing (as the SDKs do).
    /// - Returns: whether anything changed.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` for a key or value the server would
    ///   refuse; ``SyncClientError/limitExceeded(_:)`` past the dataset's limits.
    @discardableResult
    public func put(identity: String, dataset name: String, key: String, value: String?, now: Date = Date()) throws -> Bool {
        try checkRecord(key: key, value: value)
        return try write { txn in
            var d = try ensureDataset(txn, identity, name, now: now)
            guard try putOne(txn, &d, name, key, value, now: now) else { return false }
            try putDataset(txn, identity, name, d)
            return true
        }
    }

    /// Sets (nil: removes) several records as ``put(identity:dataset:key:value:now:)`` does,
    /// in one transaction: all or none.
    /// - Returns: how many changed.
    @discardableResult
    public func put(identity: String, dataset name: String, values: [String: String?], now: Date = Date()) throws -> Int {
        for (key, value) in values { try checkRecord(key: key, value: value) }
        return try write { txn in
            var d = try ensureDataset(txn, identity, name, now: now)
            var changed = 0
            for (key, value) in values.sorted(by: { $0.key < $1.key }) where try putOne(txn, &d, name, key, value, now: now) { changed += 1 }
            if changed > 0 { try putDataset(txn, identity, name, d) }
            return changed
        }
    }

    private func putOne(_ txn: Transaction, _ d: inout LocalDataset, _ name: String, _ key: String, _ value: String?, now: Date) throws -> Bool {
        do {
            if d.isDeletedLocally {
                // A change after a local delete: the dataset starts again, the delete still owed.
                throw SyncClientError.invalidParameter("dataset \(name) was deleted locally and not synced yet; synchronize it before writing to it again")
            }
            let old = try record(txn, d.id, key)
            if let old, old.value == value { return false }
            if old == nil, value == nil { return false }
            var next = old ?? LocalRecord(value: nil, syncCount: 0, isDirty: true)
            next.value = value
            next.isDirty = true
            next.deviceLastModified = now
            next.version &+= 1
            adjust(&d, removing: old.map { (key, $0.value) }, adding: (key, value))
            if value != nil {
                guard d.recordCount <= limits.maxRecordsPerDataset else {
                    throw SyncClientError.limitExceeded("dataset \(name) would hold \(d.recordCount) records; the limit is \(limits.maxRecordsPerDataset)")
                }
                guard d.bytes <= limits.maxDatasetBytes else {
                    throw SyncClientError.limitExceeded("dataset \(name) would hold \(d.bytes) bytes; the limit is \(limits.maxDatasetBytes)")
                }
            }
            d.lastModified = now
            try putRecord(txn, d.id, key, next)
            return true
        }
    }

    /// Checks a key and value against the server's rules.
    func checkRecord(key: String, value: String?) throws {
        let length = key.utf16.count
        guard (1...limits.maxKeyLength).contains(length) else {
            throw SyncClientError.invalidParameter("a key must be 1-\(limits.maxKeyLength) characters, not \(length)")
        }
        if let value, value.utf16.count > limits.maxValueLength {
            throw SyncClientError.limitExceeded("the value of \(key.prefix(64)) has \(value.utf16.count) characters; the limit is \(limits.maxValueLength)")
        }
    }

    func adjust(_ d: inout LocalDataset, removing old: (String, String?)?, adding new: (String, String?)?) {
        if let (key, value) = old, let value {
            d.recordCount -= 1
            d.bytes -= LocalRecord.size(key: key, value: value)
        }
        if let (key, value) = new, let value {
            d.recordCount += 1
            d.bytes += LocalRecord.size(key: key, value: value)
        }
    }

    /// Deletes the dataset locally: its records go, and it is remembered (last sync count -1)
    /// until a sync has told the server.
    public func deleteDataset(identity: String, dataset name: String, now: Date = Date()) throws {
        try write { txn in
            guard var d = try dataset(txn, identity, name) else { return }
            try removeAllRecords(txn, d.id)
            d.lastSyncCount = -1
            d.recordCount = 0
            d.bytes = 0
            d.lastModified = now
            try putDataset(txn, identity, name, d)
        }
    }

    /// Forgets the dataset and its records (after the server deleted it, or was told).
    func purge(identity: String, dataset name: String) throws {
        try write { txn in
            guard let d = try dataset(txn, identity, name) else { return }
            try removeAllRecords(txn, d.id)
            _ = try txn.delete(datasets, key: Self.datasetKey(identity, name))
        }
    }

    // MARK: Meta

    /// A setting kept with the store (the CLI keeps its signed-in identity here), nil when unset.
    public func metaValue(_ key: String) throws -> String? {
        try read { txn in try txn.get(meta, key: Array(key.utf8)).flatMap { String(validating: $0, as: UTF8.self) } }
    }

    /// Sets (or with nil, removes) a setting kept with the store.
    public func setMeta(_ key: String, _ value: String?) throws {
        try write { txn in
            if let value { try txn.put(meta, key: Array(key.utf8), value: Array(value.utf8)) } else { _ = try txn.delete(meta, key: Array(key.utf8)) }
        }
    }

    /// This installation's device id: made once (a random UUID) and kept.
    public func deviceID() throws -> String {
        if let id = try metaValue("device-id") { return id }
        return try write { txn in
            if let id = try txn.get(meta, key: Array("device-id".utf8)).flatMap({ String(validating: $0, as: UTF8.self) }) { return id }
            let id = UUID().uuidString.lowercased()
            try txn.put(meta, key: Array("device-id".utf8), value: Array(id.utf8))
            return id
        }
    }
}
