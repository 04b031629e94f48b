import Foundation
import SyncLedger

/// How a node joins a cluster (`syncledger serve --cluster nats://HOST:PORT[,…]`). Its
/// `description`, `debugDescription` and mirror (`dump`, `print`) never show ``secret``.
public struct ClusterOptions: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The nats-servers of the JetStream cluster, tried in turn.
    public var servers: [String]
    /// Shards of the cluster; fixed when the cluster is created (the first node stores it and
    /// every later node must name the same count).
    public var shards: Int = 64
    /// Replicas of each shard's JetStream stream (3 on a production cluster).
    public var replicas: Int = 3
    /// How long a shard's lease lasts without renewal; the owner renews it every third of this.
    public var leaseTime: Duration = .seconds(6)
    /// This node's name, unique in the cluster.
    public var nodeID: String
    /// Where the other nodes reach this node's HTTP API, to forward writes of the shards it
    /// owns (`serve --public-url`); nil: the listening address, once it is known.
    public var nodeURL: String?
    /// How long an append waits for the log, retries included, before it answers unavailable.
    public var appendTimeout: Duration = .seconds(10)
    /// Credentials and TLS for the nats-servers.
    public var connection = ClusterConnection()
    /// The secret every node of the cluster shares, from which the keys authenticating shard
    /// messages, leases and node records and the OpenID signing key are derived
    /// (``ClusterKeys``; `--cluster-secret-file`); nil: the shared admin secret.
    public var secret: String?

    /// Options for a node `nodeID` reachable at `nodeURL`.
    public init(servers: [String], nodeID: String, nodeURL: String? = nil) {
        self.servers = servers
        self.nodeID = nodeID
        self.nodeURL = nodeURL
    }

    /// The options, with whether a secret is set but never the secret.
    public var description: String {
        "ClusterOptions(servers: \(servers), shards: \(shards), replicas: \(replicas), leaseTime: \(leaseTime), nodeID: \(nodeID), "
            + "nodeURL: \(nodeURL ?? "nil"), appendTimeout: \(appendTimeout), connection: \(connection), secret: \(secretShown))"
    }

    public var debugDescription: String { description }

    /// Every field, the secret replaced by whether it is set.
    public var customMirror: Mirror {
        Mirror(self, children: ["servers": servers, "shards": shards, "replicas": replicas, "leaseTime": leaseTime, "nodeID": nodeID,
                                "nodeURL": nodeURL as Any, "appendTimeout": appendTimeout, "connection": connection, "secret": secretShown],
               displayStyle: .struct)
    }

    private var secretShown: String { secret == nil ? "nil (the admin secret)" : "<redacted>" }
}

/// The names a cluster uses in NATS.
enum ClusterNames {
    /// The JetStream stream holding shard `n`'s log.
    static func stream(_ shard: Int) -> String { "SYNCLEDGER_SHARD_\(shard)" }
    /// The subject shard `n`'s messages are published on.
    static func subject(_ shard: Int) -> String { "syncledger.shard.\(shard)" }
    /// A subject filter matching every shard's subject.
    static let everyShardSubject = "syncledger.shard.>"
    /// The KV bucket of shard leases and live nodes.
    static let leases = "syncledger_leases"
    /// The KV bucket of Cognito stream cursors (per target and shard) and BulkPublish progress.
    static let streamCursors = "syncledger_streams"
    /// The KV bucket of device-message consumers (positions per shard and counts).
    static let consumers = "syncledger_consumers"
    /// The KV bucket of the cluster's fixed settings (the shard count).
    static let settings = "syncledger_cluster"
    /// The lease key of shard `n`.
    static func lease(_ shard: Int) -> String { "shard.\(shard)" }
    /// A node's presence key.
    static func node(_ id: String) -> String { "node.\(id)" }
    /// The header naming what a shard message carries: ``entriesKind`` or ``fenceKind``.
    static let kindHeader = "SyncLedger-Kind"
    static let entriesKind = "entries"
    /// The header naming the node that published a message.
    static let nodeHeader = "SyncLedger-Node"
    static let fenceKind = "fence"
}

/// Who holds a shard's lease, as stored in the lease bucket.
struct LeaseHolder: Codable, Sendable, Equatable {
    /// The node's id.
    var node: String
    /// Its HTTP API.
    var url: String
}

/// A live node as it announces itself in the lease bucket every lease round (the entry expires
/// with the bucket's max age when the node stops): its HTTP API, the last message of each shard
/// it applied, the shards it owns, and when it announced this (inside the sealed body, so a
/// record put back later — a replay — shows its age).
struct NodeRecord: Codable, Sendable, Equatable {
    var url: String
    var applied: [UInt64]
    var owned: [Int]
    /// Messages of its shards' streams it skipped as not authenticated, in all.
    var rejected: UInt64?
    /// When the node announced it: milliseconds since 1970 by its wall clock.
    var at: Int64
    /// Whether it answers presence probes (``NodePresence``): only then may the others judge it
    /// gone by them, before its leases run out.
    var answersPresence: Bool?

    /// How old a record may be, by its ``at`` and this node's wall clock, and still count: three
    /// lease times (a node announces every third of one), so nodes' clocks may differ by up to
    /// two lease times and more.
    static func maxAge(leaseTime: Duration) -> Duration { leaseTime * 3 }

    /// Whether the record was announced within ``maxAge(leaseTime:)`` of `now` (milliseconds
    /// since 1970); a record from the future is current (a clock ahead of this node's).
    func isCurrent(now: Int64, leaseTime: Duration) -> Bool {
        let limit = Self.maxAge(leaseTime: leaseTime)
        let ms = limit.milliseconds
        return at >= now - ms
    }

    /// Milliseconds since 1970 by this machine's wall clock.
    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
