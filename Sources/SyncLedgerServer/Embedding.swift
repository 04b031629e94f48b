import AsyncHTTPClient
public import Hummingbird
public import Logging
public import Prometheus
public import ServiceLifecycle
public import SyncLedger

/// SyncLedger inside a host application built on Hummingbird (docs/embedding.md): the host adds
/// ``routes(context:)`` to its own router under a path prefix, with its own middleware around
/// them, runs ``services`` in its own `ServiceGroup`, and calls ``shutdown()`` after the group
/// has stopped. One embedding per Prometheus registry: two would share and overwrite each
/// other's series.
///
/// What it serves: Cognito Sync, Cognito Identity (and its JWKS), devices and messages, event
/// streams (`/events`, Server-Sent Events), segments and replication's feed, and the admin API
/// (redactions, the history browser's data) — the same handlers, validation and `apply` as
/// `syncledger serve`. What it leaves to the host or does not do: the listener and its
/// transport guards (connection and body time-outs, the body budget: the host's server has its
/// own), `/health`, `/metrics` (``metricsText()`` gives SyncLedger's series for the host's
/// page), TLS, the history browser's page, push delivery (NotifyDevices answers that push is
/// off; devices still register), Cognito Streams delivery, cluster mode and following a leader.
public struct SyncLedgerEmbedding: Sendable {
    /// The ledger the routes serve; the host opens it, and closes it after ``services`` stopped.
    public let ledger: Ledger
    let handler: RequestHandler
    let hooks: HTTPClient

    /// - Parameters:
    ///   - ledger: an open ledger.
    ///   - admin: the developer (admin) credential; nil uses the one kept in the ledger's
    ///     secrets (made on first use: `syncledger credentials list` shows it).
    ///   - regions: the regions a signature's scope may name.
    ///   - events: the event streams' limits.
    ///   - maxBodyBytes: the largest request body read.
    ///   - syncTriggerTimeout: how long a SyncTrigger hook has to answer.
    ///   - identityThrottle: the token buckets of the unsigned Cognito Identity calls (GetId,
    ///     GetCredentialsForIdentity, …) per source address and per pool, as `serve`'s
    ///     `--identity-source-rate` and its siblings (docs/identity.md).
    ///   - prometheus: the registry SyncLedger's series go into: the host's own, so that one
    ///     ``metricsText()`` gives the host's series and SyncLedger's; nil: one of its own.
    ///   - logger: where requests and the services log.
    public init(ledger: Ledger, admin: Credential? = nil, regions: [String] = ["us-east-1"], events: EventStreamOptions = EventStreamOptions(),
                maxBodyBytes: Int = 4 << 20, syncTriggerTimeout: Duration = .seconds(5), identityThrottle: IdentityThrottleOptions = IdentityThrottleOptions(),
                prometheus: PrometheusCollectorRegistry? = nil, logger: Logger = Logger(label: "syncledger")) {
        let hooks = WebhookSyncTrigger.makeClient()
        var api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: admin, regions: Set(regions)))
        api.logger = logger
        api.syncTriggerClient = hooks
        api.syncTriggerTimeout = syncTriggerTimeout
        // Unsigned calls create identities and mint credentials: limited as on `serve`.
        api.identityThrottle = IdentityThrottle(options: identityThrottle)
        api.identityCapWatch = IdentityCapWatch(cap: ledger.options.limits.maxIdentitiesPerPool)
        // The host's server bounds its connections; the event streams' own bound is
        // `events.maxStreams` (default: 500 at a time).
        let eventService = EventService(ledger: ledger, authenticator: api.authenticator, options: events, maxConnections: 1000, logger: logger,
                                        sources: ClientSource(trustedProxies: identityThrottle.trustedProxies))
        self.ledger = ledger
        self.hooks = hooks
        let handler = RequestHandler(api: api, events: eventService,
                                     metrics: ServerMetrics(startSequence: (try? ledger.lastSequence) ?? 0,
                                                            registry: prometheus.map { MetricsRegistry(prometheus: $0) } ?? MetricsRegistry(),
                                                            ledger: ledger, identityThrottle: api.identityThrottle, identityCapWatch: api.identityCapWatch),
                                     ledger: ledger, push: nil, maxBodyBytes: maxBodyBytes, logger: logger)
        self.handler = handler
        let retention = Ledger.minimumIdempotencyRetention
        self.services = [
            BackgroundLoop { await eventService.run() },
            BackgroundLoop { await SyncLedgerServer.purgeIdempotencyKeys(ledger, retention: retention, logger: logger) },
        ]
    }

    /// SyncLedger's routes for a router whose request context is `Context`; add them with
    /// `router.addRoutes(embedding.routes(), atPath: "/sync")`. Clients then use
    /// `http://host:port/sync` as their Cognito Sync and Cognito Identity endpoint.
    public func routes<Context: SyncLedgerRequestContext>(context: Context.Type = Context.self) -> RouteCollection<Context> {
        handler.routes(context: Context.self)
    }

    /// The background services the routes rely on — the event hub (live event streams) and the
    /// idempotency keys' hourly purge — for the host's `ServiceGroup`. Run them in one group,
    /// once.
    public let services: [any Service]

    /// Shuts down the HTTP client SyncTrigger hooks are called with. Call it once the host's
    /// service group has stopped (its requests drained): an UpdateRecords still running would
    /// find the client gone. Every embedding must be shut down, run or not.
    public func shutdown() async {
        try? await hooks.shutdown()
    }

    /// SyncLedger's series in Prometheus' text format (requests by operation, the ledger's
    /// commits, event streams), for the host's `/metrics`: the whole registry's text, the host's
    /// series with them when the registry was the host's (its series read at scrape time are
    /// set first, so emit through this rather than the registry itself).
    public func metricsText() async -> String {
        await handler.renderMetrics()
    }
}
