import Foundation
import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import SyncLedger

/// The server's routes, as one Hummingbird router, by family:
///
/// - operations: `GET /health` (unsigned), `GET /metrics` (the admin's signature here; unsigned
///   on the listener of `--metrics-listen`, ``MetricsListener``);
/// - event streams: `/events` (``EventStream``), and Cognito Streams' payloads
///   `GET /streams/payload/<token>` (signed by their token);
/// - the history browser's page, `GET /ui/` (presigned, its own error page);
/// - the APIs, under ``APIMiddleware`` (body, path and query checks, Cognito's error format,
///   request ids, cluster forwarding): Cognito Sync (`/identitypools/…`, one route per
///   operation of botocore's model), Cognito Identity (`POST /`, awsJson1.1), devices and
///   messages, segments and replication, admin and the history browser's data, cluster status
///   and the JWKS.
///
/// Every route but `/health` and `/metrics` is logged and measured by ``RequestLogMiddleware``;
/// the signed families check their signature in ``SigV4Middleware``. A request no route
/// matches is Cognito's `UnknownOperationException` (404).
extension RequestHandler {
    /// The router of the server's main listener.
    func router() -> Router<SyncLedgerContext> {
        let router = Router(context: SyncLedgerContext.self)
        let api = self.api
        router.get("/health") { _, _ in Self.health }
        router.get("/metrics") { request, _ in
            // Signed by the admin here; unsigned only on the listener of --metrics-listen.
            if let refusal = MetricsListener.refusal(request, api: api) {
                metrics.record(operation: "GetMetrics", status: refusal.status.code, seconds: 0)
                return refusal
            }
            return await metricsResponse()
        }
        router.add(middleware: RequestLogMiddleware<SyncLedgerContext>(metrics: metrics, logger: logger))
        addStreamRoutes(to: router, payloads: true)
        addHistoryPage(to: router)
        // Before the API's routes, so that a path no route matches is answered in Cognito's format.
        router.add(middleware: APIMiddleware<SyncLedgerContext>(api: api, maxBodyBytes: maxBodyBytes, forwarder: forwarder))
        addAPIRoutes(to: router)
        router.get("/cluster/status") { _, context in
            let request = APIRequest(context)
            request.notes.operation = "ClusterStatus"
            return try await api.handleClusterStatus(request.wire, query: request.query).response
        }
        return router
    }

    /// The routes a host application adds to its own router (docs/embedding.md): Cognito Sync,
    /// Cognito Identity and its JWKS, devices and messages, event streams, segments and the
    /// admin API, each logged and measured. Not among them: `/health` and `/metrics` (the host's
    /// own; ``renderMetrics()`` gives SyncLedger's text), the history browser's page (its script
    /// calls absolute paths) and Cognito Streams' payload URLs.
    func routes<Context: SyncLedgerRequestContext>(context: Context.Type = Context.self) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.add(middleware: RequestLogMiddleware<Context>(metrics: metrics, logger: logger))
        addStreamRoutes(to: routes, payloads: false)
        routes.add(middleware: APIMiddleware<Context>(api: api, maxBodyBytes: maxBodyBytes, forwarder: forwarder))
        addAPIRoutes(to: routes)
        return routes
    }

    /// Every API family, under ``APIMiddleware``.
    private func addAPIRoutes<R: RouterMethods>(to router: R) where R.Context: SyncLedgerRequestContext {
        addCognitoRoutes(to: router)
        addRegistryRoutes(to: router)
        addAuditRoutes(to: router)
    }

    static var health: Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"status\":\"ok\"}")))
    }

    /// `/events` and (`payloads`) Cognito Streams' payloads: each checks its own request and
    /// answers its own errors.
    private func addStreamRoutes<R: RouterMethods>(to router: R, payloads: Bool) where R.Context: SyncLedgerRequestContext {
        let (events, ledger, logger) = (self.events, self.ledger, self.logger)
        // Every method: the event stream answers a preflight, and refuses other methods itself.
        for method: HTTPRequest.Method in [.get, .head, .options, .post, .put, .delete, .patch] {
            router.on(RouterPath(EventService.path), method: method) { request, context in
                let notes = context.syncLedger.notes
                notes.operation = "GetEvents"
                let (response, identity, refusal) = await EventStream.respond(request, channel: context.channel, service: events)
                notes.with {
                    $0.identity = identity
                    $0.refusal = refusal
                }
                return response
            }
        }
        if payloads {
            router.get(RouterPath(StreamPayloadRoute.prefix + ":token")) { request, context in
                context.syncLedger.notes.operation = "GetStreamPayload"
                return StreamPayloadRoute.respond(path: request.uri.path, ledger: ledger, logger: logger).0
            }
        }
    }

    /// The history browser's page, `GET /ui/` (presigned; its own error page).
    private func addHistoryPage(to router: Router<SyncLedgerContext>) {
        let api = self.api
        for method: HTTPRequest.Method in [.get, .head] {
            router.on(RouterPath(HistoryPage.path), method: method) { request, context in
                guard request.uri.path == HistoryPage.path else {
                    throw WireError.unknownOperation("no operation is \(request.method.rawValue) \(request.uri.path.prefix(200)); the history browser is at \(HistoryPage.path)")
                }
                context.syncLedger.notes.operation = "UI.Page"
                var request = request
                let wire: WireRequest
                do {
                    wire = try await APIMiddleware<SyncLedgerContext>.read(&request, channel: context.channel, maxBodyBytes: maxBodyBytes)
                } catch let error as WireError {
                    return WireResponse.error(error).response
                }
                let (response, operation, _) = await api.handleHistoryPage(wire)
                context.syncLedger.notes.operation = operation
                return response.response
            }
        }
    }

    /// Cognito Sync (one route per operation of botocore's model, ``Route/table``), Cognito
    /// Identity (`POST /`) and the JWKS of its OpenID tokens.
    private func addCognitoRoutes<R: RouterMethods>(to router: R) where R.Context: SyncLedgerRequestContext {
        let api = self.api
        for (method, path, operation) in Route.table {
            router.group()
                .add(middleware: SigV4Middleware<R.Context>(authenticator: api.authenticator) { api.prepareCognitoSync(operation, $0) })
                .on(RouterPath(path), method: method) { _, context in try await api.cognitoSync(operation, APIRequest(context)).response }
        }
        router.post("/") { _, context in try await api.cognitoIdentity(APIRequest(context)).response }
        router.get("/.well-known/jwks.json") { _, context in
            // The public key of Cognito Identity's OpenID tokens, for anyone to verify them.
            context.syncLedger.notes.operation = "Identity.JWKS"
            let body = try JSONSerialization.data(withJSONObject: try api.ledger.openIdKeys(), options: [.sortedKeys, .withoutEscapingSlashes])
            return WireResponse(status: 200, headers: [("content-type", "application/json")], body: Array(body)).response
        }
    }

    /// `/devices/…` and `/messages/…` (``RegistryOperation``; docs/devices.md).
    private func addRegistryRoutes<R: RouterMethods>(to router: R) where R.Context: SyncLedgerRequestContext {
        let api = self.api
        for operation in RegistryOperation.allCases {
            router.group()
                .add(middleware: SigV4Middleware<R.Context>(authenticator: api.authenticator) { $0.notes.operation = operation.rawValue })
                .on(RouterPath(operation.route.path), method: operation.route.method) { _, context in
                    let request = APIRequest(context)
                    try await api.routeRegistryInCluster(operation, credential: try request.signer())
                    let (response, who) = operation.isMessage
                        ? try await api.handleMessages(operation, request)
                        : try await api.handleDevices(operation, request)
                    request.notes.with { $0.identity = who.flatMap { try? IdentityID($0) }?.rawValue }
                    return response.response
                }
        }
    }

    /// `/segments…` (offline merges, stream pulls, replication's feed and digests) and
    /// `/admin/…` (redactions, the history browser's data).
    private func addAuditRoutes<R: RouterMethods>(to router: R) where R.Context: SyncLedgerRequestContext {
        let api = self.api
        let segments = router.group().add(middleware: SigV4Middleware<R.Context>(authenticator: api.authenticator))
        for what in ["feed", "digest", "signed-digest"] {
            segments.get(RouterPath("/segments/" + what)) { _, context in
                let request = APIRequest(context)
                let (response, name, who) = try await api.replicationRead(what, request)
                request.notes.with {
                    $0.operation = name
                    $0.identity = who
                    // An idle follower's long polls end in 204 once per wait: not worth an info line each.
                    $0.quiet = name == "GetFeedSegment" && response.status == 204
                }
                return response.response
            }
        }
        segments.get("/segments/streams/:pool/:identity/:dataset") { _, context in
            let request = APIRequest(context)
            request.notes.operation = "GetStreamSegment"
            let (response, who) = try await api.streamSegment(request)
            request.notes.with { $0.identity = who }
            return response.response
        }
        segments.post("/segments") { _, context in
            let request = APIRequest(context)
            let (response, name, who) = try await api.postSegment(request)
            request.notes.with {
                $0.operation = name
                $0.identity = who
            }
            return response.response
        }
        for redact in [true, false] {
            router.group()
                .add(middleware: SigV4Middleware<R.Context>(authenticator: api.authenticator) { $0.notes.operation = redact ? "Redact" : "ListRedactions" })
                .on("/admin/redactions", method: redact ? .post : .get) { _, context in
                    let request = APIRequest(context)
                    let (response, who) = try await api.handleAdmin(redact: redact, request)
                    request.notes.with { $0.identity = who }
                    return response.response
                }
        }
        router.group()
            .add(middleware: SigV4Middleware<R.Context>(authenticator: api.authenticator) { $0.notes.operation = CognitoAPI.uiOperation($0.parameter("view") ?? "") })
            .get("/admin/ui/:view") { _, context in
                let request = APIRequest(context)
                let (response, name, who) = try await api.handleHistoryUI(request.parameter("view") ?? "", request)
                request.notes.with {
                    $0.operation = name
                    $0.identity = who
                }
                return response.response
            }
    }
}
