import NIOCore
import NIOPosix
import NIOConcurrencyHelpers

/// What a connection's channel reports to the client, in order.
enum ConnectionEvent: Sendable {
    case op(ServerOp)
    case failed(NATSError)
}

/// Decodes inbound bytes into ``ServerOp``s and forwards them, in order, to an AsyncStream.
/// On the first INFO it puts the TLS handler in front of itself when TLS is needed.
final class NATSChannelHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private var parser = ProtocolParser()
    private var failed = false
    private var sawInfo = false
    private let continuation: AsyncStream<ConnectionEvent>.Continuation
    let address: ServerAddress
    let tls: TLSUpgrade

    init(continuation: AsyncStream<ConnectionEvent>.Continuation, address: ServerAddress, tls: TLSUpgrade) {
        self.continuation = continuation
        self.address = address
        self.tls = tls
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        let buffer = unwrapInboundIn(data)
        do {
            for op in try parser.feed(buffer.readableBytesView) {
                if case .info(var info) = op, !sawInfo {
                    sawInfo = true
                    if try upgradeIfNeeded(info, context: context) {
                        // This INFO came in clear, before TLS: anyone on the path could have
                        // written it. Its `connect_urls` would let them add their own host to the
                        // server list (and receive the credentials on a reconnection), so they
                        // are dropped; INFOs over the TLS connection give them.
                        info.connectURLs = []
                        continuation.yield(.op(.info(info)))
                        continue
                    }
                }
                continuation.yield(.op(op))
            }
        } catch {
            fail(error, context: context)
        }
    }

    private func fail(_ error: NATSError, context: ChannelHandlerContext) {
        guard !failed else { return }
        failed = true
        continuation.yield(.failed(error))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        continuation.finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(Self.describeTLS(error, address: address) ?? .connectionLost, context: context)
    }
}

/// A server address from the options or from INFO's `connect_urls`.
struct ServerAddress: Sendable, Hashable, CustomStringConvertible {
    var host: String
    var port: Int
    /// The URL said `tls://`: the client requires TLS (not part of the address's identity).
    var tlsScheme = false

    static func == (a: ServerAddress, b: ServerAddress) -> Bool { a.host == b.host && a.port == b.port }
    func hash(into h: inout Hasher) {
        h.combine(host)
        h.combine(port)
    }

    var description: String { "nats://\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    /// Parses `nats://host:port`, `tls://host:port` (TLS required), `host:port` or `host` (port 4222).
    /// Credentials in a URL (`user:pass@`) are ignored: give them in ``NATSClientOptions/auth``.
    init(parsing text: String) throws(NATSError) {
        var s = Substring(text.trimmingLeadingSpaces())
        if let r = s.range(of: "://") {
            let scheme = s[s.startIndex..<r.lowerBound].lowercased()
            guard scheme == "nats" || scheme == "tls" else { throw .invalidURL(text) }
            tlsScheme = scheme == "tls"
            s = s[r.upperBound...]
        }
        if let slash = s.firstIndex(of: "/") { s = s[s.startIndex..<slash] }
        if let at = s.lastIndex(of: "@") { s = s[s.index(after: at)...] }
        var host: Substring
        var portText: Substring?
        if s.hasPrefix("[") {
            guard let close = s.firstIndex(of: "]") else { throw .invalidURL(text) }
            host = s[s.index(after: s.startIndex)..<close]
            let after = s[s.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw .invalidURL(text) }
        } else if let colon = s.lastIndex(of: ":") {
            host = s[s.startIndex..<colon]
            portText = s[s.index(after: colon)...]
        } else {
            host = s
        }
        guard !host.isEmpty else { throw .invalidURL(text) }
        var port = 4222
        if let portText {
            guard let p = Int(portText), p > 0, p < 65536 else { throw .invalidURL(text) }
            port = p
        }
        self.host = String(host)
        self.port = port
    }
}

/// One TCP connection to a server.
final class NATSConnection: Sendable {
    let channel: any Channel
    let events: AsyncStream<ConnectionEvent>
    let address: ServerAddress

    private init(channel: any Channel, events: AsyncStream<ConnectionEvent>, address: ServerAddress) {
        self.channel = channel
        self.events = events
        self.address = address
    }

    static func connect(to address: ServerAddress, timeout: Duration, tls: TLSUpgrade) async throws -> NATSConnection {
        let (stream, continuation) = AsyncStream<ConnectionEvent>.makeStream()
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.nanoseconds(max(1, timeout.nanoseconds)))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NATSChannelHandler(continuation: continuation, address: address, tls: tls))
                }
            }
        do {
            let channel = try await bootstrap.connect(host: address.host, port: address.port).get()
            return NATSConnection(channel: channel, events: stream, address: address)
        } catch {
            continuation.finish()
            throw NATSError.cannotConnect("\(address): \(error)")
        }
    }

    /// Queues `buffer` for writing and flushes; a failed write closes the connection.
    func write(_ buffer: ByteBuffer) {
        let channel = self.channel
        channel.writeAndFlush(buffer).whenFailure { _ in channel.close(promise: nil) }
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// Fans client events out to every stream made by ``NATSClient/events``.
final class EventBroadcaster: Sendable {
    private struct State {
        var continuations: [UInt64: AsyncStream<NATSClientEvent>.Continuation] = [:]
        var next: UInt64 = 0
        var finished = false
    }

    private let state = NIOLockedValueBox(State())

    func makeStream() -> AsyncStream<NATSClientEvent> {
        let (stream, continuation) = AsyncStream<NATSClientEvent>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let id: UInt64? = state.withLockedValue { s in
            if s.finished { return nil }
            s.next += 1
            s.continuations[s.next] = continuation
            return s.next
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    func emit(_ event: NATSClientEvent) {
        let conts = state.withLockedValue { Array($0.continuations.values) }
        for c in conts { c.yield(event) }
    }

    func finish() {
        let conts = state.withLockedValue { s in
            s.finished = true
            defer { s.continuations = [:] }
            return Array(s.continuations.values)
        }
        for c in conts { c.finish() }
    }
}

/// A locked Bool.
final class NIOLockedValueBoxBool: Sendable {
    private let box = NIOLockedValueBox(false)
    func set() { box.withLockedValue { $0 = true } }
    func get() -> Bool { box.withLockedValue { $0 } }
}
