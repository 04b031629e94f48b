import LedgerStorage

/// The current state of one record in a dataset's view.
public struct RecordState: Hashable, Sendable {
    /// The value, or nil when the record was removed (a tombstone).
    public var value: String?
    /// The offset of the entry that last changed it.
    public var syncCount: UInt64
    /// Server time of the last change.
    public var lastModified: Timestamp
    /// Who made the last change.
    public var lastModifiedBy: String
    /// The device's own time of the last change, when it sent one.
    public var deviceModified: Timestamp?

    /// Whether the record was removed.
    public var isTombstone: Bool { value == nil }

    /// The stored form. `fullKey` is set for keys too long for an LMDB key (see
    /// ``Schema/recordKey(stream:key:)``), which are kept whole in the value.
    func encoded(fullKey: String? = nil) -> [UInt8] {
        var w = ByteWriter(capacity: 24 + lastModifiedBy.utf8.count + (value?.utf8.count ?? 0) + (fullKey?.utf8.count ?? 0))
        var flags: UInt8 = 0
        if value == nil { flags |= 1 }
        if deviceModified != nil { flags |= 2 }
        if fullKey != nil { flags |= 4 }
        w.byte(flags)
        w.varint(syncCount)
        w.signed(lastModified.milliseconds)
        if let deviceModified { w.signed(deviceModified.milliseconds) }
        w.string(lastModifiedBy)
        if let fullKey { w.string(fullKey) }
        if let value { w.raw(value.utf8) }
        return w.bytes
    }

    init(value: String?, syncCount: UInt64, lastModified: Timestamp, lastModifiedBy: String, deviceModified: Timestamp?) {
        self.value = value
        self.syncCount = syncCount
        self.lastModified = lastModified
        self.lastModifiedBy = lastModifiedBy
        self.deviceModified = deviceModified
    }

    init(decoding bytes: [UInt8]) throws(DecodeFailure) {
        var ignored: String?
        try self.init(decoding: bytes, fullKey: &ignored)
    }

    /// Decodes the stored form; `fullKey` receives the key when the value holds it.
    init(decoding bytes: [UInt8], fullKey: inout String?) throws(DecodeFailure) {
        var r = ByteReader(bytes)
        let flags = try r.byte()
        guard flags & ~7 == 0 else { throw DecodeFailure(description: "unknown record flags \(flags)") }
        syncCount = try r.varint()
        lastModified = Timestamp(milliseconds: try r.signed())
        deviceModified = flags & 2 != 0 ? Timestamp(milliseconds: try r.signed()) : nil
        lastModifiedBy = try r.string()
        fullKey = flags & 4 != 0 ? try r.string() : nil
        if flags & 1 != 0 {
            try r.expectEnd()
            value = nil
        } else {
            let rest = try r.raw(r.remaining)
            guard let text = utf8String(rest) else { throw DecodeFailure(description: "record value is not UTF-8") }
            value = text
        }
    }
}

/// The metadata of one dataset's view.
public struct DatasetState: Hashable, Sendable {
    /// The offset of the stream's last entry.
    public var syncCount: UInt64
    /// Records with a value (tombstones not counted).
    public var recordCount: UInt64
    /// UTF-8 bytes of the keys and values of those records.
    public var bytes: UInt64
    /// When the dataset was created (again, after a delete).
    public var created: Timestamp
    /// When it last changed.
    public var lastModified: Timestamp
    /// Who changed it last.
    public var lastModifiedBy: String
    /// Whether its last entry deleted it.
    public var deleted: Bool
    /// The offset of its latest delete entry (0 if never deleted).
    public var lastDeleteSyncCount: UInt64
    /// Removed records it keeps as markers (tombstones), so that devices learn of the removal.
    public var tombstones: UInt64 = 0
    /// UTF-8 bytes of those markers' keys.
    public var tombstoneBytes: UInt64 = 0

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 48 + lastModifiedBy.utf8.count)
        w.byte(deleted ? 1 : 0)
        w.varint(syncCount)
        w.varint(recordCount)
        w.varint(bytes)
        w.signed(created.milliseconds)
        w.signed(lastModified.milliseconds)
        w.varint(lastDeleteSyncCount)
        w.string(lastModifiedBy)
        w.varint(tombstones)
        w.varint(tombstoneBytes)
        return w.bytes
    }

    init(syncCount: UInt64, recordCount: UInt64, bytes: UInt64, created: Timestamp, lastModified: Timestamp, lastModifiedBy: String, deleted: Bool, lastDeleteSyncCount: UInt64) {
        self.syncCount = syncCount
        self.recordCount = recordCount
        self.bytes = bytes
        self.created = created
        self.lastModified = lastModified
        self.lastModifiedBy = lastModifiedBy
        self.deleted = deleted
        self.lastDeleteSyncCount = lastDeleteSyncCount
    }

    init(decoding bytes: [UInt8]) throws(DecodeFailure) {
        var r = ByteReader(bytes)
        let flag = try r.byte()
        guard flag <= 1 else { throw DecodeFailure(description: "unknown dataset flags \(flag)") }
        deleted = flag == 1
        syncCount = try r.varint()
        recordCount = try r.varint()
        self.bytes = try r.varint()
        created = Timestamp(milliseconds: try r.signed())
        lastModified = Timestamp(milliseconds: try r.signed())
        lastDeleteSyncCount = try r.varint()
        lastModifiedBy = try r.string()
        tombstones = try r.varint()
        tombstoneBytes = try r.varint()
        try r.expectEnd()
    }
}
