import Foundation
#if canImport(Glibc)
import Glibc
#endif
public import SyncLedger
import AsyncHTTPClient
import Hummingbird
import HummingbirdCore
public import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import Synchronization

/// How `syncledger serve` runs.
public struct ServerConfiguration: Sendable {
    /// The data directory.
    public var dataDirectory: String = "syncledger-data"
    /// The address to listen on.
    public var host: String = "127.0.0.1"
    /// The port (0: any free port; the chosen one is printed).
    public var port: Int = 8080
    /// Request bodies larger than this are refused with 413 InvalidParameterException, before
    /// they are read.
    public var maxBodyBytes: Int = 4 << 20
    /// The most request-body bytes buffered at once, over all connections, counted as they
    /// arrive (a declared length takes nothing by itself); a request whose arriving bytes would
    /// pass it is refused at once with 429 TooManyRequestsException. A quarter of it is set
    /// apart in equal shares per connection (``maxConnections``), so that a small body always
    /// fits.
    public var maxBufferedBodyBytes: Int = 256 << 20
    /// The most open connections. At the limit, the connection idle the longest is closed to
    /// make room, else the one whose unfinished request (head or body still arriving) started
    /// the longest ago, else the one whose client has taken none of its response bytes for the
    /// longest (a second or more); only when every connection has a request read and in
    /// progress, or a response its client is reading, is the new one closed.
    public var maxConnections: Int = 1000
    /// A connection with no request in progress for this long is closed.
    public var idleTimeout: Duration = .seconds(60)
    /// A request head must be complete this long after the connection opened (or after the
    /// first byte of a later request); otherwise the connection is closed.
    public var headerTimeout: Duration = .seconds(10)
    /// A request body must be complete this long after its head; otherwise the connection is
    /// closed.
    public var bodyTimeout: Duration = .seconds(60)
    /// A connection whose response bytes wait and whose client takes none of them for this long
    /// is closed (a client that stopped reading: its answers, or its event stream).
    public var writeTimeout: Duration = .seconds(30)
    /// The most requests one connection may have read and not yet answered (HTTP pipelining);
    /// the next is answered 429 after them and the connection closed.
    public var maxPipelinedRequests: Int = 8
    /// While more than this many response bytes of a connection wait for its client, no more of
    /// its requests are read.
    public var maxOutboundBytes: Int = 1 << 20
    /// `HOST:PORT` of a second listener serving `GET /metrics` unsigned (and `/health`), for a
    /// Prometheus scraper; the API's listener answers `/metrics` to the admin signature only.
    public var metricsListen: String?
    /// PEM certificate chain (leaf first) to serve HTTPS with; give ``tlsKey`` too.
    public var tlsCertificate: String?
    /// PEM private key of ``tlsCertificate``.
    public var tlsKey: String?
    /// The base URL clients and stream consumers reach this server at (for the URLs of stream
    /// payloads sent by reference); default `http(s)://host:port` of the listening address.
    public var publicURL: String?
    /// The ledger's options (durability, limits, session lifetime).
    public var ledger = LedgerOptions()
    /// The admin credential's access key id and secret (from `SYNCLEDGER_ACCESS_KEY_ID` /
    /// `SYNCLEDGER_SECRET_ACCESS_KEY`); nil: use the one kept in the data directory, made on
    /// first start.
    public var adminAccessKeyID: String?
    /// See ``adminAccessKeyID``.
    public var adminSecretAccessKey: String?
    /// The AWS regions a request's credential scope may name (default `us-east-1`); others are
    /// refused before anything is looked up.
    public var regions: [String] = ["us-east-1"]
    /// How BulkPublish runs: its minimum duration and the sink failures it tolerates.
    public var bulkPublish = BulkPublishOptions()
    /// How long idempotency keys (device messages, UpdateRecords' `Idempotency-Key`) are kept
    /// before the hourly purge removes them: at least 28 days.
    public var idempotencyRetention: Duration = Ledger.minimumIdempotencyRetention
    /// How long a SyncTrigger hook has to answer before the write fails with
    /// `LambdaSocketTimeoutException` (504): 0.1 to 60 s, 5 s (Cognito's Lambda limit) by default.
    public var syncTriggerTimeout: Duration = .seconds(5)
    /// The leader's URL (`http://HOST:PORT` or `https://HOST:PORT`): run as a read-only
    /// follower that replicates it, signing with the admin credential above (which the leader
    /// must share).
    public var follow: String?
    /// PEM certificates the follower trusts for an https leader (a private CA, or the leader's
    /// self-signed certificate); nil: the system's roots.
    public var followCA: String?
    /// How long the leader may hold a follower's pull that finds nothing new (at most 30 s).
    public var followWait: Duration = .seconds(20)
    /// A file holding the leader's digest public key (PEM or base64, as `syncledger digest
    /// --public-key` prints it): a follower checks the leader's signed digests against its
    /// replica.
    public var followDigestKey: String?
    /// The least time between two checks of the leader's signed digest.
    public var followDigestInterval: Duration = .seconds(60)
    /// Cluster mode (`--cluster`): the JetStream cluster, shards and this node's name.
    public var cluster: ClusterOptions?
    /// Push delivery: on unless turned off; a follower never delivers (its leader does).
    public var push = PushOptions()
    /// The live event streams of `GET /events`: keep-alive interval and bounds.
    public var events = EventStreamOptions()
    /// The token buckets of the unsigned Cognito Identity calls, and the proxies trusted to
    /// name their sources.
    public var identityThrottle = IdentityThrottleOptions()
    /// Called once the server listens, with the bound port.
    public var onListening: @Sendable (Int) -> Void = { _ in }

    /// The defaults: ./syncledger-data, 127.0.0.1:8080, 4 MiB bodies, durable.
    public init() {}

    /// Checks that the values make sense together.
    ///
    /// - Throws: ``StartupError`` naming the option and the value.
    public func validate() throws {
        guard (0...65535).contains(port) else { throw StartupError("--port \(port) is not a port: give 0 (any free port) to 65535") }
        guard maxBodyBytes >= 1 else { throw StartupError("--max-body-bytes must be at least 1, not \(maxBodyBytes)") }
        guard maxBufferedBodyBytes >= maxBodyBytes else {
            throw StartupError("--max-buffered-body-bytes \(maxBufferedBodyBytes) is below --max-body-bytes \(maxBodyBytes): the largest request could never be read")
        }
        guard !regions.isEmpty, regions.allSatisfy({ (1...64).contains($0.utf8.count) && $0.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D } }) else {
            throw StartupError("--region must name AWS regions such as us-east-1 (lower-case letters, digits and -), not \(regions)")
        }
        guard maxConnections >= 1 else { throw StartupError("--max-connections must be at least 1, not \(maxConnections)") }
        guard (1...10_000).contains(maxPipelinedRequests) else { throw StartupError("--max-pipelined-requests must be 1 to 10000, not \(maxPipelinedRequests)") }
        guard maxOutboundBytes >= 1 else { throw StartupError("--max-outbound-bytes must be at least 1, not \(maxOutboundBytes)") }
        if let metricsListen {
            let (metricsHost, metricsPort) = try MetricsListener.parse(metricsListen)
            if metricsPort != 0, metricsPort == port, metricsHost == host { throw StartupError("--metrics-listen \(metricsListen) is the API's own address (--host, --port): give another port") }
        }
        for (name, value) in [("--idle-timeout", idleTimeout), ("--header-timeout", headerTimeout), ("--body-timeout", bodyTimeout),
                              ("--write-timeout", writeTimeout)] {
            guard value > .zero, value <= .seconds(86_400) else { throw StartupError("\(name) must be more than 0 and at most 86400 seconds") }
        }
        guard (tlsCertificate == nil) == (tlsKey == nil) else {
            throw StartupError("give both --tls-cert and --tls-key to serve HTTPS, or neither")
        }
        if let follow, Self.hasUserInfo(follow) {
            // Not echoed: it would put the password in the error (and wherever that is logged).
            throw StartupError("--follow must not carry a user name or password (USER:PASSWORD@HOST): the follower signs its pulls with the admin credential from SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY")
        }
        if followCA != nil, !(follow?.lowercased().hasPrefix("https://") ?? false) {
            throw StartupError("--follow-ca is for an https:// leader (--follow https://HOST:PORT)")
        }
        guard followWait >= .zero, followWait <= CognitoAPI.maxFeedWait else { throw StartupError("--follow-wait must be 0 to 30 seconds") }
        if followDigestKey != nil, follow == nil { throw StartupError("--follow-digest-key is for a follower (--follow URL)") }
        guard followDigestInterval >= .zero, followDigestInterval <= .seconds(86_400) else { throw StartupError("--follow-digest-interval must be 0 to 86400 seconds") }
        try push.validate()
        guard idempotencyRetention >= Ledger.minimumIdempotencyRetention else {
            throw StartupError("--idempotency-retention-days must be at least 28 (a message may live four weeks), not \(idempotencyRetention.components.seconds / 86_400)")
        }
        guard syncTriggerTimeout >= .milliseconds(100), syncTriggerTimeout <= WebhookSyncTrigger.maxTimeout else {
            throw StartupError("--sync-trigger-timeout must be 0.1 to 60 seconds")
        }
        try events.validate(maxConnections: maxConnections)
        try identityThrottle.validate()
        if let cluster { try validateCluster(cluster) }
    }

    private func validateCluster(_ cluster: ClusterOptions) throws {
        if follow != nil { throw StartupError("--cluster and --follow exclude each other: every node of a cluster is a replica of the shards' streams") }
        guard !cluster.servers.isEmpty else { throw StartupError("--cluster needs at least one nats://HOST:PORT") }
        for server in cluster.servers where !((server.hasPrefix("nats://") || server.hasPrefix("tls://")) && server.count > 7 && !Self.hasUserInfo(server)) {
            throw StartupError("--cluster \(server.prefix(200)): give nats://HOST:PORT or tls://HOST:PORT (without a user name or password: see --nats-user)")
        }
        guard (1...ShardMap.maxShards).contains(cluster.shards) else { throw StartupError("--shards must be 1 to \(ShardMap.maxShards), not \(cluster.shards)") }
        guard (1...5).contains(cluster.replicas) else { throw StartupError("--cluster-replicas must be 1 to 5, not \(cluster.replicas)") }
        guard cluster.leaseTime >= .seconds(1), cluster.leaseTime <= .seconds(300) else { throw StartupError("--lease-seconds must be 1 to 300") }
        guard (1...64).contains(cluster.nodeID.utf8.count),
              cluster.nodeID.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_") }) else {
            throw StartupError("--node-id must be 1-64 letters, digits, - or _, not \(cluster.nodeID.prefix(80))")
        }
        guard let id = adminAccessKeyID, let secret = adminSecretAccessKey, !id.isEmpty, !secret.isEmpty else {
            throw StartupError("a cluster's nodes share the admin credential: set SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY, the same on every node")
        }
        if let clusterSecret = cluster.secret, clusterSecret.utf8.count < 16 {
            throw StartupError("the cluster secret (--cluster-secret-file or SYNCLEDGER_CLUSTER_SECRET) must be at least 16 bytes (it keys the cluster's message authentication)")
        }
    }

    /// Whether a URL's authority (after `scheme://`, up to the first `/`, `?` or `#`) has an
    /// `@`: a user name or password, however the rest of the URL parses.
    static func hasUserInfo(_ url: String) -> Bool {
        var rest = Substring(url)
        if let scheme = rest.range(of: "://") { rest = rest[scheme.upperBound...] }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" && $0 != "\\" }
        return authority.contains("@")
    }
}
