public import Foundation
import LedgerStorage
import SyncLedgerWire

/// A record in the local store.
public struct LocalRecord: Sendable, Hashable {
    /// The value; nil when the record was removed (kept until the server has been told, and
    /// then as the server's tombstone).
    public var value: String?
    /// The sync count of the record as this device last saw it on the server (0: never synced).
    public var syncCount: UInt64
    /// The server's time of the last change this device saw.
    public var lastModified: Date?
    /// Who made that change.
    public var lastModifiedBy: String?
    /// When this device last changed it.
    public var deviceLastModified: Date?
    /// Whether it holds a local change the server has not accepted yet.
    public var isDirty: Bool
    /// A counter of local changes, so that a sync notices a record changed while it ran.
    public var version: UInt64

    /// A record.
    public init(value: String?, syncCount: UInt64, lastModified: Date? = nil, lastModifiedBy: String? = nil,
                deviceLastModified: Date? = nil, isDirty: Bool, version: UInt64 = 0) {
        self.value = value
        self.syncCount = syncCount
        self.lastModified = lastModified
        self.lastModifiedBy = lastModifiedBy
        self.deviceLastModified = deviceLastModified
        self.isDirty = isDirty
        self.version = version
    }

    /// UTF-8 bytes it counts toward the dataset's size (key and value, as the server counts).
    static func size(key: String, value: String?) -> UInt64 { UInt64(key.utf8.count + (value?.utf8.count ?? 0)) }

    func encoded(fullKey: String?) -> [UInt8] {
        var w = ByteWriter(capacity: 32 + (value?.utf8.count ?? 0) + (lastModifiedBy?.utf8.count ?? 0))
        var flags: UInt8 = 0
        if value == nil { flags |= 1 }
        if isDirty { flags |= 2 }
        if lastModified != nil { flags |= 4 }
        if deviceLastModified != nil { flags |= 8 }
        if lastModifiedBy != nil { flags |= 16 }
        if fullKey != nil { flags |= 32 }
        w.byte(flags)
        w.varint(syncCount)
        w.varint(version)
        if let lastModified { w.signed(Timestamp(lastModified).milliseconds) }
        if let deviceLastModified { w.signed(Timestamp(deviceLastModified).milliseconds) }
        if let lastModifiedBy { w.string(lastModifiedBy) }
        if let fullKey { w.string(fullKey) }
        if let value { w.raw(value.utf8) }
        return w.bytes
    }

    /// Decodes a stored record; `fullKey` is set when the key was too long to store inline.
    static func decode(_ bytes: [UInt8]) throws -> (record: LocalRecord, fullKey: String?) {
        do {
            var r = ByteReader(bytes)
            let flags = try r.byte()
            let syncCount = try r.varint()
            let version = try r.varint()
            let modified = flags & 4 != 0 ? Date(timeIntervalSince1970: Double(try r.signed()) / 1000) : nil
            let device = flags & 8 != 0 ? Date(timeIntervalSince1970: Double(try r.signed()) / 1000) : nil
            let by = flags & 16 != 0 ? try r.string() : nil
            let fullKey = flags & 32 != 0 ? try r.string() : nil
            var value: String?
            if flags & 1 == 0 {
                guard let text = String(validating: try r.raw(r.remaining), as: UTF8.self) else { throw SyncClientError.store("a stored value is not UTF-8") }
                value = text
            }
            return (LocalRecord(value: value, syncCount: syncCount, lastModified: modified, lastModifiedBy: by, deviceLastModified: device,
                                isDirty: flags & 2 != 0, version: version), fullKey)
        } catch let failure as DecodeFailure {
            throw SyncClientError.store("a stored record does not decode: \(failure)")
        }
    }
}

/// What a sync of a dataset came to, as the store remembers it.
public enum SyncOutcome: String, Sendable, Codable {
    /// In sync with the server.
    case synced
    /// Failed; the reason is in ``LocalDataset/lastSyncError``.
    case failed
    /// Never synced.
    case never
}

/// A dataset in the local store.
public struct LocalDataset: Sendable, Hashable {
    /// The store's id of the dataset (its records are kept under it, so a rename moves nothing).
    var id: UInt64
    /// The server's sync count this device has all changes up to; -1 when the dataset was
    /// deleted locally and the server has not been told yet.
    public var lastSyncCount: Int64
    /// When it was made locally.
    public var created: Date
    /// When it last changed locally or from a sync.
    public var lastModified: Date
    /// Records with a value.
    public var recordCount: UInt64
    /// UTF-8 bytes of their keys and values.
    public var bytes: UInt64
    /// When it was last synced, and how that went.
    public var lastSyncTime: Date?
    /// How the last sync ended.
    public var lastSyncOutcome: SyncOutcome
    /// Why the last sync failed.
    public var lastSyncError: String?

    /// Whether it was deleted locally (and the server not told yet).
    public var isDeletedLocally: Bool { lastSyncCount < 0 }

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 64)
        w.byte(1)
        w.varint(id)
        w.signed(lastSyncCount)
        w.signed(Timestamp(created).milliseconds)
        w.signed(Timestamp(lastModified).milliseconds)
        w.varint(recordCount)
        w.varint(bytes)
        w.signed(lastSyncTime.map { Timestamp($0).milliseconds } ?? Int64.min)
        w.string(lastSyncOutcome.rawValue)
        w.string(lastSyncError ?? "")
        return w.bytes
    }

    static func decode(_ bytes: [UInt8]) throws -> LocalDataset {
        do {
            var r = ByteReader(bytes)
            guard try r.byte() == 1 else { throw SyncClientError.store("a stored dataset has an unknown format") }
            let id = try r.varint()
            let last = try r.signed()
            let created = Date(timeIntervalSince1970: Double(try r.signed()) / 1000)
            let modified = Date(timeIntervalSince1970: Double(try r.signed()) / 1000)
            let count = try r.varint()
            let size = try r.varint()
            let synced = try r.signed()
            let outcome = SyncOutcome(rawValue: try r.string()) ?? .failed
            let error = try r.string()
            return LocalDataset(id: id, lastSyncCount: last, created: created, lastModified: modified, recordCount: count, bytes: size,
                                lastSyncTime: synced == Int64.min ? nil : Date(timeIntervalSince1970: Double(synced) / 1000),
                                lastSyncOutcome: outcome, lastSyncError: error.isEmpty ? nil : error)
        } catch let failure as DecodeFailure {
            throw SyncClientError.store("a stored dataset does not decode: \(failure)")
        }
    }
}
