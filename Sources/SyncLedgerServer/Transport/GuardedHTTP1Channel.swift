import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOSSL
import NIOWebSocket

/// Hummingbird's HTTP/1 child channel with SyncLedger's guards around it: ``ConnectionGuard``
/// first (raw bytes: admission, head and body timeouts), ``OutboundGuard`` (response bytes:
/// the write timeout, progress for eviction), then HTTP decoding, then
/// ``RequestGuard`` (body limits and budget), then Hummingbird's request handling with its idle
/// timeout. Over TLS, ``TLSChannel`` wraps this, so the guards see decrypted bytes.
///
/// A connection's first request may upgrade it to a WebSocket event stream (`GET /events` with
/// `Upgrade: websocket`, NIO's typed upgrade handler): the request is authenticated and
/// admitted before the upgrade (``EventSocket/upgrader(_:attempt:connection:)``), and a refused
/// upgrade is answered with the API's JSON error. Once upgraded, the connection guard stops its
/// timers and holds the connection busy, as for a response being written.
struct GuardedHTTP1Channel: ServerChildChannel {
    /// What the first request made of the connection.
    enum Upgrade: Sendable {
        /// HTTP/1, served by Hummingbird's request loop.
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// A WebSocket event stream.
        case events(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, EventSession)
        /// A WebSocket upgrade of `/events` that was refused: answer this error and close.
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, WireError)
    }

    struct Value: ServerChildChannelValue {
        let upgrade: EventLoopFuture<Upgrade>
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    let shared: TransportShared
    let events: EventService?
    let logger: Logger
    /// Hummingbird's channel, for its request loop (the per-connection handlers are added in
    /// ``setup(channel:logger:)``).
    private let base: HTTP1Channel

    init(responder: @escaping HTTPChannelHandler.Responder, shared: TransportShared, events: EventService?, logger: Logger) {
        self.responder = responder
        self.shared = shared
        self.events = events
        self.logger = logger
        self.base = HTTP1Channel(responder: responder)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let progress = OutboundProgress()
            let connectionGuard = ConnectionGuard(shared: shared, progress: progress, logger: self.logger)
            try channel.pipeline.syncOperations.addHandler(connectionGuard)
            try channel.pipeline.syncOperations.addHandler(OutboundGuard(limits: shared.limits, metrics: shared.metrics, progress: progress, logger: self.logger))
            // The guards live on the channel's event loop, where every closure below runs.
            let guards = NIOLoopBound(
                (connectionGuard, RequestGuard(connection: connectionGuard, shared: shared, logger: self.logger)),
                eventLoop: channel.eventLoop)
            let idle = shared.limits.idleTimeout
            let attempt = UpgradeAttempt()
            let upgraders = events.map { [EventSocket.upgrader($0, attempt: attempt, connection: NIOLoopBound(connectionGuard, eventLoop: channel.eventLoop))] } ?? []
            let decoder = HTTP1Channel.Configuration.DecoderConfiguration()
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Upgrade>(upgradeConfiguration: .init(
                upgraders: upgraders,
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        if let refusal = attempt.refusal() {
                            return .refused(try NIOAsyncChannel(wrappingChannelSynchronously: channel), refusal)
                        }
                        try channel.pipeline.syncOperations.addHandlers([guards.value.1, EventStreamInputWatcher()])
                        try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: idle, logger: logger))
                        return .http(try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)))
                    }
                }))
            configuration.enablePipelining = false  // HTTP is pipelined by NIOAsyncChannel
            configuration.enableErrorHandling = false  // Hummingbird answers parse errors
            configuration.enableResponseHeaderValidation = false  // Swift HTTP Types validate
            configuration.decoderConfiguration.maxHeaderFieldSize = decoder.maxHeaderFieldSize
            configuration.decoderConfiguration.maxHeaderListSize = decoder.maxHeaderListSize
            configuration.decoderConfiguration.maxHeaderFieldCount = decoder.maxHeaderFieldCount
            let upgrade = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            // Before NIO's upgrade handler, which would swallow a request asking for another upgrade.
            let upgradeHandler = try channel.pipeline.syncOperations.handler(type: NIOTypedHTTPServerUpgradeHandler<Upgrade>.self)
            try channel.pipeline.syncOperations.addHandler(EventSocketUpgradeFilter(attempt: attempt), position: .before(upgradeHandler))
            return Value(upgrade: upgrade, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgrade.get() {
            case .http(let http):
                await base.handleHTTP(asyncChannel: http, logger: logger)
            case .events(let socket, let session):
                await EventSocket.run(socket, session: session)
            case .refused(let http, let error):
                await EventSocket.refuse(http, error, logger: self.logger)
            }
        } catch {
            // The connection closed, or was refused, before its first request was read.
            logger.trace("connection ended before its first request", metadata: ["error": "\(error)"])
            value.channel.close(promise: nil)
        }
    }
}

extension HTTPServerBuilder {
    /// HTTP/1 with SyncLedger's connection and request guards and the WebSocket event stream;
    /// over TLS when `tls` is given.
    static func guarded(_ shared: TransportShared, events: EventService?, tls: TLSConfiguration?, logger: Logger) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in
            let channel = GuardedHTTP1Channel(responder: responder, shared: shared, events: events, logger: logger)
            guard let tls else { return channel }
            return try TLSChannel(channel, tlsConfiguration: tls)
        }
    }
}
