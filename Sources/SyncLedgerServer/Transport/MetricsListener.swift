import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import SyncLedger

/// Where `GET /metrics` is served, and to whom.
///
/// On the API's listener, `/metrics` needs the developer (admin) signature, like the other admin
/// routes: what it shows (operations, identities' traffic, replication and cluster state) is
/// not for anyone, and its answer is large enough to be worth asking for many times. A
/// Prometheus scraper, which does not sign, gets it from `--metrics-listen HOST:PORT`: a second
/// listener that serves only `/metrics` and `/health`, unsigned, meant for a loopback or private
/// address. It has its own connection guards (with `--max-connections` 64 and the API's time
/// limits), so that its clients and the API's never take each other's room.
enum MetricsListener {
    /// The most connections the metrics listener holds at once.
    static let maxConnections = 64

    /// `HOST:PORT` (`[::1]:9090` for IPv6) as host and port.
    /// - Throws: ``StartupError`` naming the value.
    static func parse(_ text: String) throws -> (host: String, port: Int) {
        let host: Substring
        let port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw StartupError("--metrics-listen \(text.prefix(200)): give HOST:PORT, such as 127.0.0.1:9090 or [::1]:9090") }
            port = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                throw StartupError("--metrics-listen \(text.prefix(200)): give HOST:PORT, such as 127.0.0.1:9090 or [::1]:9090")
            }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, let number = Int(port), (0...65535).contains(number) else {
            throw StartupError("--metrics-listen \(text.prefix(200)): give HOST:PORT with a port 0-65535, such as 127.0.0.1:9090")
        }
        return (String(host), number)
    }

    /// Checks that a request to the API's listener for `/metrics` is signed by the admin
    /// credential; the refusal to answer otherwise.
    static func refusal(_ request: Request, api: CognitoAPI) -> Response? {
        var headers = request.headers.map { ($0.name.canonicalName, $0.value) }
        if let authority = request.head.authority { headers.append(("host", authority)) }
        let wire = WireRequest(method: request.method.rawValue, rawPath: request.uri.path, rawQuery: request.uri.query, headers: headers, body: [])
        do {
            guard let query = SigV4.queryPairs(wire.rawQuery) else {
                throw WireError.invalidParameter("the query string has a malformed percent-escape or is not UTF-8")
            }
            let credential = try api.authenticator.authenticate(wire, queryPairs: query)
            guard credential.scope == .admin else {
                throw WireError.notAuthorized("GET /metrics needs the developer (admin) credential; a scraper that does not sign reads it from the listener of --metrics-listen")
            }
            return nil
        } catch {
            let wire = WireError(any: error)
            var fields: HTTPFields = [.contentType: "application/json"]
            fields[HTTPField.Name("x-amzn-ErrorType")!] = wire.type
            return Response(status: .init(code: wire.statusCode), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: wire.body)))
        }
    }

    /// The metrics listener: `GET /metrics` (unsigned) and `GET /health`; anything else 404.
    static func application(host: String, port: Int, limits: HTTPLimits, handler: RequestHandler, logger: Logger,
                            onListening: @escaping @Sendable (Int) -> Void) -> some ApplicationProtocol {
        let shared = TransportShared(
            limits: limits,
            connections: ConnectionRegistry(maximum: maxConnections, stallGrace: limits.stallGrace),
            budget: BodyBudget(capacity: max(limits.maxBodyBytes, 1 << 20), connections: maxConnections, largestBody: 0),
            metrics: TransportMetrics())
        let router = Router(context: SyncLedgerContext.self)
        router.add(middleware: ListenerNotFound())
        router.get("/metrics") { _, _ in await handler.metricsResponse() }
        router.get("/health") { _, _ in RequestHandler.health }
        return Application(
            router: router,
            server: .guarded(shared, events: nil, tls: nil, logger: logger),
            configuration: .init(address: .hostname(host, port: port), serverName: "SyncLedger", backlog: 256),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                logger.info("metrics listening", metadata: ["host": "\(host)", "port": "\(bound)"])
                onListening(bound)
            },
            logger: logger)
    }
}

/// The metrics listener's answer to anything but its two routes: a 404 that says what it serves.
private struct ListenerNotFound: RouterMiddleware {
    typealias Context = SyncLedgerContext
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            return Response(status: .notFound, headers: [.contentType: "text/plain"],
                            body: .init(byteBuffer: ByteBuffer(string: "this listener (--metrics-listen) serves GET /metrics and GET /health only\n")))
        }
    }
}
