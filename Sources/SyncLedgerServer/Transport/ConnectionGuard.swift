import Logging
import NIOCore

/// Why the transport cut a request short; the request's body stream ends with this error, so
/// the handler that was reading it stops.
struct RequestCut: Error, CustomStringConvertible {
    let description: String
}

/// The first handler of every connection (after TLS, before HTTP parsing): admits the
/// connection under `--max-connections`, and closes it when a request head or body takes too
/// long (`--header-timeout`, `--body-timeout`), which defeats slowloris-style clients. The
/// ``OutboundGuard`` after it watches the response bytes (`--write-timeout`); the registry
/// reads what it publishes when it chooses whom to evict.
///
/// It sees raw bytes, so it knows when a request *starts* arriving; ``RequestGuard``, after the
/// HTTP decoder, tells it when a head is complete, when a request has been read, and whether a
/// request read to its end (or a response) is in progress. The clock of the first request
/// starts when the connection opens; that of a later request with its first byte. Between
/// requests the connection is idle, and Hummingbird's idle timeout (`--idle-timeout`) applies.
///
/// It keeps the connection's entry in the ``ConnectionRegistry`` current: idle, receiving (a
/// request's first byte came, its body is not complete) or busy (a request read to its end is
/// being handled or answered) — which decides who is evicted at the limit.
final class ConnectionGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private enum Phase {
        /// Waiting for a request head; `started`: its clock runs (bytes came, or first request).
        case awaitingHead(started: Bool)
        /// A head arrived; its body is being read.
        case readingBody
        /// Upgraded (a WebSocket took the connection over): no more requests, no timeouts.
        case upgraded
        /// A refusal was sent: what comes is discarded until the linger ends.
        case lingering
        /// Closed or closing.
        case closed

        /// Whether requests are still being served.
        var isOpen: Bool {
            switch self {
            case .awaitingHead, .readingBody, .upgraded: true
            case .lingering, .closed: false
            }
        }

        var isClosed: Bool {
            if case .closed = self { return true }
            return false
        }
    }

    private let shared: TransportShared
    private let logger: Logger
    private var phase = Phase.awaitingHead(started: true)
    private var timer: Scheduled<Void>?
    private var context: ChannelHandlerContext?
    private var activated = false
    private var admitted = false
    /// When the first byte of the request being received came; nil: none is arriving.
    private var receivingSince: ContinuousClock.Instant?
    /// Whether a request read to its end is being handled, or a response written (RequestGuard).
    private var busy = false
    /// Since when the connection has had no request in progress.
    private var idleSince = ContinuousClock.now
    /// The state last given to the registry.
    private var published: ConnectionRegistry.State?
    /// A request was refused: what the client sends is dropped unparsed.
    private var discarding = false

    /// Bytes between requests are passed to the HTTP decoder in slices of this size.
    static let headSlice = 1024
    /// How the connection's response bytes drain (``OutboundGuard``), for the registry.
    private let progress: OutboundProgress

    init(shared: TransportShared, progress: OutboundProgress, logger: Logger) {
        self.shared = shared
        self.progress = progress
        self.logger = logger
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { activate(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        activate(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        disarm()
        phase = .closed
        if admitted { shared.connections.remove(context.channel) }
        admitted = false
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        phase = .closed
        if admitted { shared.connections.remove(context.channel) }
        admitted = false
        context.fireChannelInactive()
    }

    private func activate(_ context: ChannelHandlerContext) {
        guard !activated else { return }
        activated = true
        switch shared.connections.admit(context.channel, progress: progress) {
        case .admitted:
            admitted = true
            armFirstHead()
        case .admittedEvicting(let victim, let kind):
            admitted = true
            shared.metrics.count(kind == .stalled ? .stalledEvicted : .connectionEvicted)
            let which = switch kind {
            case .idle: "the longest-idle connection"
            case .receiving: "the connection whose unfinished request started the longest ago"
            case .stalled: "the busy connection whose client has read nothing of its response for the longest"
            }
            logger.debug("connection limit reached: closed \(which)", metadata: ["max_connections": "\(shared.connections.maximum)"])
            if kind == .stalled { OutboundGuard.abort(victim) } else { victim.close(promise: nil) }
            armFirstHead()
        case .refused:
            shared.metrics.count(.connectionRefused)
            logger.debug("connection limit reached with every connection busy and its client reading: closed the new one", metadata: ["max_connections": "\(shared.connections.maximum)"])
            phase = .closed
            context.close(promise: nil)
        }
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch phase {
        case .awaitingHead(started: false):
            // The first byte of the next request: its head now has headerTimeout to arrive.
            phase = .awaitingHead(started: true)
            arm(after: shared.limits.headerTimeout, reason: .headerTimeout)
        case .lingering, .closed:
            return  // a refusal was sent: what follows is discarded unparsed
        case .upgraded:
            context.fireChannelRead(data)
            return
        default:
            break
        }
        guard !discarding else { return }
        if receivingSince == nil {
            receivingSince = .now
            publish()
        }
        // Between requests, bytes go to the decoder a slice at a time: once a request is refused
        // (say, one pipelined past --max-pipelined-requests), the rest of what came is not parsed.
        // A body, once its head was read, goes on whole.
        var buffer = unwrapInboundIn(data)
        while buffer.readableBytes > 0, !discarding, phase.isOpen {
            switch phase {
            case .readingBody:
                context.fireChannelRead(wrapInboundOut(buffer))
                return
            case .awaitingHead(started: false):
                // A request ended in an earlier slice, and the next one's bytes follow.
                phase = .awaitingHead(started: true)
                arm(after: shared.limits.headerTimeout, reason: .headerTimeout)
                receivingSince = .now
                publish()
            default:
                break
            }
            guard let slice = buffer.readSlice(length: min(buffer.readableBytes, Self.headSlice)) else { return }
            context.fireChannelRead(wrapInboundOut(slice))
        }
    }

    /// A request was refused: nothing more the client sends is parsed (RequestGuard).
    func discardInbound() {
        discarding = true
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The client finished sending while a refusal lingers: nothing more to wait for.
        if case .lingering = phase, let event = event as? ChannelEvent, event == .inputClosed {
            close()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    // MARK: Called by RequestGuard

    /// A request head was decoded: its body has bodyTimeout to arrive.
    func headReceived() {
        guard case .awaitingHead = phase else { return }
        phase = .readingBody
        arm(after: shared.limits.bodyTimeout, reason: .bodyTimeout)
        if receivingSince == nil {
            // Its bytes came in the read that ended the request before (pipelined).
            receivingSince = .now
            publish()
        }
    }

    /// A request was read to its end: the connection waits for the next one.
    func requestEnded() {
        guard case .readingBody = phase else { return }
        phase = .awaitingHead(started: false)
        disarm()
        receivingSince = nil
        publish()
    }

    /// Whether a request read to its end is being handled, or a response is being written:
    /// while it is, the connection is evicted only when stalled (its client reading nothing).
    func setBusy(_ busy: Bool) {
        guard busy != self.busy else { return }
        self.busy = busy
        if !busy { idleSince = .now }
        publish()
    }

    /// The connection was upgraded to a WebSocket (an event stream): its head and body timers
    /// stop, and like a response being written it is busy — evicted only when stalled — until
    /// it closes.
    func upgraded() {
        guard phase.isOpen else { return }
        phase = .upgraded
        disarm()
        receivingSince = nil
        busy = true
        publish()
    }

    /// Gives the registry the connection's state, when it changed.
    private func publish() {
        guard admitted, let context, phase.isOpen else { return }
        let state: ConnectionRegistry.State
        if busy {
            state = .busy
        } else if let receivingSince {
            state = .receiving(since: receivingSince)
        } else {
            state = .idle(since: idleSince)
        }
        guard state != published else { return }
        published = state
        shared.connections.update(context.channel, state)
    }

    /// A refusal was written: stop sending, read and discard what the client still sends for
    /// a moment (so that it reads the refusal rather than a reset), then close.
    func linger() {
        guard let context, phase.isOpen else { return }
        phase = .lingering
        // Closing soon, and nothing more is served: the first to make room.
        published = .idle(since: idleSince)
        shared.connections.update(context.channel, .idle(since: idleSince))
        let promise = context.eventLoop.makePromise(of: Void.self)
        context.close(mode: .output, promise: promise)
        promise.futureResult.assumeIsolated().whenFailure { [weak self] _ in self?.close() }  // e.g. TLS: no half-close
        arm(after: shared.limits.linger, reason: nil)
    }

    // MARK: Timers

    private func arm(after delay: Duration, reason: TransportMetrics.Event?) {
        disarm()
        guard let context else { return }
        let nanoseconds = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(max(nanoseconds, 1))) { [self] in
            timer = nil
            expired(reason)
        }
    }

    /// The first request's head must come within the header timeout — or the idle timeout,
    /// when shorter: a new connection that sends nothing is idle. (Hummingbird's idle handler
    /// joins the pipeline only with the first request, once the WebSocket upgrade handler let
    /// it through.)
    private func armFirstHead() {
        let limits = shared.limits
        if limits.idleTimeout < limits.headerTimeout {
            arm(after: limits.idleTimeout, reason: nil)
        } else {
            arm(after: limits.headerTimeout, reason: .headerTimeout)
        }
    }

    private func disarm() {
        timer?.cancel()
        timer = nil
    }

    private func expired(_ reason: TransportMetrics.Event?) {
        guard let context, phase.isOpen || reason == nil else { return }
        if let reason {
            shared.metrics.count(reason)
            let what = reason == .headerTimeout ? "request head" : "request body"
            let limit = reason == .headerTimeout ? shared.limits.headerTimeout : shared.limits.bodyTimeout
            logger.debug("closing a connection: \(what) not complete in time", metadata: [
                "remote": "\(context.channel.remoteAddress.map { "\($0)" } ?? "-")", "limit_s": "\(limit.components.seconds)",
            ])
            if reason == .bodyTimeout {
                // The handler reading this body must fail, not see a truncated body.
                context.fireErrorCaught(RequestCut(description: "the request body did not arrive within \(limit.components.seconds) s"))
            }
        }
        close()
    }

    private func close() {
        guard let context, !phase.isClosed else { return }
        phase = .closed
        disarm()
        context.close(promise: nil)
    }
}
