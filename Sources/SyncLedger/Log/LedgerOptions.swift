import Foundation

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

/// How a ``Ledger`` is opened.
public struct LedgerOptions: Sendable {
    /// `true` (default): a write returns only once it is on disk (fsync). `false`: commits skip
    /// fsync — a killed process loses nothing, a power cut can lose the last commits. For
    /// benchmarks and bulk loads.
    public var durable: Bool = true
    /// The limits enforced on writes.
    public var limits = Limits()
    /// How long a sync session token stays valid (default 10 minutes).
    public var sessionLifetime: Duration = .seconds(600)
    /// The initial memory map; it grows by itself when full.
    public var initialMapSize: Int = 256 << 20
    /// The clock for server times and token expiry (tests may set their own).
    public var clock: @Sendable () -> Timestamp = { .now }
    /// `true` (default): make the data directory and an empty ledger when there is none.
    /// `false`: refuse with `.notFound` — what read-only tools want, so that a mistyped path is
    /// an error rather than an empty ledger.
    public var createIfMissing = true
    /// Where the secrets live (see ``SecretStore``); nil: `secrets` inside the data directory.
    public var secretsDirectory: String?
    /// `true` (default): a directory written by an older format is migrated when opened.
    /// `false`: it is refused with `.unsupportedFormat` — what read-only tools want, so that
    /// looking at a directory beside an older server never changes it under that server.
    public var migrate = true
    /// The key that signs sync session and paging tokens, when it must be shared (32 bytes):
    /// a cluster's nodes derive one from their shared admin secret, so a token one node issued
    /// verifies on every other. Nil (default): the key kept in the secret store.
    public var tokenKey: [UInt8]?
    /// The keys that sign Cognito Identity's OpenID tokens, when they must be shared: a
    /// cluster's nodes derive them from the cluster secret, so every node serves the same JWKS
    /// and a token outlives the registry shard's move. Nil (default): the key kept in the
    /// secret store (one node's own).
    public var identityKeyring: IdentityKeyring?
    /// On a cluster, how long an identity merge waits for the survivor's shard owner to make its
    /// copies before it answers (they are made all the same afterwards).
    public var mergeCopyWait: Duration = .seconds(5)

    /// The defaults: durable, Cognito's limits, 10-minute sessions.
    public init() {}
}
