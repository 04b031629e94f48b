import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import SyncLedger

/// Adapts Hummingbird requests to the API, and logs and measures each one. `/health` needs no
/// signature; `/metrics` needs the admin's here (``MetricsListener``: unsigned on the listener
/// of `--metrics-listen`); `/streams/payload/<token>` is signed by its token; `/ui/` (the
/// history browser) is presigned.
struct RequestHandler: Sendable {
    let api: CognitoAPI
    /// `GET /events`: live event streams.
    let events: EventService
    let metrics: ServerMetrics
    let transport: TransportShared
    let ledger: Ledger
    let push: PushService?
    /// Cognito Streams delivery (nil on a follower).
    var streams: StreamService? = nil
    let maxBodyBytes: Int
    let logger: Logger
    /// In cluster mode: forwards writes of shards another node owns to that node.
    var forwarder: ClusterForwarder? = nil
    /// In cluster mode: this node (for `/metrics` and `GET /cluster/status`).
    var cluster: ClusterNode? = nil

    /// The Prometheus text of `/metrics`.
    func renderMetrics() async -> String {
        metrics.render(ledger: ledger) + transport.metrics.render(connections: transport.connections, budget: transport.budget)
            + (push.map { $0.metrics.render(outbox: $0.outbox, ledger: ledger) } ?? "")
            + (streams?.renderMetrics() ?? "")
            + events.renderMetrics()
            + (await cluster?.renderMetrics(ledger: ledger) ?? "")
    }

    /// Adds to a request's log line why its signature was refused and the key it claimed
    /// (`refused=`, `key=`): never the secret.
    private static func note(_ refusal: AuthRefusal?, in line: inout Logger.Metadata) {
        guard let refusal else { return }
        line["refused"] = "\(refusal.reason.rawValue)"
        line["key"] = "\(refusal.accessKeyID ?? "-")"
    }

    func respond(_ request: Request, channel: any Channel) async -> Response {
        let start = ContinuousClock.now
        let path = request.uri.path
        if path == EventService.path {
            let (response, identity, refusal) = await EventStream.respond(request, channel: channel, service: events)
            let seconds = (ContinuousClock.now - start).inSeconds
            metrics.record(operation: "GetEvents", status: response.status.code, seconds: seconds)
            var line: Logger.Metadata = ["op": "GetEvents", "identity": "\(identity ?? "-")", "status": "\(response.status.code)", "ms": "\(Int(seconds * 1000))"]
            Self.note(refusal, in: &line)
            logger.info("request", metadata: line)
            return response
        }
        if request.method == .get, path == "/health" {
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"status\":\"ok\"}")))
        }
        if request.method == .get, path.hasPrefix(StreamPayloadRoute.prefix) {
            let (response, status) = StreamPayloadRoute.respond(path: path, ledger: ledger, logger: logger)
            metrics.record(operation: "GetStreamPayload", status: status, seconds: (ContinuousClock.now - start).inSeconds)
            logger.info("request", metadata: ["op": "GetStreamPayload", "status": "\(status)"])
            return response
        }
        if request.method == .get, path == "/metrics" {
            // Signed by the admin here; unsigned only on the listener of --metrics-listen.
            if let refusal = MetricsListener.refusal(request, api: api) {
                metrics.record(operation: "GetMetrics", status: refusal.status.code, seconds: 0)
                return refusal
            }
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: await renderMetrics())))
        }
        var request = request
        var wire: WireResponse
        var operation = "Unknown"
        var identity: String?
        do {
            // The transport already refused bodies over the limit (413) before reading them;
            // this bound is a second line.
            let buffer = try await request.collectBody(upTo: maxBodyBytes)
            // HTTP/1's Host header arrives as the :authority pseudo-header.
            var headers = request.headers.map { ($0.name.canonicalName, $0.value) }
            if let authority = request.head.authority { headers.append(("host", authority)) }
            let wireRequest = WireRequest(
                method: request.method.rawValue, rawPath: path, rawQuery: request.uri.query,
                headers: headers, body: Array(buffer.readableBytesView), peer: channel.remoteAddress?.ipAddress)
            // The history browser's page (presigned); its data is under /admin/ui/.
            (wire, operation, identity) = path == HistoryPage.path
                ? await api.handleHistoryPage(wireRequest)
                : await api.handle(wireRequest)
            // A write of a shard another node owns goes there, once: a forwarded request that
            // finds the owner moved again answers 503 rather than travel on.
            // A request run again here was charged by the identity throttle on its first run.
            if let elsewhere = wire.forward, let forwarder, let cluster {
                var again = wireRequest
                again.identityThrottleCharged = true
                if wireRequest.header(ClusterForwarder.header) == nil {
                    switch await forwarder.handOver(wireRequest, elsewhere, cluster: cluster) {
                    case .runHere: (wire, operation, identity) = await api.handle(again)
                    case .answered(let answer): (wire, operation) = (answer, operation + ".Forwarded")
                    case .noOwner: break
                    }
                } else if await ClusterForwarder.finishTakingOver(elsewhere, cluster: cluster) {
                    (wire, operation, identity) = await api.handle(again)
                }
            }
        } catch let cut as RequestCut {
            // The transport refused this request mid-body and answers it itself; this answer is dropped.
            wire = .error(WireError(type: "InvalidParameterException", status: 400, message: cut.description))
        } catch {
            wire = .error(.invalidParameter("the request body exceeds \(maxBodyBytes) bytes or could not be read"))
        }
        let seconds = (ContinuousClock.now - start).inSeconds
        let micros = Int(seconds * 1_000_000)
        metrics.record(operation: operation, status: wire.status, seconds: seconds)
        // An idle follower's long polls end in 204 once per wait: not worth an info line each.
        let level: Logger.Level = operation == "GetFeedSegment" && wire.status == 204 ? .debug : .info
        var line: Logger.Metadata = [
            "op": "\(operation)", "identity": "\(identity ?? "-")", "status": "\(wire.status)",
            "ms": "\(micros / 1000).\(String(micros % 1000 + 1000).dropFirst())",
        ]
        Self.note(wire.refusal, in: &line)
        logger.log(level: level, "request", metadata: line)
        var fields = HTTPFields()
        for (name, value) in wire.headers {
            if let n = HTTPField.Name(name) { fields.append(HTTPField(name: n, value: value)) }
        }
        return Response(status: .init(code: wire.status), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: wire.body)))
    }
}
