import Foundation

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
