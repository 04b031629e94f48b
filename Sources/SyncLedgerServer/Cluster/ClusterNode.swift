import Crypto
import Foundation
public import Logging
import NATS
import Synchronization
public import SyncLedger

/// A SyncLedger node of a cluster: connects to the JetStream cluster, makes sure the cluster's
/// settings, lease bucket and shard streams exist, binds the ledger to the shard log, and runs
/// the shards' tails and the lease loop.
public final class ClusterNode: Sendable {
    let options: ClusterOptions
    let shards: ShardMap
    let client: NATSClient
    let jetStream: JetStreamContext
    let ownership: ShardOwnership
    let counters: ShardCounters
    let log: JetStreamShardLog
    let leases: ShardLeases
    let tail: ShardTail
    let bucket: KeyValue
    private let tasks = Mutex<[Task<Void, Never>]>([])

    /// Joins the cluster: fails when the JetStream cluster cannot be reached, or when it was
    /// created with another shard count.
    public static func start(_ options: ClusterOptions, ledger: Ledger, logger: Logger) async throws -> ClusterNode {
        let shards = try ShardMap(count: options.shards)
        var natsOptions = NATSClientOptions(servers: options.servers)
        natsOptions.name = "syncledger-\(options.nodeID)"
        let client = try await NATSClient.connect(natsOptions)
        do {
            let jetStream = JetStreamContext(client: client)
            let settings = try await keyValue(jetStream, ClusterNames.settings, replicas: options.replicas, ttl: nil)
            do {
                _ = try await settings.create("shards", Array("\(shards.count)".utf8))
            } catch {
                guard let stored = try await settings.get("shards"), let count = Int(String(decoding: stored.value, as: UTF8.self)) else { throw error }
                guard count == shards.count else {
                    throw StartupError("the cluster was created with \(count) shards; this node was started with --shards \(shards.count)")
                }
            }
            let bucket = try await keyValue(jetStream, ClusterNames.leases, replicas: options.replicas, ttl: options.leaseTime)
            for shard in 0..<shards.count where try await jetStream.streamInfo(ClusterNames.stream(shard)) == nil {
                var config = StreamConfig(name: ClusterNames.stream(shard), subjects: [ClusterNames.subject(shard)])
                config.storage = .file
                config.numReplicas = options.replicas
                config.duplicateWindow = .seconds(120)
                config.denyDelete = true
                config.denyPurge = true
                config.allowDirect = true
                config.maxMsgSize = 64 << 20
                _ = try await jetStream.createStream(config)
            }
            let ownership = ShardOwnership()
            let counters = ShardCounters()
            let log = JetStreamShardLog(shards: shards, nodeID: options.nodeID, jetStream: jetStream, leases: bucket, ownership: ownership, counters: counters, timeout: options.appendTimeout)
            let node = ClusterNode(
                options: options, shards: shards, client: client, jetStream: jetStream, ownership: ownership, counters: counters, log: log,
                leases: ShardLeases(options: options, shards: shards, ledger: ledger, jetStream: jetStream, bucket: bucket, ownership: ownership, log: log, logger: logger),
                tail: ShardTail(shards: shards, nodeID: options.nodeID, ledger: ledger, jetStream: jetStream, ownership: ownership, counters: counters, logger: logger),
                bucket: bucket)
            ledger.bindCluster(log)
            node.tasks.withLock { tasks in
                tasks.append(Task { await node.tail.run() })
                tasks.append(Task { await node.leases.run() })
            }
            return node
        } catch {
            await client.close()
            throw error
        }
    }

    private init(options: ClusterOptions, shards: ShardMap, client: NATSClient, jetStream: JetStreamContext, ownership: ShardOwnership,
                 counters: ShardCounters, log: JetStreamShardLog, leases: ShardLeases, tail: ShardTail, bucket: KeyValue) {
        self.options = options
        self.shards = shards
        self.client = client
        self.jetStream = jetStream
        self.ownership = ownership
        self.counters = counters
        self.log = log
        self.leases = leases
        self.tail = tail
        self.bucket = bucket
    }

    private static func keyValue(_ jetStream: JetStreamContext, _ name: String, replicas: Int, ttl: Duration?) async throws -> KeyValue {
        if let existing = try await jetStream.keyValue(bucket: name) { return existing }
        return try await jetStream.createKeyValue(bucket: name, replicas: replicas, history: 1, ttl: ttl)
    }

    /// Stops the tails and the lease loop (leases run out on their own) and disconnects.
    public func stop() async {
        let running = tasks.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in running { task.cancel() }
        for task in running { await task.value }
        await client.close()
    }

    /// The key that signs session and paging tokens on every node of a cluster: HKDF-SHA256 of
    /// the shared admin secret (which never leaves the nodes).
    public static func tokenKey(adminSecret: String) -> [UInt8] {
        let key = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Array(adminSecret.utf8)), salt: Array("syncledger-cluster".utf8),
                                         info: Array("session-and-paging-tokens".utf8), outputByteCount: 32)
        return key.withUnsafeBytes { Array($0) }
    }

    /// Sets this node's HTTP API address, once it listens (when no `--public-url` named it).
    public func setURL(_ url: String) { leases.url.withLock { $0 = $0 ?? url } }

    /// This node's id.
    public var nodeID: String { options.nodeID }

    /// The owner of `shard` as this node knows it: itself, or the lease's holder.
    func owner(of shard: Int) async -> LeaseHolder? {
        if ownership.owns(shard) { return LeaseHolder(node: options.nodeID, url: leases.url.withLock { $0 } ?? "") }
        return try? await log.holder(of: shard)
    }

    /// Per shard: the stream's last sequence, this replica's checkpoint, the owner, and counts.
    func status(ledger: Ledger) async -> [ShardStatus] {
        var result: [ShardStatus] = []
        for shard in 0..<shards.count {
            let last = try? await log.lastSequence(shard)
            let applied = (try? ledger.shardCheckpoint(shard)) ?? 0
            let counts = counters.get(shard)
            result.append(ShardStatus(shard: shard, lastSequence: last, applied: applied, owner: await owner(of: shard)?.node,
                                      ownedHere: ownership.owns(shard), appended: counts.appended, behind: counts.behind,
                                      retried: counts.retried, failure: counts.failure))
        }
        return result
    }
}

/// One shard as `GET /cluster/status` reports it.
struct ShardStatus: Sendable {
    let shard: Int
    /// The last sequence of the shard's stream (nil when the stream did not answer).
    let lastSequence: UInt64?
    /// The last message this replica applied.
    let applied: UInt64
    let owner: String?
    let ownedHere: Bool
    let appended: UInt64
    let behind: UInt64
    let retried: UInt64
    let failure: String?
    /// Messages the replica has yet to apply.
    var lag: UInt64? { lastSequence.map { $0 > applied ? $0 - applied : 0 } }
}
