import HTTPTypes
import Logging
import NIOCore
import NIOHTTPTypes

/// The request-level guard of a connection, after HTTP decoding and before Hummingbird:
///
/// - a request whose `Content-Length` exceeds `--max-body-bytes` is answered 413 at once, its
///   body never read; a body without a length (chunked) is counted as it arrives and refused
///   when it passes the limit;
/// - every body takes its bytes from the global ``BodyBudget`` as they arrive, before they are
///   passed on to be buffered (a declared `Content-Length` takes nothing by itself), and gives
///   them back when its response has been written or the connection closes; a request whose
///   arriving bytes do not fit is answered 429 at once;
/// - a connection may have at most `--max-pipelined-requests` requests read and not yet
///   answered (HTTP pipelining); the next is answered 429 after them, and the connection closes:
///   requests sent by a client that does not read the answers do not pile up;
/// - it tells ``ConnectionGuard`` when heads and bodies are complete (their timeouts), and
///   whether a request read to its end, or a response, is in progress (who may be evicted).
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
    /// Budget bytes held per request passed on whose response has not been written yet,
    /// oldest first; the last is the request being read when ``readingOwed``.
    private var owed: [Int] = []
    /// Budget bytes held over all of ``owed``.
    private var holding = 0
    /// Whether a request's head was passed on and its end not yet read.
    private var reading = false
    /// Whether the request being read is still owed its response (the last of ``owed``); false
    /// once it was answered before its body was read (its remaining bytes are discarded).
    private var readingOwed = false
    /// Body bytes of the request being read.
    private var bodyBytes = 0
    /// Whether the request being read has no Content-Length (its size is checked as it comes).
    private var counting = false
    /// Whether a response head was written and its end not yet.
    private var responding = false
    /// Set once a request was refused: inbound parts are dropped from then on.
    private var refusal: Refusal?
    private var refusalWritten = false

    init(connection: ConnectionGuard, shared: TransportShared, logger: Logger) {
        self.connection = connection
        self.shared = shared
        self.logger = logger
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        releaseAll()
    }

    func channelInactive(context: ChannelHandlerContext) {
        releaseAll()
        context.fireChannelInactive()
    }

    /// The connection closed: everything it held goes back.
    private func releaseAll() {
        shared.budget.release(holding, holding: holding)
        holding = 0
        owed.removeAll()
        readingOwed = false
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard refusal == nil else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            connection.headReceived()
            bodyBytes = 0
            let pipelined = shared.limits.maxPipelined
            guard owed.count < pipelined else {
                refuse(context, 429, "TooManyRequestsException", .tooManyPipelined,
                       "more than \(pipelined) requests were sent on this connection without their answers being read (--max-pipelined-requests); read the answers, or use more connections", headForwarded: false)
                return
            }
            let limit = shared.limits.maxBodyBytes
            if let text = head.headerFields[.contentLength], let length = Int(text), length >= 0 {
                guard length <= limit else {
                    refuse(context, 413, "InvalidParameterException", .bodyTooLarge,
                           "the request body of \(length) bytes exceeds the limit of \(limit) bytes (--max-body-bytes)", headForwarded: false)
                    return
                }
                counting = false
            } else {
                counting = true
            }
            reading = true
            readingOwed = true
            owed.append(0)
            context.fireChannelRead(data)
        case .body(let chunk):
            let bytes = chunk.readableBytes
            bodyBytes += bytes
            if counting {
                let limit = shared.limits.maxBodyBytes
                guard bodyBytes <= limit else {
                    refuse(context, 413, "InvalidParameterException", .bodyTooLarge,
                           "the request body exceeds the limit of \(limit) bytes (--max-body-bytes)", headForwarded: true)
                    return
                }
            }
            if readingOwed {
                // Taken before the bytes are passed on to be buffered; given back with the response.
                guard shared.budget.acquire(bytes, holding: holding) else {
                    refuse(context, 429, "TooManyRequestsException", .bodyBudgetExhausted,
                           "the server is buffering too many request bodies at once; retry later", headForwarded: true)
                    return
                }
                holding += bytes
                owed[owed.count - 1] += bytes
            }
            // Otherwise the request was answered already, and Hummingbird discards the rest of its body.
            context.fireChannelRead(data)
        case .end:
            reading = false
            readingOwed = false
            connection.requestEnded()
            updateBusy()
            context.fireChannelRead(data)
        }
    }

    /// Busy: a request read to its end is owed its response, or a response is being written.
    private func updateBusy() {
        connection.setBusy(responding || owed.count > (readingOwed ? 1 : 0))
    }

    /// Refuses the request being read. When its head was already passed on, the handler
    /// reading its body gets an error (it must not see a truncated body) and its own answer to
    /// this request is dropped.
    private func refuse(_ context: ChannelHandlerContext, _ status: Int, _ type: String, _ event: TransportMetrics.Event, _ message: String, headForwarded: Bool) {
        shared.metrics.count(event)
        connection.discardInbound()
        logger.info("request refused by the transport", metadata: [
            "status": "\(status)", "reason": "\(event.rawValue)",
            "remote": "\(context.channel.remoteAddress.map { "\($0)" } ?? "-")",
        ])
        if headForwarded, reading, !readingOwed {
            // It was answered already (before its body was read): no second answer, just the end.
            reading = false
            refusal = Refusal(status: status, type: type, message: message, owedBefore: 0)
            refusalWritten = true
            context.fireErrorCaught(RequestCut(description: message))
            context.close(promise: nil)
            return
        }
        if headForwarded, readingOwed, let last = owed.popLast() {
            // The request being read gets the refusal for an answer; its bytes go back.
            shared.budget.release(last, holding: holding)
            holding -= last
        }
        reading = false
        readingOwed = false
        let owedBefore = owed.count
        refusal = Refusal(status: status, type: type, message: message, owedBefore: owedBefore)
        if headForwarded { context.fireErrorCaught(RequestCut(description: message)) }
        if owedBefore == 0 { writeRefusal(context) }
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
        let part = unwrapOutboundIn(data)
        if var pending = refusal {
            // Answers owed to earlier requests pass; after them, only the refusal is written.
            guard pending.owedBefore > 0 else {
                promise?.fail(RequestCut(description: "the request was refused by the transport"))
                return
            }
            if case .end = part {
                pending.owedBefore -= 1
                refusal = pending
                responseEnded()
                context.write(data, promise: promise)
                if pending.owedBefore == 0 { writeRefusal(context) }
                return
            }
            context.write(data, promise: promise)
            return
        }
        switch part {
        case .head(let head) where head.status.kind != .informational:
            responding = true
            updateBusy()
        case .end:
            responseEnded()
        default:
            break
        }
        context.write(data, promise: promise)
    }

    /// A response was written: its request's budget goes back.
    private func responseEnded() {
        responding = false
        if !owed.isEmpty {
            let bytes = owed.removeFirst()
            shared.budget.release(bytes, holding: holding)
            holding -= bytes
            // The request being read was the one answered: the rest of its body is discarded.
            if owed.isEmpty { readingOwed = false }
        }
        updateBusy()
    }
}
