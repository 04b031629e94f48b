import Crypto

/// How a cluster spreads identities over shards: `shard = H(pool, identity) mod count`, where
/// `H` is the first 8 bytes of `SHA-256(pool ‖ 0x00 ‖ identity)` read big-endian.
///
/// Every stream of an identity — its datasets and its own streams such as its device messages
/// — lands on the same shard, so a write that touches one identity touches one shard. The
/// streams of SyncLedger's own system identity (identity pools and their identity records,
/// the device registry and subscriptions, pool configuration, redactions) all belong to shard
/// 0, the registry shard: operations such as GetId write several of them at once. The hash is fixed (not Swift's seeded `Hasher`), so every node
/// and every version computes the same map; the count is fixed when the cluster is created.
public struct ShardMap: Sendable, Hashable, CustomStringConvertible {
    /// The most shards a cluster may have.
    public static let maxShards = 4096
    /// The number of shards.
    public let count: Int

    /// A map of `count` shards.
    /// - Throws: `.invalidParameter` unless `count` is 1 to ``maxShards``.
    public init(count: Int) throws(LedgerError) {
        guard (1...Self.maxShards).contains(count) else {
            throw LedgerError(.invalidParameter, "a cluster has 1-\(Self.maxShards) shards, not \(count)")
        }
        self.count = count
    }

    /// The shard of an identity of a pool.
    public func shard(pool: String, identity: String) -> Int {
        var hasher = SHA256()
        hasher.update(data: Array(pool.utf8))
        hasher.update(data: [0])
        hasher.update(data: Array(identity.utf8))
        var value: UInt64 = 0
        for byte in hasher.finalize().prefix(8) { value = value << 8 | UInt64(byte) }
        return Int(value % UInt64(count))
    }

    /// The shard of SyncLedger's own streams (those of ``Ledger/systemIdentity``).
    public static let registryShard = 0

    /// The shard a stream belongs to: its identity's, or the registry shard for SyncLedger's
    /// own streams.
    public func shard(of stream: StreamName) -> Int {
        if stream.identity == Ledger.systemIdentity { return Self.registryShard }
        return shard(pool: stream.pool.rawValue, identity: stream.identity.rawValue)
    }

    public var description: String { "\(count) shards" }
}
