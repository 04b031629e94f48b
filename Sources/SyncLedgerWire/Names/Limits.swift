/// Cognito Sync's limits, and SyncLedger's own bounds, configurable. Exceeding one is a
/// `.limitExceeded` error and nothing is written.
public struct Limits: Sendable, Equatable {
    /// UTF-8 bytes of keys and values in one dataset (default 1 MB).
    public var maxDatasetBytes: UInt64 = 1_048_576
    /// Datasets one identity may have (default 20).
    public var maxDatasetsPerIdentity: Int = 20
    /// Records with a value in one dataset (default 1,024).
    public var maxRecordsPerDataset: UInt64 = 1024
    /// Characters (UTF-16 code units, as Cognito counts) of a record key (default 1,024).
    public var maxKeyLength: Int = 1024
    /// Characters (UTF-16 code units) of a record value (default 1,048,575).
    public var maxValueLength: Int = 1_048_575
    /// Removed-record markers (tombstones) one dataset keeps (default 10,240). Every removal
    /// leaves one, so that devices learn of it; deleting the dataset clears them.
    public var maxTombstonesPerDataset: UInt64 = 10_240
    /// UTF-8 bytes of the keys of those markers (default 1 MB, as a dataset's own bytes).
    public var maxTombstoneBytesPerDataset: UInt64 = 1_048_576
    /// Devices one identity may register (default 100).
    public var maxDevicesPerIdentity: Int = 100
    /// UTF-8 bytes of keys and values in one device-to-server message (default 4,096, what an
    /// FCM upstream message carried).
    public var maxMessageBytes: Int = 4096
    /// Identities one Cognito Identity pool may have (default 1,000,000): GetId needs no
    /// signature, so this bounds what unauthenticated callers can make a pool store.
    public var maxIdentitiesPerPool: Int = 1_000_000
    /// Dataset names one identity may use over its life, deleted datasets included (default
    /// 1,000): bounds what creating and deleting datasets can pile up.
    public var maxDatasetNamesPerIdentity: Int = 1000

    /// Cognito's defaults.
    public init() {}
}
