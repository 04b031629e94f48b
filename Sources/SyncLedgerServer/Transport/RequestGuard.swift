import HTTPTypes
import Logging
import NIOCore
import NIOHTTPTypes

/// The request-level guard of a connection, after HTTP decoding and before Hummingbird:
///
/// - a request whose `Content-Length` exceeds `--max-body-bytes` is answered 413 at once, its
///   body never read; a body without a length (chunked) is counted as it arrives and refused
///   when it passes the limit;
/// - every body takes its bytes from the global ``BodyBudget`` before it is buffered (the
///   whole `Content-Length` up front, or each chunk as it comes) and gives them back when its
///   response has been written; a request that does not fit is answered 429 at once;
/// - it tells ``ConnectionGuard`` when heads and bodies are complete (their timeouts), and the
///   ``ConnectionRegistry`` whether a request is in progress (who may be evicted).
///
/// A refusal is written by this handler itself, with `connection: close`, after the responses
/// still owed to earlier (pipelined) requests; then the connection lingers and closes.
final class RequestGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// A refusal waiting for the responses owed before it.
    private struct Refusal {
        let status: Int
        let type: String
        let message: String
        /// Responses to earlier requests still to pass before this one is written.
        var owedBefore: Int
    }

    private let connection: ConnectionGuard
    private let shared: TransportShared
    private let logger: Logger
    /// Budget bytes held per request whose response has not been written yet, oldest first.
    private var held: [Int] = []
    /// Body bytes of the request being read.
    private var bodyBytes = 0
    /// Whether the request being read has no Content-Length (its chunks are budgeted as they come).
    private var counting = false
    /// Set once a request was refused: inbound parts are dropped from then on.
    private var refusal: Refusal?
    private var refusalWritten = false

    init(connection: ConnectionGuard, shared: TransportShared, logger: Logger) {
        self.connection = connection
        self.shared = shared
        self.logger = logger
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        for bytes in held { shared.budget.release(bytes) }
        held.removeAll()
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard refusal == nil else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            connection.headReceived()
            bodyBytes = 0
            let limit = shared.limits.maxBodyBytes
            if let text = head.headerFields[.contentLength], let length = Int(text), length >= 0 {
                guard length <= limit else {
                    refuse(context, 413, "InvalidParameterException", .bodyTooLarge,
                           "the request body of \(length) bytes exceeds the limit of \(limit) bytes (--max-body-bytes)", headForwarded: false)
                    return
                }
                guard shared.budget.acquire(length) else {
                    refuse(context, 429, "TooManyRequestsException", .bodyBudgetExhausted,
                           "the server is buffering too many request bodies at once; retry later", headForwarded: false)
                    return
                }
                counting = false
                held.append(length)
            } else {
                counting = true
                held.append(0)
            }
            if held.count == 1 { shared.connections.setBusy(context.channel, true) }
            context.fireChannelRead(data)
        case .body(let chunk):
            bodyBytes += chunk.readableBytes
            if counting {
                let limit = shared.limits.maxBodyBytes
                guard bodyBytes <= limit else {
                    refuse(context, 413, "InvalidParameterException", .bodyTooLarge,
                           "the request body exceeds the limit of \(limit) bytes (--max-body-bytes)", headForwarded: true)
                    return
                }
                guard shared.budget.acquire(chunk.readableBytes) else {
                    refuse(context, 429, "TooManyRequestsException", .bodyBudgetExhausted,
                           "the server is buffering too many request bodies at once; retry later", headForwarded: true)
                    return
                }
                held[held.count - 1] += chunk.readableBytes
            }
            context.fireChannelRead(data)
        case .end:
            connection.requestEnded()
            context.fireChannelRead(data)
        }
    }

    /// Refuses the request being read. When its head was already passed on, the handler
    /// reading its body gets an error (it must not see a truncated body) and its own answer to
    /// this request is dropped.
    private func refuse(_ context: ChannelHandlerContext, _ status: Int, _ type: String, _ event: TransportMetrics.Event, _ message: String, headForwarded: Bool) {
        shared.metrics.count(event)
        logger.info("request refused by the transport", metadata: [
            "status": "\(status)", "reason": "\(event.rawValue)",
            "remote": "\(context.channel.remoteAddress.map { "\($0)" } ?? "-")",
        ])
        var owed = held.count
        if headForwarded, let last = held.popLast() {
            shared.budget.release(last)
            owed -= 1
        }
        refusal = Refusal(status: status, type: type, message: message, owedBefore: owed)
        if headForwarded { context.fireErrorCaught(RequestCut(description: message)) }
        if owed == 0 { writeRefusal(context) }
    }

    private func writeRefusal(_ context: ChannelHandlerContext) {
        guard let refusal, !refusalWritten else { return }
        refusalWritten = true
        let error = WireError(type: refusal.type, status: refusal.status, message: refusal.message)
        let body = ByteBuffer(bytes: error.body)
        var fields = HTTPFields()
        fields[.contentType] = "application/json"
        fields[HTTPField.Name("x-amzn-ErrorType")!] = refusal.type
        fields[.contentLength] = "\(body.readableBytes)"
        fields[.connection] = "close"
        context.write(wrapOutboundOut(.head(HTTPResponse(status: .init(code: refusal.status), headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        let connection = self.connection
        done.futureResult.assumeIsolated().whenComplete { _ in connection.linger() }
    }

    // MARK: Outbound

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if var pending = refusal {
            // Answers owed to earlier requests pass; after them, only the refusal is written.
            guard pending.owedBefore > 0 else {
                promise?.fail(RequestCut(description: "the request was refused by the transport"))
                return
            }
            if case .end = unwrapOutboundIn(data) {
                pending.owedBefore -= 1
                refusal = pending
                responseEnded(context)
                context.write(data, promise: promise)
                if pending.owedBefore == 0 { writeRefusal(context) }
                return
            }
            context.write(data, promise: promise)
            return
        }
        if case .end = unwrapOutboundIn(data) { responseEnded(context) }
        context.write(data, promise: promise)
    }

    /// A response was written: its request's budget goes back.
    private func responseEnded(_ context: ChannelHandlerContext) {
        guard !held.isEmpty else { return }
        shared.budget.release(held.removeFirst())
        if held.isEmpty { shared.connections.setBusy(context.channel, false) }
    }
}
