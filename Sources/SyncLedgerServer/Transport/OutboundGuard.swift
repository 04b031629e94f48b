#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore

/// Watches a connection's response bytes, right after ``ConnectionGuard`` (so it sees every
/// byte the connection sends, HTTP or WebSocket, before TLS):
///
/// - it counts the bytes written and not yet handed to the socket (a write's promise completes
///   when they were; a larger buffer is passed on in slices of ``progressSlice`` bytes, so that
///   a client reading slowly but steadily makes progress);
/// - it publishes since when they have waited with none sent (``OutboundProgress``): at the
///   connection limit, a busy connection stalled that way makes room for a newcomer;
/// - when they have waited `--write-timeout` with none sent, it closes the connection: a client
///   that stopped reading its answers, or its event stream (SSE or WebSocket), gives its slot
///   back, and the handler writing to it fails and ends;
/// - while more than `--max-outbound-bytes` wait, it reads nothing more from the connection:
///   its next requests stay in the socket rather than become answers nobody reads.
final class OutboundGuard: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    /// Outbound buffers larger than this are passed on in slices of it: the unit of progress.
    static let progressSlice = 64 * 1024

    private let limits: HTTPLimits
    private let metrics: TransportMetrics
    private let logger: Logger
    /// What the registry reads of ``waiting`` and ``lastProgress``.
    private let progress: OutboundProgress
    private var context: ChannelHandlerContext?
    /// Response bytes written and not yet handed to the socket.
    private var waiting = 0
    /// When bytes last went out (or began to wait, when none waited).
    private var lastProgress = NIODeadline.now()
    private var timer: Scheduled<Void>?
    /// A read was asked for while too many bytes waited: it is made once they drain.
    private var readDeferred = false
    private var closed = false

    init(limits: HTTPLimits, metrics: TransportMetrics, progress: OutboundProgress, logger: Logger) {
        self.limits = limits
        self.metrics = metrics
        self.progress = progress
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        closed = true
        disarm()
        self.context = nil
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode == .all {
            closed = true
            disarm()
        }
        context.close(mode: mode, promise: promise)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let data = unwrapOutboundIn(data)
        guard data.readableBytes > 0, !closed else {
            context.write(wrapOutboundOut(data), promise: promise)
            return
        }
        guard case .byteBuffer(var buffer) = data, buffer.readableBytes > Self.progressSlice else {
            writeCounted(context, data, promise: promise)
            return
        }
        while buffer.readableBytes > Self.progressSlice, let slice = buffer.readSlice(length: Self.progressSlice) {
            writeCounted(context, .byteBuffer(slice), promise: nil)
        }
        writeCounted(context, .byteBuffer(buffer), promise: promise)
    }

    /// Passes `data` on, counting its bytes as waiting until its write completes.
    private func writeCounted(_ context: ChannelHandlerContext, _ data: IOData, promise: EventLoopPromise<Void>?) {
        let bytes = data.readableBytes
        if waiting == 0 {
            lastProgress = context.eventLoop.now
            progress.waiting(since: lastProgress)
            arm()
        }
        waiting += bytes
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenComplete { [self] result in
            sent(bytes)
            promise?.completeWith(result)
        }
        context.write(wrapOutboundOut(data), promise: written)
    }

    /// `bytes` went out (or failed with the connection).
    private func sent(_ bytes: Int) {
        waiting -= bytes
        lastProgress = context?.eventLoop.now ?? .now()
        if waiting > 0 {
            progress.waiting(since: lastProgress)
        } else {
            disarm()
        }
        if readDeferred, waiting <= limits.maxOutboundBytes, let context, !closed {
            readDeferred = false
            context.read()
        }
    }

    func read(context: ChannelHandlerContext) {
        guard waiting <= limits.maxOutboundBytes else {
            readDeferred = true
            return
        }
        context.read()
    }

    // MARK: The write timeout

    private func arm() {
        guard timer == nil, !closed, let context else { return }
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: lastProgress + Self.timeAmount(limits.writeTimeout)) { [self] in
            timer = nil
            guard let context = self.context else { return }
            guard waiting > 0, !closed else { return }
            if context.eventLoop.now >= lastProgress + Self.timeAmount(limits.writeTimeout) {
                timedOut()
            } else {
                arm()
            }
        }
    }

    private func disarm() {
        timer?.cancel()
        timer = nil
        progress.drained()
    }

    private func timedOut() {
        guard let context else { return }
        metrics.count(.writeTimeout)
        logger.debug("closing a connection: its client took none of the response bytes within the write timeout", metadata: [
            "remote": "\(context.channel.remoteAddress.map { "\($0)" } ?? "-")", "limit_s": "\(limits.writeTimeout.components.seconds)",
            "waiting_bytes": "\(waiting)",
        ])
        closed = true
        disarm()
        // The writes that wait fail, and with them the handler writing (an answer, an event stream).
        Self.abort(context.channel)
    }

    /// Closes a connection whose client reads nothing with a reset: its unsent bytes are
    /// dropped at once (a plain close would queue the FIN behind them, and the kernel would
    /// keep them, and the socket, for a client that never takes them).
    static func abort(_ channel: any Channel) {
        guard let socket = channel as? any SocketOptionProvider else {
            channel.close(promise: nil)
            return
        }
        socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
    }

    private static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(max(1, duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000))
    }
}
