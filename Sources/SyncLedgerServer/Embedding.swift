import AsyncHTTPClient
public import Hummingbird
public import Logging
public import Prometheus
public import ServiceLifecycle
public import SyncLedger

/// SyncLedger inside a host application built on Hummingbird (docs/embedding.md): the host adds
/// ``routes(context:)`` to its own router under a path prefix, with its own middleware around
/// them, and runs ``services`` in its own `ServiceGroup`.
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
    let idempotencyRetention: Duration
    let logger: Logger

    /// - Parameters:
    ///   - ledger: an open ledger.
    ///   - admin: the developer (admin) credential; nil uses the one kept in the ledger's
    ///     secrets (made on first use: `syncledger credentials list` shows it).
    ///   - regions: the regions a signature's scope may name.
    ///   - events: the event streams' limits.
    ///   - maxBodyBytes: the largest request body read.
    ///   - syncTriggerTimeout: how long a SyncTrigger hook has to answer.
    ///   - prometheus: the registry SyncLedger's series go into: the host's own, so that one
    ///     ``metricsText()`` gives the host's series and SyncLedger's; nil: one of its own.
    ///   - logger: where requests and the services log.
    public init(ledger: Ledger, admin: Credential? = nil, regions: [String] = ["us-east-1"], events: EventStreamOptions = EventStreamOptions(),
                maxBodyBytes: Int = 4 << 20, syncTriggerTimeout: Duration = .seconds(5), prometheus: PrometheusCollectorRegistry? = nil,
                logger: Logger = Logger(label: "syncledger")) {
        let hooks = WebhookSyncTrigger.makeClient()
        var api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: admin, regions: Set(regions)))
        api.logger = logger
        api.syncTriggerClient = hooks
        api.syncTriggerTimeout = syncTriggerTimeout
        // The host's server bounds its connections; the event streams' own bound is
        // `events.maxStreams` (default: 500 at a time).
        let eventService = EventService(ledger: ledger, authenticator: api.authenticator, options: events, maxConnections: 1000, logger: logger)
        self.ledger = ledger
        self.hooks = hooks
        self.logger = logger
        self.idempotencyRetention = Ledger.minimumIdempotencyRetention
        self.handler = RequestHandler(api: api, events: eventService, metrics: ServerMetrics(startSequence: (try? ledger.lastSequence) ?? 0,
                                                                             registry: prometheus.map { MetricsRegistry(prometheus: $0) } ?? MetricsRegistry(),
                                                                             ledger: ledger),
                                      ledger: ledger, push: nil, maxBodyBytes: maxBodyBytes, logger: logger)
    }

    /// SyncLedger's routes for a router whose request context is `Context`; add them with
    /// `router.addRoutes(embedding.routes(), atPath: "/sync")`. Clients then use
    /// `http://host:port/sync` as their Cognito Sync and Cognito Identity endpoint.
    public func routes<Context: SyncLedgerRequestContext>(context: Context.Type = Context.self) -> RouteCollection<Context> {
        handler.routes(context: Context.self)
    }

    /// The background services the routes rely on — the event hub (live event streams), the
    /// idempotency keys' purge, and the SyncTrigger hooks' HTTP client (shut down when the
    /// group shuts down) — for the host's `ServiceGroup`.
    public var services: [any Service] {
        let (events, ledger, retention, logger, hooks) = (handler.events, ledger, idempotencyRetention, logger, hooks)
        return [
            BackgroundLoop { await events.run() },
            BackgroundLoop { await SyncLedgerServer.purgeIdempotencyKeys(ledger, retention: retention, logger: logger) },
            BackgroundLoop {
                try? await gracefulShutdown()
                try? await hooks.shutdown()
            },
        ]
    }

    /// SyncLedger's series in Prometheus' text format (requests by operation, the ledger's
    /// commits, event streams), for the host's `/metrics`: the whole registry's text, the host's
    /// series with them when the registry was the host's (its series read at scrape time are
    /// set first, so emit through this rather than the registry itself).
    public func metricsText() async -> String {
        await handler.renderMetrics()
    }
}
