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
    /// Where the Cognito stream targets' per-shard cursors are kept, for whichever node owns the shard.
    let streamCursors: ClusterStreamCursors
    /// The device-message consumers, read and acknowledged on any node.
    let consumers: ClusterConsumers
    private let tasks = Mutex<[Task<Void, Never>]>([])

    /// Joins the cluster: fails when the JetStream cluster cannot be reached, or when it was
    /// created with another shard count. `keys` (from the cluster secret) seal and open every
    /// shard message, lease and node record.
    public static func start(_ options: ClusterOptions, keys: ClusterKeys, ledger: Ledger, logger: Logger) async throws -> ClusterNode {
        let shards = try ShardMap(count: options.shards)
        var natsOptions = NATSClientOptions(servers: options.servers)
        natsOptions.name = "syncledger-\(options.nodeID)"
        try options.connection.apply(to: &natsOptions)
        let client = try await NATSClient.connect(natsOptions)
        do {
            let jetStream = JetStreamContext(client: client)
            let sealing = ClusterSealing(keys: keys)
            let buckets = try await ClusterSetup.prepare(jetStream, shards: shards, replicas: options.replicas, leaseTime: options.leaseTime,
                                                         sealing: sealing) {
                logger.info("JetStream not ready; trying again", metadata: ["error": "\($0)"])
            }
            let ownership = ShardOwnership()
            let counters = ShardCounters()
            let bucket = buckets.leases
            let log = JetStreamShardLog(shards: shards, nodeID: options.nodeID, jetStream: jetStream, leases: bucket, ownership: ownership, counters: counters,
                                        sealing: sealing, timeout: options.appendTimeout)
            let node = ClusterNode(
                options: options, shards: shards, client: client, jetStream: jetStream, ownership: ownership, counters: counters, log: log,
                leases: ShardLeases(options: options, shards: shards, ledger: ledger, jetStream: jetStream, bucket: bucket, ownership: ownership, log: log,
                                    counters: counters, presence: NodePresence(client: client, nodeID: options.nodeID, logger: logger), logger: logger),
                tail: ShardTail(shards: shards, nodeID: options.nodeID, ledger: ledger, jetStream: jetStream, ownership: ownership, counters: counters,
                                sealing: sealing, logger: logger),
                bucket: bucket, streamCursors: ClusterStreamCursors(bucket: buckets.streams),
                consumers: ClusterConsumers(bucket: buckets.consumers, map: shards, lastSequence: { try await log.lastSequence($0) }))
            if let keyring = ledger.options.identityKeyring {
                // Never below the newest generation this node has taken; then sign with the
                // cluster's generation from the first request on.
                let floor = IdentityKeyFloor(file: ledger.directory + "/" + ClusterNode.identityKeyFile, sealing: sealing)
                if let newest = floor.generation?.generation, newest.current >= keyring.generation.current { keyring.set(newest) }
                _ = try await ClusterIdentityKey.follow(buckets.settings, sealing: sealing, keyring: keyring, floor: floor, counters: counters)
                node.tasks.withLock { $0.append(Task { await node.followIdentityKey(keyring, floor: floor, settings: buckets.settings, logger: logger) }) }
            }
            ledger.bindCluster(log)
            node.tasks.withLock { tasks in
                tasks.append(Task { await node.tail.run() })
                tasks.append(Task { await node.makeMergeCopies(ledger: ledger, logger: logger) })
            }
            return node
        } catch {
            await client.close()
            throw error
        }
    }

    /// The file of a node's data directory keeping the newest OpenID key generation it has
    /// taken (``IdentityKeyFloor``).
    static let identityKeyFile = "cluster-identity-key"

    private init(options: ClusterOptions, shards: ShardMap, client: NATSClient, jetStream: JetStreamContext, ownership: ShardOwnership,
                 counters: ShardCounters, log: JetStreamShardLog, leases: ShardLeases, tail: ShardTail, bucket: KeyValue,
                 streamCursors: ClusterStreamCursors, consumers: ClusterConsumers) {
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
        self.streamCursors = streamCursors
        self.consumers = consumers
    }

    /// Stops the tails and the lease loop, hands its leases back (so other nodes take its shards
    /// at their next round rather than when the leases run out) and disconnects.
    public func stop() async {
        let running = tasks.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in running { task.cancel() }
        for task in running { await task.value }
        await leases.handBackAll()
        await client.close()
    }

    /// Makes the copies identity merges left for the shards this node owns (see
    /// ``Ledger/completePendingMergeCopies(owns:)``): after every commit this replica applies,
    /// and every second, until cancelled.
    private func makeMergeCopies(ledger: Ledger, logger: Logger) async {
        while !Task.isCancelled {
            let seen = ledger.commitSignal.generation
            do {
                let made = try await ledger.completePendingMergeCopies(owns: ownership.owns)
                if made > 0 { logger.info("made the copies of identity merges", metadata: ["copies": "\(made)"]) }
            } catch {
                if Task.isCancelled { return }
                logger.warning("could not make an identity merge's copies yet; trying again", metadata: ["error": "\(error)"])
            }
            _ = await ledger.commitSignal.wait(after: seen, timeout: .seconds(1))
        }
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

    /// Whether this node owns the shard of `stream` now.
    func owns(_ stream: StreamName) -> Bool { ownership.owns(shards.shard(of: stream)) }

    /// How long a lease lasts.
    var leaseTime: Duration { options.leaseTime }

    /// Starts taking, renewing and handing back leases (after ``onTakeover(_:)`` is set): until
    /// then the node replicates every shard and owns none.
    public func beginOwning() {
        tasks.withLock { tasks in tasks.append(Task { await self.leases.run() }) }
    }

    /// Calls `handler` with each shard this node takes, once it owns it.
    func onTakeover(_ handler: @escaping @Sendable (Int) -> Void) { leases.takeoverHandlers.withLock { $0.append(handler) } }

    /// The owner of `shard` as this node knows it: itself, or the lease's holder.
    func owner(of shard: Int) async -> LeaseHolder? {
        if ownership.owns(shard) { return LeaseHolder(node: options.nodeID, url: leases.url.withLock { $0 } ?? "") }
        return try? await log.holder(of: shard)
    }

    /// The id of the node that owns `shard` as far as this node knows without asking: itself,
    /// or the owner the live nodes' records named at the last lease round (nil: none known).
    func knownOwner(of shard: Int) -> String? {
        if ownership.owns(shard) { return options.nodeID }
        return leases.ownerDirectory.withLock { $0[shard] }
    }

    /// Waits, for at most `timeout`, until shard `n` has an owner that can take writes: another
    /// node holding its lease, or this node once its takeover finished. Nil when none did.
    /// `other`: a node known to be down, whose lease does not count.
    func waitForOwner(_ shard: Int, other down: String? = nil, timeout: Duration) async -> LeaseHolder? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if ownership.owns(shard) { return LeaseHolder(node: options.nodeID, url: leases.url.withLock { $0 } ?? "") }
            if let holder = try? await log.holder(of: shard), holder.node != options.nodeID, holder.node != down { return holder }
            guard ContinuousClock.now < deadline else { return nil }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// How long a shard may be without an owner when its owner died: a lease and a round.
    var handoverTime: Duration { options.leaseTime + options.leaseTime / 3 + .seconds(1) }

    /// Waits until this replica has applied every message its stream's shard held when asked.
    /// - Returns: false when it did not within `timeout` (or the stream did not answer).
    func catchUp(with stream: StreamName, ledger: Ledger, timeout: Duration) async throws -> Bool {
        try await catchUp(shard: shards.shard(of: stream), ledger: ledger, timeout: timeout)
    }

    /// ``catchUp(with:ledger:timeout:)`` for a shard.
    func catchUp(shard: Int, ledger: Ledger, timeout: Duration) async throws -> Bool {
        (try? await ledger.catchUp(shard: shard, timeout: timeout)) ?? false
    }

    /// Sets at scrape time, per shard: the stream's last sequence, what this replica applied,
    /// its lag, whether this node owns it, and the appends, behind-refusals and retries it
    /// counted (`shards`: a ``status(ledger:)`` read just before).
    func refreshMetrics(shards: [ShardStatus], into scrape: inout MetricsScrape) {
        func gauge(_ name: String, _ help: String, _ value: (ShardStatus) -> UInt64?) {
            for shard in shards {
                if let v = value(shard) { scrape.gauge(name, help: help, labels: [("shard", String(shard.shard))], v) }
            }
        }
        func counter(_ name: String, _ help: String, _ value: (ShardStatus) -> UInt64) {
            for shard in shards { scrape.counter(name, help: help, labels: [("shard", String(shard.shard))], total: value(shard)) }
        }
        gauge("syncledger_shard_last_sequence", "The last message of the shard's stream.") { $0.lastSequence }
        gauge("syncledger_shard_applied_sequence", "The last message of the shard's stream this replica applied.") { $0.applied }
        gauge("syncledger_shard_lag_messages", "Messages of the shard's stream this replica has yet to apply.") { $0.lag }
        gauge("syncledger_shard_owned", "1 when this node owns the shard.") { $0.ownedHere ? 1 : 0 }
        counter("syncledger_shard_appends_total", "Writes this node appended to the shard's stream.") { $0.appended }
        counter("syncledger_shard_behind_total", "Appends refused because the stream had moved on (caught up and prepared again).") { $0.behind }
        counter("syncledger_shard_publish_retries_total", "Publishes sent again after a timeout or a lost connection.") { $0.retried }
        counter("syncledger_shard_rejected_messages_total", "Messages of the shard's stream skipped because they were not authenticated by the cluster's key.") { $0.rejected }
        counter("syncledger_shard_stale_fences_total", "Authenticated fences older than this node's lease of the shard (replayed), not obeyed.") { $0.staleFences }
        scrape.counter("syncledger_cluster_forged_records_total",
                       help: "Lease values and node records read from the lease bucket without a valid MAC (ignored).", total: counters.forgedRecords)
    }

    /// Per shard: the stream's last sequence, this replica's checkpoint, the owner, and counts.
    /// The streams' last sequences come from one stream listing, and the owners of the shards
    /// held elsewhere are read concurrently: a status costs a few round trips, not two per shard.
    func status(ledger: Ledger) async -> [ShardStatus] {
        var lastSequences: [String: UInt64] = [:]
        for info in (try? await jetStream.streams(subject: ClusterNames.everyShardSubject)) ?? [] { lastSequences[info.config.name] = info.state.lastSeq }
        let owners = await withTaskGroup(of: (Int, String?).self) { group in
            for shard in 0..<shards.count { group.addTask { (shard, await self.owner(of: shard)?.node) } }
            var owners: [Int: String] = [:]
            for await (shard, owner) in group { owners[shard] = owner }
            return owners
        }
        var result: [ShardStatus] = []
        for shard in 0..<shards.count {
            var last = lastSequences[ClusterNames.stream(shard)]
            if last == nil { last = try? await log.lastSequence(shard) }  // not listed: ask the stream itself
            let applied = (try? ledger.shardCheckpoint(shard)) ?? 0
            let counts = counters.get(shard)
            result.append(ShardStatus(shard: shard, lastSequence: last, applied: applied, owner: owners[shard],
                                      ownedHere: ownership.owns(shard), appended: counts.appended, behind: counts.behind,
                                      retried: counts.retried, rejected: counts.rejected, staleFences: counts.staleFences,
                                      lastRejected: counts.lastRejected, failure: counts.failure))
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
    /// Messages skipped as not authenticated, and what the last one was.
    let rejected: UInt64
    let staleFences: UInt64
    let lastRejected: String?
    let failure: String?
    /// Messages the replica has yet to apply.
    var lag: UInt64? { lastSequence.map { $0 > applied ? $0 - applied : 0 } }
}
