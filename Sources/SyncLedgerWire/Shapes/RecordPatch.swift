/// One change an UpdateRecords call asks for (botocore's `RecordPatch`; the domain's
/// `Ledger.updateRecords` takes them). Coded as Cognito's JSON: `Op`, `Key`, `Value` (none for
/// a removal), `SyncCount` and `DeviceLastModifiedDate` in epoch seconds.
public struct RecordPatch: Hashable, Sendable, Codable {
    /// Cognito's two operations.
    public enum Operation: String, Sendable, Hashable, Codable {
        /// Set the value.
        case replace
        /// Remove the record.
        case remove
    }

    /// What to do.
    public var op: Operation
    /// The record key.
    public var key: String
    /// The new value (required for `.replace`).
    public var value: String?
    /// The record's sync count as the caller last saw it; 0 for a record it believes new.
    public var syncCount: UInt64
    /// The device's own time of the change, if it sent one.
    public var deviceModified: Timestamp?

    /// A patch.
    public init(op: Operation, key: String, value: String? = nil, syncCount: UInt64, deviceModified: Timestamp? = nil) {
        self.op = op
        self.key = key
        self.value = value
        self.syncCount = syncCount
        self.deviceModified = deviceModified
    }

    enum CodingKeys: String, CodingKey {
        case op = "Op", key = "Key", value = "Value", syncCount = "SyncCount", deviceModified = "DeviceLastModifiedDate"
    }

    /// Decodes Cognito's JSON form: `Op`, `Key` and `SyncCount` required, the date in epoch
    /// seconds (rounded to the millisecond).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        op = try c.decode(Operation.self, forKey: .op)
        key = try c.decode(String.self, forKey: .key)
        value = try c.decodeIfPresent(String.self, forKey: .value)
        syncCount = try c.decodeRequiredNumber(UInt64.self, forKey: .syncCount)
        deviceModified = try c.decodeEpochSeconds(forKey: .deviceModified)
    }

    /// Encodes Cognito's JSON form, leaving out a nil value and date.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(op, forKey: .op)
        try c.encode(key, forKey: .key)
        try c.encodeIfPresent(value, forKey: .value)
        try c.encode(syncCount, forKey: .syncCount)
        try c.encodeEpochSeconds(deviceModified, forKey: .deviceModified)
    }
}
