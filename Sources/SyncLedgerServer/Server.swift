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

/// The SyncLedger HTTP server: the Cognito Sync API, `/health` and `/metrics` on Hummingbird.
public enum SyncLedgerServer {
    /// Takes the data directory's lock, opens the ledger, serves until SIGINT or SIGTERM, lets
    /// in-flight requests finish, then closes the ledger (finishing queued writes).
    ///
    /// - Throws: ``StartupError`` when the configuration is invalid, another server holds the
    ///   data directory, the TLS files cannot be read, or the address is taken; ``LedgerError``
    ///   when the ledger cannot be opened.
    public static func run(_ configuration: ServerConfiguration, logger: Logger = Logger(label: "syncledger")) async throws {
        try configuration.validate()
        if configuration.follow != nil, configuration.adminAccessKeyID == nil || configuration.adminSecretAccessKey == nil {
            throw StartupError("a follower signs its pulls with the leader's admin credential: set SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY")
        }
        // The lock comes first: nothing in the directory is touched while another server has it.
        let lock = try Startup.lockDataDirectory(configuration.dataDirectory)
        defer { lock.unlock() }
        let tls = try configuration.tlsCertificate.map { try TLSFiles.server(certificate: $0, key: configuration.tlsKey ?? "") }
        let client = try configuration.follow.map { leader in
            try LeaderClient(
                leader: leader, tls: try TLSFiles.client(trusting: configuration.followCA),
                signer: SigV4Signer(accessKeyID: configuration.adminAccessKeyID ?? "", secretAccessKey: configuration.adminSecretAccessKey ?? ""),
                readTimeout: configuration.followWait + .seconds(15))
        }
        do {
            try await serve(configuration, tls: tls, leader: client, logger: logger)
        } catch {
            await client?.shutdown()
            throw error
        }
        await client?.shutdown()
    }

    private static func serve(_ configuration: ServerConfiguration, tls: TLSConfiguration?, leader client: LeaderClient?, logger: Logger) async throws {
        try await Startup.checkPortFree(host: configuration.host, port: configuration.port)
        if let metricsListen = configuration.metricsListen {
            let (metricsHost, metricsPort) = try MetricsListener.parse(metricsListen)
            do { try await Startup.checkPortFree(host: metricsHost, port: metricsPort) } catch let error as StartupError {
                throw StartupError("--metrics-listen \(metricsListen): \(error.message)")
            }
        }
        let maxConnections = Startup.fitConnections(configuration.maxConnections) { logger.warning("\($0)") }
        var ledgerOptions = configuration.ledger
        if let cluster = configuration.cluster, let secret = configuration.adminSecretAccessKey {
            // Session and paging tokens one node issues verify on every other, and so do its
            // OpenID tokens (one signing key for the cluster, from the cluster secret).
            ledgerOptions.tokenKey = ClusterNode.tokenKey(adminSecret: secret)
            ledgerOptions.identityKeyring = IdentityKeyring(seed: ClusterKeys(secret: cluster.secret ?? secret).identitySeed)
        }
        let ledger = try Ledger(directory: configuration.dataDirectory, options: ledgerOptions)
        defer { ledger.close() }
        var joined: ClusterNode?
        let clusterKeys = configuration.cluster.map { ClusterKeys(secret: $0.secret ?? configuration.adminSecretAccessKey ?? "") }
        if let options = configuration.cluster, let keys = clusterKeys {
            do { joined = try await ClusterNode.start(options, keys: keys, ledger: ledger, logger: logger) } catch let error as StartupError { throw error } catch {
                throw StartupError("cannot join the cluster at \(options.servers.joined(separator: ",")): \(ClusterConnection.explain(error))")
            }
            logger.info("cluster node", metadata: ["node": "\(options.nodeID)", "shards": "\(options.shards)", "replicas": "\(options.replicas)"])
        }
        let cluster = joined
        // The owner may first finish taking the shard (up to a lease and a round): the answer is
        // waited for that long and 15 s more.
        let forwardAuth = cluster.flatMap { node in clusterKeys.map { ForwardedRequestAuth(keys: $0, nodeID: node.nodeID) } }
        let forwarder = cluster.map { node in
            var forwarder = ClusterForwarder(nodeID: node.nodeID, timeout: node.handoverTime + .seconds(15))
            forwarder.auth = forwardAuth
            return forwarder
        }
        let (admin, configured) = try adminCredential(configuration, ledger)
        let configuredAdmin = configured ? admin : nil
        var api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: configuredAdmin, regions: Set(configuration.regions)))
        var follower: Follower?
        if let client {
            let status = ReplicationStatus(leader: client.url)
            follower = Follower(ledger: ledger, client: client, secret: admin.secretAccessKey, status: status, logger: logger, wait: configuration.followWait)
            if let path = configuration.followDigestKey {
                let text: String
                do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
                    throw StartupError("cannot read --follow-digest-key \(path): \(describeFileError(error))")
                }
                do { follower?.digestKey = try DigestPublicKey(text: text) } catch { throw StartupError("--follow-digest-key \(path): \(error.message)") }
                follower?.digestInterval = configuration.followDigestInterval
            }
            api.followedLeader = client.url
            api.replication = status
        }
        let push = try client == nil && configuration.push.enabled ? startPush(configuration, ledger: ledger, logger: logger) : nil
        defer { if let push { Self.stopPush(push) } }
        if let cluster, let service = push?.service { Self.pushOnShardOwners(service, cluster: cluster, ledger: ledger) }
        api.push = push?.service
        api.cluster = cluster
        api.syncTriggerTimeout = configuration.syncTriggerTimeout
        api.identityThrottle = IdentityThrottle(options: configuration.identityThrottle)
        api.forwardAuth = forwardAuth
        api.identityCapWatch = IdentityCapWatch(cap: configuration.ledger.limits.maxIdentitiesPerPool)
        // Cognito Streams: a leader delivers them; a follower's leader does; on a cluster, each
        // shard's owner delivers that shard's.
        let streams = try client == nil ? StreamService(ledger: ledger, logger: logger, bulkPublish: configuration.bulkPublish, cluster: cluster) : nil
        defer { streams?.shutdown() }
        if let cluster, streams != nil { cluster.onTakeover { shard in cluster.streamCursors.forget(shard: shard) } }
        cluster?.beginOwning()
        let scheme = tls == nil ? "http" : "https"
        let configuredURL = configuration.publicURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        let urlHost = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        let listeningURL: @Sendable (Int) -> String = { port in "\(scheme)://\(urlHost):\(port)" }
        if let configuredURL { streams?.publicURL.withLock { $0 = configuredURL } } else if configuration.port != 0 {
            streams?.publicURL.withLock { $0 = listeningURL(configuration.port) }
        }
        if configuredURL == nil, ["0.0.0.0", "::"].contains(configuration.host) {
            logger.warning("listening on every interface without --public-url: stream payload URLs name \(configuration.host), which consumers cannot reach")
        }
        var limits = HTTPLimits(idleTimeout: configuration.idleTimeout, headerTimeout: configuration.headerTimeout,
                                bodyTimeout: configuration.bodyTimeout, maxBodyBytes: configuration.maxBodyBytes)
        limits.writeTimeout = configuration.writeTimeout
        limits.maxPipelined = configuration.maxPipelinedRequests
        limits.maxOutboundBytes = configuration.maxOutboundBytes
        let shared = TransportShared(
            limits: limits,
            connections: ConnectionRegistry(maximum: maxConnections, stallGrace: limits.stallGrace),
            budget: BodyBudget(capacity: configuration.maxBufferedBodyBytes, connections: maxConnections, largestBody: configuration.maxBodyBytes),
            metrics: TransportMetrics())
        let events = EventService(ledger: ledger, authenticator: api.authenticator, options: configuration.events, maxConnections: maxConnections, logger: logger, shards: cluster?.shards,
                                  sources: ClientSource(trustedProxies: configuration.identityThrottle.trustedProxies))
        let handler = RequestHandler(
            api: api, events: events,
            metrics: ServerMetrics(startSequence: (try? ledger.lastSequence) ?? 0, replication: api.replication,
                                   identityThrottle: api.identityThrottle, identityCapWatch: api.identityCapWatch),
            transport: shared, ledger: ledger, push: push?.service, streams: streams, maxBodyBytes: configuration.maxBodyBytes, logger: logger,
            forwarder: forwarder, cluster: cluster)
        let onListening = configuration.onListening
        let host = configuration.host
        let listening = Atomic<Bool>(false)
        let app = Application(
            responder: CallbackResponder<ChannelRequestContext> { request, context in await handler.respond(request, channel: context.channel) },
            server: .guarded(shared, events: events, tls: tls, logger: logger),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "SyncLedger", backlog: 1024),
            onServerRunning: { channel in
                listening.store(true, ordering: .releasing)
                let port = channel.localAddress?.port ?? 0
                logger.info("listening", metadata: [
                    "host": "\(host)", "port": "\(port)", "data": "\(configuration.dataDirectory)", "tls": "\(tls != nil)",
                    "max_connections": "\(maxConnections)",
                ])
                if configuredURL == nil { streams?.publicURL.withLock { $0 = listeningURL(port) } }
                if configuredURL == nil { cluster?.setURL(listeningURL(port)) }
                onListening(port)
            },
            logger: logger)
        var services: [any Service] = [app]
        if let metricsListen = configuration.metricsListen {
            let (metricsHost, metricsPort) = try MetricsListener.parse(metricsListen)
            services.append(MetricsListener.application(host: metricsHost, port: metricsPort, limits: limits, handler: handler, logger: logger) { port in
                say("SyncLedger metrics on http://\(metricsHost.contains(":") ? "[\(metricsHost)]" : metricsHost):\(port)/metrics")
            })
        }
        let replication = follower.map { f in Task { await f.run() } }
        let delivery = push.map { p in Task { await p.service.run() } }
        let streaming = streams.map { s in Task { await s.run() } }
        let eventHub = Task { await events.run() }
        // A follower purges too: its message keys are views of the replicated entries.
        let purge = Task { [retention = configuration.idempotencyRetention] in
            // At start, then hourly: keys older than the retention go, a batch per transaction.
            while !Task.isCancelled {
                do {
                    let purged = try await ledger.purgeIdempotencyKeys(retention: retention)
                    if purged.messageKeys + purged.updateKeys > 0 {
                        logger.info("purged idempotency keys", metadata: ["messages": "\(purged.messageKeys)", "updates": "\(purged.updateKeys)"])
                    }
                    if purged.undecodableEntries > 0 {
                        logger.warning("idempotency purge: message entries could not be decoded; their keys went", metadata: ["entries": "\(purged.undecodableEntries)"])
                    }
                } catch {
                    logger.warning("idempotency key purge failed", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: .seconds(3600))
            }
        }
        defer { purge.cancel() }
        if let leader = configuration.follow { logger.info("following", metadata: ["leader": "\(leader)"]) }
        do {
            try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
        } catch {
            replication?.cancel()
            await replication?.value
            delivery?.cancel()
            await delivery?.value
            streaming?.cancel()
            await streaming?.value
            eventHub.cancel()
            await eventHub.value
            await cluster?.stop()
            await forwarder?.shutdown()
            throw listening.load(ordering: .acquiring) ? error : Startup.describeBindError(error, host: configuration.host, port: configuration.port)
        }
        replication?.cancel()
        await replication?.value
        delivery?.cancel()
        await delivery?.value
        streaming?.cancel()
        await streaming?.value
        eventHub.cancel()
        await eventHub.value
        await cluster?.stop()
        await forwarder?.shutdown()
        logger.info("stopped; closing the ledger")
    }

    /// The push outbox (`DATA/push`), its HTTP client and the delivery service.
    private static func startPush(_ configuration: ServerConfiguration, ledger: Ledger, logger: Logger) throws -> (service: PushService, client: HTTPClient) {
        let tls = try TLSFiles.pushClient(trusting: configuration.push.endpoints.caFile)
        var http = HTTPClient.Configuration(tlsConfiguration: tls, timeout: .init(connect: .seconds(10), read: .seconds(20)))
        http.httpVersion = .automatic
        let threads = PushThreads(niceness: configuration.push.niceness)
        let client = HTTPClient(eventLoopGroup: threads.loops, configuration: http)
        do {
            let outbox = try PushOutbox(directory: ledger.directory + "/push", durable: ledger.options.durable)
            return (try PushService(ledger: ledger, outbox: outbox, client: client, threads: threads, options: configuration.push, logger: logger), client)
        } catch {
            try? client.syncShutdown()
            threads.shutdown()
            throw error
        }
    }

    /// Cluster mode: a node derives notifications only from the entries of the shards it owns,
    /// and when it takes a shard it derives again the shard's entries of the last two leases and
    /// ten seconds (what an owner that died may not have derived or delivered). Entries older
    /// than that when the node started are never derived: a node replaying history stays quiet.
    private static func pushOnShardOwners(_ service: PushService, cluster: ClusterNode, ledger: Ledger) {
        let windowMs = Int64((cluster.leaseTime * 2 + .seconds(10)).components.seconds) * 1000
        let oldest = Timestamp(milliseconds: ledger.options.clock().milliseconds - windowMs)
        service.restrict { stream, time in time >= oldest && cluster.owns(stream) }
        let shards = cluster.shards
        cluster.onTakeover { shard in
            let since = Timestamp(milliseconds: max(oldest.milliseconds, ledger.options.clock().milliseconds - windowMs))
            Task { await service.rederive({ stream, time in time >= since && shards.shard(of: stream) == shard }, since: since) }
        }
    }

    private static func stopPush(_ push: (service: PushService, client: HTTPClient)) {
        try? push.client.syncShutdown()
        push.service.threads.shutdown()
    }

    /// The admin credential from the configuration, or the one kept in the data directory
    /// (made, and shown once, on first start).
    private static func adminCredential(_ configuration: ServerConfiguration, _ ledger: Ledger) throws -> (Credential, configured: Bool) {
        if let id = configuration.adminAccessKeyID, let secret = configuration.adminSecretAccessKey, !id.isEmpty, !secret.isEmpty {
            return (Credential(accessKeyID: id, secretAccessKey: secret, scope: .admin), true)
        }
        let (stored, created) = try ledger.secrets.generatedAdminCredential()
        if created, isatty(STDOUT_FILENO) == 1 {
            // Shown once, and only to a person at a terminal: a secret must not reach a log.
            say("""
                Generated the admin (developer) credential; it is kept in \(ledger.secrets.directory) and shown only this once:
                  AccessKeyId:     \(stored.accessKeyID)
                  SecretAccessKey: \(stored.secretAccessKey)
                Set SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY to use your own (this one then stops working);
                `syncledger credentials list` shows it and `syncledger credentials revoke` removes it.
                """)
        } else if created {
            say("""
                Generated the admin (developer) credential \(stored.accessKeyID), kept in \(ledger.secrets.directory). Its secret is shown
                only on a terminal, never in a log: `syncledger credentials rotate \(stored.accessKeyID) --data \(configuration.dataDirectory)`
                prints a new one. Or set SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY to use your own.
                """)
        } else {
            say("Using the admin credential kept in \(ledger.secrets.directory) (access key \(stored.accessKeyID)).")
        }
        return (stored, false)
    }
}

/// Writes a line to standard output at once (not buffered), for whoever reads it.
func say(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}
