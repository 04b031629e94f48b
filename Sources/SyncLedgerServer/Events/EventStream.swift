import Foundation
import Hummingbird
import HTTPTypes
import NIOCore
import NIOHTTPTypes
import ServiceLifecycle
import SyncLedger

/// `GET /events` as Server-Sent Events: `text/event-stream`, starting with `retry: 3000` and
/// `id: <position>` (so a client that reconnects before any event still resumes from where it
/// started), then one block per event (`id`, `event: dataset`, `data`), and a `: keep-alive`
/// comment at each keep-alive tick (with `id: <position>` when the stream's position moved
/// past its last event, so a reconnect does not read again what it already passed).
///
/// The stream ends when the client goes away (the connection closes, or the client closes its
/// side: ``EventStreamInputWatcher``), when the server stops (graceful shutdown), when its
/// credential expires, or when the client reads too slowly (its queue overflowed).
enum EventStream {
    /// SSE's reconnection delay, sent at the start, in milliseconds.
    static let retryMilliseconds = 3000

    /// Answers `GET /events` (without an upgrade): the stream, or the API's JSON error.
    /// Returns the response and the identity it is for (for the request log).
    static func respond(_ request: Request, channel: any Channel, service: EventService) async -> (Response, identity: String?, refusal: AuthRefusal?) {
        let requestID = RequestID.make()
        var request = request
        if request.method == .options { return (preflight(requestID), nil, nil) }
        do {
            guard request.method == .get else {
                throw WireError.unknownOperation("no operation is \(request.method.rawValue) \(EventService.path); open the event stream with GET")
            }
            let body = try? await request.collectBody(upTo: 1024)
            guard body?.readableBytes == 0 else { throw WireError.invalidParameter("GET \(EventService.path) takes no body") }
            var headers = request.headers.map { ($0.name.canonicalName, $0.value) }
            if let authority = request.head.authority { headers.append(("host", authority)) }
            let wire = WireRequest(method: "GET", rawPath: request.uri.path, rawQuery: request.uri.query, headers: headers, body: [],
                                   peer: channel.remoteAddress?.ipAddress)
            let (session, credential) = try await service.open(wire)
            if request.headers[.upgrade]?.lowercased() == "websocket" {
                // The upgrade is made only as a connection's first request (NIO's upgrader).
                throw WireError.invalidParameter("a WebSocket upgrade must be the first request on its connection: open a new connection")
            }
            var fields: HTTPFields = [.contentType: "text/event-stream; charset=utf-8", .cacheControl: "no-store", .accessControlAllowOrigin: "*"]
            fields[HTTPField.Name("x-accel-buffering")!] = "no"
            fields[HTTPField.Name("x-amzn-RequestId")!] = requestID
            let metrics = service.metrics
            let response = Response(status: .ok, headers: fields, body: ResponseBody { writer in
                var session = session
                await run(&session, writer: &writer, channel: channel, metrics: metrics)
                try await writer.finish(nil)
            })
            return (response, EventService.identity(credential), nil)
        } catch {
            var wire = WireError(any: error)
            if wire.statusCode >= 500 {
                service.logger.error("internal error", metadata: ["request_id": "\(requestID)", "op": "GetEvents", "error": "\(error)"])
                wire = WireError(type: wire.type, status: wire.statusCode, message: "internal error; the server's log has the details under request id \(requestID)")
            }
            var fields: HTTPFields = [.contentType: "application/json", .accessControlAllowOrigin: "*"]
            fields[HTTPField.Name("x-amzn-ErrorType")!] = wire.type
            fields[HTTPField.Name("x-amzn-RequestId")!] = requestID
            return (Response(status: .init(code: wire.statusCode), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: wire.body))), nil, wire.refusal)
        }
    }

    /// The answer to a CORS preflight: a browser's `EventSource` on a page of another origin
    /// sends one before it reconnects with `Last-Event-ID` (not a CORS-safelisted header). The
    /// stream is authorized by its signature (presigned URL), never by cookies, so any origin
    /// may open it.
    private static func preflight(_ requestID: String) -> Response {
        var fields: HTTPFields = [.accessControlAllowOrigin: "*", .accessControlAllowMethods: "GET",
                                  .accessControlAllowHeaders: "last-event-id, authorization, x-amz-date, x-amz-security-token, x-amz-content-sha256",
                                  .accessControlMaxAge: "86400"]
        fields[HTTPField.Name("x-amzn-RequestId")!] = requestID
        return Response(status: .noContent, headers: fields)
    }

    /// Writes the stream until it ends, then closes the session.
    private static func run(_ session: inout EventSession, writer: inout any ResponseBodyWriter, channel: any Channel, metrics: EventMetrics) async {
        let subscriber = session.subscriber
        channel.closeFuture.whenComplete { _ in subscriber.end(.disconnected) }
        var reason = EventSubscriber.Ending.disconnected
        await withTaskCancellationOrGracefulShutdownHandler {
            var buffer = ByteBuffer(string: "retry: \(retryMilliseconds)\nid: \(session.initialID)\n\n")
            do { try await writer.write(buffer) } catch { return }
            while true {
                let batch = await session.next()
                if let ending = batch.ending {
                    reason = ending
                    return
                }
                buffer.clear()
                for (event, id) in zip(batch.events, batch.ids) { event.writeSSE(to: &buffer, id: id) }
                if batch.keepAlive != nil {
                    buffer.writeString(": keep-alive\n")
                    if let id = batch.keepAliveID { buffer.writeString("id: \(id)\n") }
                    buffer.writeString("\n")
                }
                do { try await writer.write(buffer) } catch { return }
                metrics.sent(batch.events.count)
            }
        } onCancelOrGracefulShutdown: {
            subscriber.end(.shutdown)
        }
        session.close(reason)
    }
}

/// Closes a connection when its client closes its side (or the connection) while an event
/// stream is being written to it: the server allows half-closed connections, so without this
/// a stream to a client that left would only end at the next failed write.
final class EventStreamInputWatcher: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private var streaming = false
    private var inputClosed = false

    init() {}

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head) where head.status.kind != .informational:
            streaming = head.headerFields[.contentType]?.hasPrefix("text/event-stream") == true
            context.write(data, promise: promise)
            if streaming, inputClosed { context.close(promise: nil) }
        case .end:
            streaming = false
            context.write(data, promise: promise)
        default:
            context.write(data, promise: promise)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            inputClosed = true
            if streaming {
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
    }
}
