import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOWebSocket
import Synchronization

/// The WebSocket upgrade of `GET /events`, on NIO's typed HTTP upgrade handler.
///
/// NIO's handler consumes a first request that asks for an upgrade it does not make: the
/// request never reaches the HTTP handlers. So only a request that *is* a WebSocket upgrade of
/// `/events` is let through to it with its `Upgrade` header (``EventSocketUpgradeFilter``; any
/// other request's `Upgrade` header is dropped, as HTTP lets a server ignore it, and the
/// request is served as usual), and a refused upgrade is answered here with the API's JSON
/// error (``GuardedHTTP1Channel/Upgrade/refused(_:_:)``).
extension EventSocket {
    /// The upgrader: it authenticates, authorizes and admits the upgrade request exactly as
    /// ``EventService/open(_:)`` does for SSE, before the upgrade; `attempt` carries the session
    /// to the upgraded connection, or the refusal to the HTTP path.
    static func upgrader(_ events: EventService, attempt: UpgradeAttempt, connection: NIOLoopBound<ConnectionGuard>)
        -> NIOTypedWebSocketServerUpgrader<GuardedHTTP1Channel.Upgrade>
    {
        NIOTypedWebSocketServerUpgrader(
            maxFrameSize: 1 << 14,
            shouldUpgrade: { channel, head in
                let (path, query) = split(head.uri)
                let request = WireRequest(method: "GET", rawPath: path, rawQuery: query,
                                          headers: head.headers.map { ($0.name.lowercased(), $0.value) }, body: [],
                                          peer: channel.remoteAddress?.ipAddress)
                let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                promise.completeWithTask {
                    do {
                        attempt.settle(.accepted(try await events.open(request).0))
                        return HTTPHeaders()
                    } catch {
                        attempt.settle(.refused(WireError(any: error)))
                        return nil
                    }
                }
                // Its place under the bounds goes back if the upgrade never completes.
                channel.closeFuture.whenComplete { _ in attempt.settle(.none) }
                return promise.futureResult
            },
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    guard let session = attempt.takeSession() else { throw ChannelError.inappropriateOperationForState }
                    connection.value.upgraded()
                    return .events(try NIOAsyncChannel(wrappingChannelSynchronously: channel), session)
                }
            })
    }

    /// Whether a request head is a WebSocket upgrade of `GET /events`.
    static func isEventUpgrade(_ head: HTTPRequestHead) -> Bool {
        guard head.method == .GET, split(head.uri).path == EventService.path else { return false }
        return head.headers[canonicalForm: "upgrade"].contains { $0.lowercased() == "websocket" }
    }

    static func split(_ uri: String) -> (path: String, query: String?) {
        guard let mark = uri.firstIndex(of: "?") else { return (uri, nil) }
        return (String(uri[..<mark]), String(uri[uri.index(after: mark)...]))
    }

    /// Answers a refused upgrade with the API's JSON error and closes the connection.
    static func refuse(_ http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, _ error: WireError, logger: Logger) async {
        let requestID = RequestID.make()
        let body = ByteBuffer(bytes: error.body)
        var fields: HTTPFields = [.contentType: "application/json", .contentLength: "\(body.readableBytes)", .connection: "close",
                                  .accessControlAllowOrigin: "*"]
        fields[HTTPField.Name("x-amzn-ErrorType")!] = error.type
        fields[HTTPField.Name("x-amzn-RequestId")!] = requestID
        logger.info("request", metadata: ["op": "GetEvents", "transport": "websocket", "status": "\(error.statusCode)"])
        try? await http.executeThenClose { _, outbound in
            try await outbound.write(contentsOf: [.head(HTTPResponse(status: .init(code: error.statusCode), headerFields: fields)), .body(body), .end(nil)])
        }
    }
}

/// What became of a connection's first request as a WebSocket upgrade: shared by the filter,
/// the upgrader and the HTTP path of one connection.
final class UpgradeAttempt: Sendable {
    enum Outcome: Sendable {
        case none
        case accepted(EventSession)
        case refused(WireError)
    }

    private let state = Mutex((attempted: false, outcome: Outcome.none))

    init() {}

    /// The first request is a WebSocket upgrade of `/events`.
    func markAttempted() { state.withLock { $0.attempted = true } }

    func settle(_ outcome: Outcome) { state.withLock { $0.outcome = outcome } }

    /// The admitted session, once (nil if there is none).
    func takeSession() -> EventSession? {
        state.withLock { s in
            guard case .accepted(let session) = s.outcome else { return nil }
            s.outcome = .none
            return session
        }
    }

    /// The error to answer when an upgrade was asked for and not made; nil when none was asked.
    func refusal() -> WireError? {
        state.withLock { s in
            guard s.attempted else { return nil }
            defer { s.outcome = .none }
            if case .refused(let error) = s.outcome { return error }
            return WireError.invalidParameter("a WebSocket upgrade needs GET with Connection: Upgrade, Sec-WebSocket-Key and Sec-WebSocket-Version: 13")
        }
    }
}

/// Sits before NIO's upgrade handler for a connection's first request: a WebSocket upgrade of
/// `/events` passes as it is; any other request loses its `Upgrade` header (so NIO's handler
/// passes it on to be served instead of consuming it). A head that does not parse is answered
/// 400 and the connection closed, as Hummingbird does for later requests (until the first head
/// is read, no request loop is there to do it). Leaves the pipeline after that request's head.
final class EventSocketUpgradeFilter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let attempt: UpgradeAttempt

    init(attempt: UpgradeAttempt) { self.attempt = attempt }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        if EventSocket.isEventUpgrade(head) {
            attempt.markAttempted()
            context.fireChannelRead(data)
        } else {
            head.headers.remove(name: "upgrade")
            context.fireChannelRead(wrapInboundOut(.head(head)))
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            context.close(promise: nil)
            return
        }
        let head = HTTPResponseHead(version: .http1_1, status: .badRequest, headers: ["connection": "close", "content-length": "0"])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}
