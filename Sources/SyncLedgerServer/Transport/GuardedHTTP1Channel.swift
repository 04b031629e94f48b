import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL

/// Hummingbird's HTTP/1 child channel with SyncLedger's guards around it: ``ConnectionGuard``
/// first (raw bytes: admission, head and body timeouts), then HTTP decoding, then
/// ``RequestGuard`` (body limits and budget), then Hummingbird's request handling with its idle
/// timeout. Over TLS, ``TLSChannel`` wraps this, so the guards see decrypted bytes.
struct GuardedHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    let responder: HTTPChannelHandler.Responder
    let shared: TransportShared
    let logger: Logger
    /// Hummingbird's channel, for its request loop (the per-connection handlers are added in
    /// ``setup(channel:logger:)``).
    private let base: HTTP1Channel

    init(responder: @escaping HTTPChannelHandler.Responder, shared: TransportShared, logger: Logger) {
        self.responder = responder
        self.shared = shared
        self.logger = logger
        self.base = HTTP1Channel(responder: responder, configuration: Self.configuration(shared, extra: []))
    }

    private static func configuration(_ shared: TransportShared, extra: @autoclosure @escaping @Sendable () -> [any RemovableChannelHandler]) -> HTTP1Channel.Configuration {
        let idle = shared.limits.idleTimeout.components
        return HTTP1Channel.Configuration(
            additionalChannelHandlers: extra(),
            idleTimeout: .nanoseconds(idle.seconds * 1_000_000_000 + idle.attoseconds / 1_000_000_000),
            httpDecoderConfiguration: .init())
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let connectionGuard = ConnectionGuard(shared: shared, logger: self.logger)
        do {
            try channel.pipeline.syncOperations.addHandler(connectionGuard)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        // The request guard talks to this connection's ConnectionGuard; both live on the
        // channel's event loop, where Hummingbird calls the handler factory during setup.
        let requestGuard = NIOLoopBound(RequestGuard(connection: connectionGuard, shared: shared, logger: self.logger), eventLoop: channel.eventLoop)
        let perConnection = HTTP1Channel(responder: responder, configuration: Self.configuration(shared, extra: [requestGuard.value, EventStreamInputWatcher()]))
        return perConnection.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

extension HTTPServerBuilder {
    /// HTTP/1 with SyncLedger's connection and request guards; over TLS when `tls` is given.
    static func guarded(_ shared: TransportShared, tls: TLSConfiguration?, logger: Logger) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in
            let channel = GuardedHTTP1Channel(responder: responder, shared: shared, logger: logger)
            guard let tls else { return channel }
            return try TLSChannel(channel, tlsConfiguration: tls)
        }
    }
}
