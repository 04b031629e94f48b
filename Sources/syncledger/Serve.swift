import ArgumentParser
import Foundation
import SyncLedger
import SyncLedgerServer

/// `syncledger serve`: the Cognito Sync–compatible server.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the Cognito Sync REST API (2014-06-30) over the ledger.")
    @OptionGroup var data: DataOptions
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on, 0-65535 (0: any free port).") var port = 8080
    @Option(help: "Largest request body in bytes; a larger one is refused (413) before it is read.") var maxBodyBytes = 4 << 20
    @Option(help: "Most request-body bytes buffered at once over all connections, counted as they arrive; past it, requests get 429 (a quarter is kept in equal shares per connection, so small bodies always fit).") var maxBufferedBodyBytes = 256 << 20
    @Option(help: "Most open connections (at the limit, the longest-idle one is closed to make room, else the one whose unfinished request started first, else the one whose client has read none of its response for the longest, a second or more; a new one is refused only when every connection has a request in progress and its client reading).") var maxConnections = 1000
    @Option(help: "Seconds a connection may stay open with no request in progress.") var idleTimeout = 60.0
    @Option(help: "Seconds a request head may take to arrive (from the connection's opening, or the request's first byte).") var headerTimeout = 10.0
    @Option(help: "Seconds a request body may take to arrive after its head.") var bodyTimeout = 60.0
    @Option(help: "Seconds a connection may have response bytes waiting with its client taking none of them (it stopped reading: its answers, or its GET /events stream); then it is closed. At --max-connections, such a connection stalled a second or more makes room for a new one.") var writeTimeout = 30.0
    @Option(help: "Most requests one connection may have read and not yet answered (HTTP pipelining); the next gets 429 after them and the connection closes.") var maxPipelinedRequests = 8
    @Option(help: "While more than this many response bytes of a connection wait for its client, no more of its requests are read.") var maxOutboundBytes = 1 << 20
    @Option(help: "HOST:PORT of a second listener that serves GET /metrics without a signature (and /health), for a Prometheus scraper: give a loopback or private address. On the API's listener, /metrics needs the admin signature.") var metricsListen: String?
    @Option(help: "PEM certificate chain to serve HTTPS with (give --tls-key too).") var tlsCert: String?
    @Option(help: "PEM private key of --tls-cert.") var tlsKey: String?
    @Option(help: "The URL stream consumers reach this server at, for payloads sent by reference (default: the listening address).") var publicUrl: String?
    @Option(help: "Sync session lifetime in seconds (1-86400).") var sessionLifetime = 600
    @Option(help: "An AWS region requests may be signed for; repeat for several (default us-east-1).") var region: [String] = []
    @Option(help: "Keep a bulk publish IN_PROGRESS at least this many seconds.") var bulkPublishMinSeconds = 0.0
    @Option(help: "Failed deliveries in a row to the stream's sink (retried with backoff) after which a bulk publish is FAILED.") var bulkPublishAttempts = 8
    @Option(help: "Most identities one Cognito Identity pool may have (GetId needs no signature, so this bounds what anyone can make a pool store).") var maxIdentitiesPerPool = 1_000_000
    @Option(help: "Unsigned Cognito Identity calls (GetId, GetCredentialsForIdentity, GetOpenIdToken, UnlinkIdentity) a second from one source (an IPv6 /64), refilling its token bucket; past it, 429 TooManyRequestsException (0: no limit).") var identitySourceRate = 20.0
    @Option(help: "Those calls one source address may make at once (its bucket's size).") var identitySourceBurst = 100.0
    @Option(help: "Those calls a second into one identity pool, from every source together (0: no limit).") var identityPoolRate = 200.0
    @Option(help: "Those calls one identity pool takes at once (its bucket's size).") var identityPoolBurst = 1000.0
    @Option(help: "The address of a reverse proxy whose X-Forwarded-For names the source of those calls and of event streams; repeatable. From other peers the header is ignored. (Cluster nodes need not be listed: their forwards are authenticated by a MAC.)") var trustedProxy: [String] = []
    @Option(help: "Days idempotency keys of device messages and UpdateRecords are kept before the hourly purge (at least 28).") var idempotencyRetentionDays = 28
    @Option(help: "Seconds a SyncTrigger hook has to answer before the write fails with LambdaSocketTimeoutException (0.1-60; Cognito's Lambda limit is 5).") var syncTriggerTimeout = 5.0
    @Option(help: "Run as a read-only follower of this leader (http(s)://HOST:PORT), replicating its change feed.") var follow: String?
    @Option(help: "PEM certificates to trust for an https leader (a private CA or its self-signed certificate).") var followCa: String?
    @Option(help: "Seconds the leader may hold a follower's pull that finds nothing new (0-30).") var followWait = 20.0
    @Option(help: "The leader's digest public key (a file, as `syncledger digest --public-key` prints it on the leader): check the leader's signed digests against this replica.") var followDigestKey: String?
    @Option(help: "Seconds between two checks of the leader's signed digest (0-86400).") var followDigestInterval = 60.0
    @Option(help: "Run as a node of a cluster: the nats-servers of its JetStream cluster, nats://HOST:PORT[,…]. Writes are committed to their shard's replicated stream before they are acknowledged. Every node needs the same SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY. See docs/cluster.md.") var cluster: String?
    @Option(help: "Shards of the cluster (1-4096), fixed when it is created: every node names the same count.") var shards = 64
    @Option(help: "A file holding a secret every node of the cluster shares (not readable by others; or env SYNCLEDGER_CLUSTER_SECRET; default: the admin secret), from which the keys authenticating shard messages, leases and node records, and the cluster's OpenID signing key, are derived. Give it to `syncledger cluster` commands too.") var clusterSecretFile: String?
    @Option(help: "Replicas of each shard's JetStream stream and of the cluster's KV buckets (1-5).") var clusterReplicas = 3
    @Option(help: "This node's name in the cluster, unique among its nodes (letters, digits, - and _; default: the host name and port).") var nodeId: String?
    @Option(help: "Seconds a shard's lease lasts without renewal (1-300): how soon another node takes the shards of a node that died.") var leaseSeconds = 6.0
    @OptionGroup(title: "NATS credentials and TLS (with --cluster)") var nats: NATSFlags
    @Flag(help: "Do not deliver push notifications (the outbox is not touched; a follower never delivers).") var noPush = false
    @Option(help: "APNs production base URL (env SYNCLEDGER_APNS_URL; default https://api.push.apple.com).") var apnsUrl: String?
    @Option(help: "APNs sandbox base URL (env SYNCLEDGER_APNS_SANDBOX_URL; default https://api.sandbox.push.apple.com).") var apnsSandboxUrl: String?
    @Option(help: "FCM base URL (env SYNCLEDGER_FCM_URL; default https://fcm.googleapis.com). The OAuth token URL is the service account's token_uri.") var fcmUrl: String?
    @Option(help: "PEM certificates to trust for push services and webhooks, besides the system's (env SYNCLEDGER_PUSH_CA).") var pushCa: String?
    @Option(help: "Most push notifications in flight at once (1-4096).") var pushConcurrency = 256
    @Option(help: "Attempts before a notification goes to the dead letters (1-1000).") var pushMaxAttempts = 12
    @Option(help: "Nice value of the delivery threads, 0-19: higher leaves more of a busy machine to writes, and delivers later.") var pushNice: Int32 = 10
    @Option(help: "Seconds before the first retry of a failed notification; each further one doubles it.") var pushBackoff = 1.0
    @Option(help: "Longest wait in seconds between retries.") var pushMaxBackoff = 300.0
    @Option(help: "Seconds between keep-alives on an idle event stream (GET /events): an SSE comment, a WebSocket ping (0.1-3600).") var eventsKeepalive = 15.0
    @Option(help: "Most event streams open at once watching one identity; more get 429.") var eventsPerIdentity = 8
    @Option(help: "Most event streams open at once from one client: its address (an IPv6 address counts as its /64) or, from a --trusted-proxy, the client its X-Forwarded-For names (0: no bound); more get 429.") var eventsPerSource = 32
    @Option(help: "Furthest back, in change-feed entries behind the end of the log, that an event stream resumes (Last-Event-ID); further gets 400, re-sync.") var eventsMaxResume: UInt64 = 100_000
    @Option(help: "Most event streams open at once (default: half of --max-connections, so other requests find room); more get 429.") var maxEventStreams: Int?

    func validate() throws {
        guard (1...86_400).contains(sessionLifetime) else {
            throw ValidationError("--session-lifetime must be 1 to 86400 seconds, not \(sessionLifetime)")
        }
        do { try makeConfiguration().validate() } catch let error as StartupError {
            throw ValidationError(error.message)
        }
    }

    func makeConfiguration() throws -> ServerConfiguration {
        var config = ServerConfiguration()
        config.dataDirectory = data.data
        config.host = host
        config.port = port
        config.maxBodyBytes = maxBodyBytes
        config.maxBufferedBodyBytes = maxBufferedBodyBytes
        config.maxConnections = maxConnections
        config.idleTimeout = Self.duration(idleTimeout)
        config.headerTimeout = Self.duration(headerTimeout)
        config.bodyTimeout = Self.duration(bodyTimeout)
        config.writeTimeout = Self.duration(writeTimeout)
        config.maxPipelinedRequests = maxPipelinedRequests
        config.maxOutboundBytes = maxOutboundBytes
        config.metricsListen = metricsListen
        config.tlsCertificate = tlsCert
        config.tlsKey = tlsKey
        config.publicURL = publicUrl
        config.ledger.durable = !data.fast
        config.ledger.secretsDirectory = secretsDirectory(data.secrets)
        config.ledger.sessionLifetime = .seconds(sessionLifetime)
        config.bulkPublish.minimum = Self.duration(bulkPublishMinSeconds)
        config.bulkPublish.attempts = max(1, bulkPublishAttempts)
        config.ledger.limits.maxIdentitiesPerPool = max(1, maxIdentitiesPerPool)
        config.identityThrottle.sourceRate = identitySourceRate
        config.identityThrottle.sourceBurst = identitySourceBurst
        config.identityThrottle.poolRate = identityPoolRate
        config.identityThrottle.poolBurst = identityPoolBurst
        config.identityThrottle.trustedProxies = trustedProxy
        config.idempotencyRetention = .seconds(Int64(clamping: max(0, min(idempotencyRetentionDays, 100_000))) * 86_400)
        config.syncTriggerTimeout = Self.duration(syncTriggerTimeout)
        if !region.isEmpty { config.regions = region }
        config.follow = follow
        config.followCA = followCa
        config.followWait = Self.duration(followWait)
        config.followDigestKey = followDigestKey
        config.followDigestInterval = Self.duration(followDigestInterval)
        config.events.keepAlive = Self.duration(eventsKeepalive)
        config.events.perIdentity = eventsPerIdentity
        config.events.perSource = eventsPerSource
        config.events.maxResume = eventsMaxResume
        config.events.maxStreams = maxEventStreams
        let environment = ProcessInfo.processInfo.environment
        config.push.enabled = !noPush
        if let url = apnsUrl ?? environment["SYNCLEDGER_APNS_URL"] { config.push.endpoints.apns = url }
        if let url = apnsSandboxUrl ?? environment["SYNCLEDGER_APNS_SANDBOX_URL"] { config.push.endpoints.apnsSandbox = url }
        if let url = fcmUrl ?? environment["SYNCLEDGER_FCM_URL"] { config.push.endpoints.fcm = url }
        config.push.endpoints.caFile = pushCa ?? environment["SYNCLEDGER_PUSH_CA"]
        config.push.concurrency = pushConcurrency
        config.push.niceness = pushNice
        config.push.policy.maxAttempts = pushMaxAttempts
        config.push.policy.initialBackoff = Self.duration(pushBackoff)
        config.push.policy.maxBackoff = Self.duration(pushMaxBackoff)
        if let cluster {
            let servers = cluster.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            var options = ClusterOptions(servers: servers, nodeID: nodeId ?? Self.defaultNodeID(port: port),
                                         nodeURL: publicUrl)
            options.shards = shards
            options.replicas = clusterReplicas
            options.leaseTime = Self.duration(leaseSeconds)
            options.connection = try nats.connection()
            options.secret = try clusterSecretFile.map { try NATSFlags.secret(file: $0, what: "--cluster-secret-file") }
                ?? environment["SYNCLEDGER_CLUSTER_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
            config.cluster = options
        } else if nats.isGiven {
            throw ValidationError("the --nats-* options are for a cluster node: give --cluster too")
        }
        config.adminAccessKeyID = environment["SYNCLEDGER_ACCESS_KEY_ID"]
        config.adminSecretAccessKey = environment["SYNCLEDGER_SECRET_ACCESS_KEY"]
        return config
    }

    /// The host name (characters other than letters, digits, - and _ as -) and the port.
    private static func defaultNodeID(port: Int) -> String {
        let host = String(ProcessInfo.processInfo.hostName.prefix(48).map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") ? $0 : "-" })
        return "\(host)-\(port)"
    }

    /// Seconds as a Duration (milliseconds kept; NaN, infinite or negative values become
    /// values validate() refuses).
    private static func duration(_ seconds: Double) -> Duration {
        guard seconds.isFinite else { return .seconds(-1) }
        return .milliseconds(Int64((min(max(seconds, -1), 1e9) * 1000).rounded()))
    }

    func run() async throws {
        var config = try makeConfiguration()
        let scheme = tlsCert != nil ? "https" : "http"
        let host = self.host
        let data = self.data.data
        config.onListening = { port in
            FileHandle.standardOutput.write(Data("SyncLedger listening on \(scheme)://\(host):\(port) (data: \(data))\n".utf8))
        }
        try await SyncLedgerServer.run(config)
    }
}
