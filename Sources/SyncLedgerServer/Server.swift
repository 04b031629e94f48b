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
        // The HTTP client SyncTrigger hooks are called with, owned here and shut down on the way out.
        let hooks = WebhookSyncTrigger.makeClient()
        do {
            try await serve(configuration, tls: tls, leader: client, hooks: hooks, logger: logger)
        } catch {
            await client?.shutdown()
            try? await hooks.shutdown()
            throw error
        }
        await client?.shutdown()
        try? await hooks.shutdown()
    }

    private static func serve(_ configuration: ServerConfiguration, tls: TLSConfiguration?, leader client: LeaderClient?, hooks: HTTPClient,
                              logger: Logger) async throws {
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
        // This server's Prometheus series (`/metrics`), one registry per server.
        let registry = MetricsRegistry()
        let push = try client == nil && configuration.push.enabled ? startPush(configuration, ledger: ledger, registry: registry, logger: logger) : nil
        defer { if let push { Self.stopPush(push) } }
        if let cluster, let service = push?.service { Self.pushOnShardOwners(service, cluster: cluster, ledger: ledger) }
        api.push = push?.service
        api.cluster = cluster
        api.syncTriggerTimeout = configuration.syncTriggerTimeout
        api.syncTriggerClient = hooks
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
            metrics: ServerMetrics(startSequence: (try? ledger.lastSequence) ?? 0, registry: registry, ledger: ledger, replication: api.replication,
                                   identityThrottle: api.identityThrottle, identityCapWatch: api.identityCapWatch),
            transport: shared, ledger: ledger, push: push?.service, streams: streams, maxBodyBytes: configuration.maxBodyBytes, logger: logger,
            forwarder: forwarder, cluster: cluster)
        let onListening = configuration.onListening
        let host = configuration.host
        let listening = Atomic<Bool>(false)
        let app = Application(
            router: handler.router(),
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
        // The background loops run in the same service group as the listeners, before them: a
        // graceful shutdown (SIGTERM, SIGINT) stops the listeners first, letting their requests
        // finish, then cancels these in reverse order. One of them ending does not stop the server.
        var background: [ServiceGroupConfiguration.ServiceConfiguration] = []
        func run(_ name: String, _ body: @escaping @Sendable () async -> Void) {
            background.append(.init(service: BackgroundLoop(body), successTerminationBehavior: .ignore,
                                    failureTerminationBehavior: .ignore, serviceName: name))
        }
        // A follower purges too: its message keys are views of the replicated entries.
        run("idempotency purge") { [retention = configuration.idempotencyRetention] in
            await Self.purgeIdempotencyKeys(ledger, retention: retention, logger: logger)
        }
        run("event hub") { await events.run() }
        if let streams { run("stream delivery") { await streams.run() } }
        if let push { run("push delivery") { await push.service.run() } }
        if let follower { run("replication") { await follower.run() } }
        if let leader = configuration.follow { logger.info("following", metadata: ["leader": "\(leader)"]) }
        let group = ServiceGroup(configuration: .init(services: background + services.map { .init(service: $0) },
                                                      gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            await cluster?.stop()
            await forwarder?.shutdown()
            throw listening.load(ordering: .acquiring) ? error : Startup.describeBindError(error, host: configuration.host, port: configuration.port)
        }
        await cluster?.stop()
        await forwarder?.shutdown()
        logger.info("stopped; closing the ledger")
    }

    /// The push outbox (`DATA/push`), its HTTP client and the delivery service.
    private static func startPush(_ configuration: ServerConfiguration, ledger: Ledger, registry: MetricsRegistry, logger: Logger) throws -> (service: PushService, client: HTTPClient) {
        let tls = try TLSFiles.pushClient(trusting: configuration.push.endpoints.caFile)
        var http = HTTPClient.Configuration(tlsConfiguration: tls, timeout: .init(connect: .seconds(10), read: .seconds(20)))
        http.httpVersion = .automatic
        let threads = PushThreads(niceness: configuration.push.niceness)
        let client = HTTPClient(eventLoopGroup: threads.loops, configuration: http)
        do {
            let outbox = try PushOutbox(directory: ledger.directory + "/push", durable: ledger.options.durable)
            return (try PushService(ledger: ledger, outbox: outbox, client: client, threads: threads, options: configuration.push, registry: registry, logger: logger), client)
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

    /// At start, then hourly until cancelled: idempotency keys older than `retention` go, a
    /// batch per transaction.
    static func purgeIdempotencyKeys(_ ledger: Ledger, retention: Duration, logger: Logger) async {
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

/// One of the server's background loops (replication, push and stream delivery, the event hub,
/// the idempotency purge) as a service of its `ServiceGroup`: it runs until cancelled, and the
/// group's graceful shutdown cancels it.
struct BackgroundLoop: Service {
    let body: @Sendable () async -> Void
    init(_ body: @escaping @Sendable () async -> Void) { self.body = body }
    func run() async { await cancelWhenGracefulShutdown { await body() } }
}
