import NATS
import SyncLedger

/// What a cluster needs in JetStream, made by the first node (or `cluster import`) and checked
/// by every later one: the settings bucket with the shard count, the lease bucket, and one
/// replicated file stream per shard.
/// The KV buckets a node works with.
struct ClusterBuckets: Sendable {
    /// Shard leases and live nodes.
    let leases: KeyValue
    /// Cognito stream cursors per shard and BulkPublish progress (``ClusterStreamCursors``).
    let streams: KeyValue
    /// Device-message consumers (``ClusterConsumers``).
    let consumers: KeyValue
    /// The cluster's fixed settings (the shard count) and the OpenID key's generation (``ClusterIdentityKey``).
    let settings: KeyValue
}

enum ClusterSetup {
    /// ``prepare(_:shards:replicas:leaseTime:)``, tried again for up to 20 s while JetStream
    /// is not ready (a server just started, a meta leader being elected, peers not yet known:
    /// "no suitable peers for placement"); `waiting` hears each failure.
    static func prepare(_ jetStream: JetStreamContext, shards: ShardMap, replicas: Int, leaseTime: Duration, sealing: ClusterSealing,
                        waiting: (any Error) -> Void) async throws -> ClusterBuckets {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            do {
                return try await prepare(jetStream, shards: shards, replicas: replicas, leaseTime: leaseTime, sealing: sealing)
            } catch let error as StartupError {
                throw error
            } catch where (error is NATSError || error is JetStreamAPIError) && ContinuousClock.now < deadline {
                waiting(error)
                try await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    /// Makes or checks the cluster's buckets and streams; returns the buckets a node works with.
    /// - Throws: ``StartupError`` when the cluster was created with another shard count, or its
    ///   format mark is not authenticated, or says another format.
    static func prepare(_ jetStream: JetStreamContext, shards: ShardMap, replicas: Int, leaseTime: Duration,
                        sealing: ClusterSealing) async throws -> ClusterBuckets {
        let settings = try await keyValue(jetStream, ClusterNames.settings, replicas: replicas, ttl: nil)
        var created = false
        do {
            _ = try await settings.create("shards", Array("\(shards.count)".utf8))
            created = true
        } catch {
            guard let stored = try await settings.get("shards"), let count = Int(String(decoding: stored.value, as: UTF8.self)) else { throw error }
            guard count == shards.count else {
                throw StartupError("the cluster was created with \(count) shards, not \(shards.count): give --shards \(count)")
            }
        }
        try await checkFormat(jetStream, settings, shards: shards, created: created, sealing: sealing)
        let bucket = try await keyValue(jetStream, ClusterNames.leases, replicas: replicas, ttl: leaseTime)
        let streams = try await keyValue(jetStream, ClusterNames.streamCursors, replicas: replicas, ttl: nil)
        let consumers = try await keyValue(jetStream, ClusterNames.consumers, replicas: replicas, ttl: nil)
        for shard in 0..<shards.count where try await jetStream.streamInfo(ClusterNames.stream(shard)) == nil {
            var config = StreamConfig(name: ClusterNames.stream(shard), subjects: [ClusterNames.subject(shard)])
            config.storage = .file
            config.numReplicas = replicas
            config.duplicateWindow = .seconds(120)
            config.denyDelete = true
            config.denyPurge = true
            config.allowDirect = true
            config.maxMsgSize = 64 << 20
            _ = try await jetStream.createStream(config)
        }
        return ClusterBuckets(leases: bucket, streams: streams, consumers: consumers, settings: settings)
    }

    /// The format of a cluster's messages: 2 since shard messages, leases and node records
    /// carry a MAC (``ClusterKeys``). Kept in the settings bucket (`format`), sealed like every
    /// other record (it decides whether a cluster's history is trusted).
    static let format = "2"
    static let formatKey = "format"

    /// Marks a new cluster with ``format``; refuses a mark that is not authenticated, one of a
    /// later version, or a cluster an earlier version made (shard messages and no mark: none of
    /// them is authenticated, so every node would skip them all). A cluster with messages and
    /// no mark (someone deleted it) whose shards' last messages include an authenticated one is
    /// this version's: it is marked again.
    private static func checkFormat(_ jetStream: JetStreamContext, _ settings: KeyValue, shards: ShardMap, created: Bool,
                                    sealing: ClusterSealing) async throws {
        if let stored = try await settings.get(formatKey) {
            guard let body = sealing.keys.openRecord(stored.value, bucket: ClusterNames.settings, key: formatKey) else {
                throw StartupError("the cluster's format mark (key `\(formatKey)` of the `\(ClusterNames.settings)` KV bucket) is not authenticated by this node's cluster secret: either this node has another secret than the node that made the cluster (give every node the same --cluster-secret-file or SYNCLEDGER_CLUSTER_SECRET), or someone on the NATS bus wrote it; with the right secret, delete that key (`nats kv del \(ClusterNames.settings) \(formatKey)`) and start the node again: it marks the cluster again when a shard's last message is authenticated")
            }
            let found = String(decoding: body, as: UTF8.self)
            guard found == format else {
                throw StartupError("the cluster's messages are in format \(found.prefix(20)), which this version (format \(format)) cannot read")
            }
            return
        }
        if !created {
            var unauthenticated: (shard: Int, last: UInt64)?
            var authenticated = false
            for shard in 0..<shards.count {
                let stream = ClusterNames.stream(shard)
                let last = try await jetStream.streamInfo(stream)?.state.lastSeq ?? 0
                guard last > 0 else { continue }
                if let message = try await jetStream.getMessage(stream: stream, sequence: last), (try? sealing.open(message, shard: shard)) != nil {
                    authenticated = true
                    break
                }
                unauthenticated = unauthenticated ?? (shard, last)
            }
            if let (shard, last) = unauthenticated, !authenticated {
                throw StartupError("this cluster was made by an earlier SyncLedger whose shard messages are not authenticated (shard \(shard) holds \(last), and no shard's last message is authenticated by this node's cluster secret); move it to an authenticated cluster as docs/cluster.md#upgrading-a-cluster-made-before-authentication says")
            }
        }
        let mark = sealing.keys.sealRecord(Array(format.utf8), bucket: ClusterNames.settings, key: formatKey)
        do { _ = try await settings.create(formatKey, mark) } catch where error is KeyValueError {}
    }

    /// The shard count a cluster was created with (nil: no cluster there yet).
    static func shardCount(_ jetStream: JetStreamContext) async throws -> Int? {
        guard let settings = try await jetStream.keyValue(bucket: ClusterNames.settings),
              let stored = try await settings.get("shards") else { return nil }
        return Int(String(decoding: stored.value, as: UTF8.self))
    }

    static func keyValue(_ jetStream: JetStreamContext, _ name: String, replicas: Int, ttl: Duration?) async throws -> KeyValue {
        if let existing = try await jetStream.keyValue(bucket: name) { return existing }
        return try await jetStream.createKeyValue(bucket: name, replicas: replicas, history: 1, ttl: ttl)
    }
}
