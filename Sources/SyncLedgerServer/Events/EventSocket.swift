import Logging
import NIOCore
import NIOWebSocket
import ServiceLifecycle
import Synchronization

/// `GET /events` over a WebSocket (`Upgrade: websocket`, a connection's first request; the
/// upgrade is in EventSocketUpgrade.swift): the same stream as ``EventStream``, one text
/// message per event — the event's JSON with its id
/// first, `{"id":"42",…}` — and `{"id":"N","type":"position"}` where SSE sends an id alone (at
/// the start, and at a keep-alive when the stream's position moved past its last event), so
/// every message's `id` is where to resume (`lastEventId`).
///
/// The server pings at each keep-alive tick and closes a connection that did not answer the
/// previous ping; it answers pings, ignores data messages, and closes with 1001 when it stops,
/// 1013 when the client read too slowly (reconnect with `lastEventId`), 1008 when the
/// credential expired or was revoked.
enum EventSocket {
    /// Runs an upgraded event stream until it ends, then closes the session and the connection.
    static func run(_ socket: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, session: EventSession) async {
        var session = session
        let subscriber = session.subscriber
        let state = SocketState()
        session.service.logger.info("request", metadata: [
            "op": "GetEvents", "transport": "websocket", "identity": "\(EventService.identity(session.credential) ?? "-")", "status": "101",
        ])
        var reason = EventSubscriber.Ending.disconnected
        do {
            try await socket.executeThenClose { inbound, outbound in
                await withTaskCancellationOrGracefulShutdownHandler {
                    await withTaskGroup(of: Void.self) { group in
                        group.addTask { await read(inbound, outbound, state: state, subscriber: subscriber) }
                        reason = await write(&session, outbound, state: state)
                        // The closing handshake: the client's close frame ends the reader; wait a moment for it.
                        group.addTask { try? await Task.sleep(for: .seconds(1)) }
                        _ = await group.next()
                        group.cancelAll()
                    }
                } onCancelOrGracefulShutdown: {
                    subscriber.end(.shutdown)
                }
            }
        } catch {
            // The connection failed; the session ends below all the same.
        }
        session.close(reason)
    }

    /// Writes events, pings and position messages until the stream ends; sends the close
    /// frame its ending calls for. Returns the ending.
    private static func write(_ session: inout EventSession, _ outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>, state: SocketState) async -> EventSubscriber.Ending {
        let metrics = session.service.metrics
        do {
            try await outbound.write(text(position(session.initialID)))
            while true {
                let batch = await session.next()
                if let ending = batch.ending {
                    if let code = closeCode(ending), state.claimClose() {
                        var data = ByteBuffer()
                        data.write(webSocketErrorCode: code)
                        data.writeString(ending.rawValue)
                        try? await outbound.write(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))
                    }
                    return ending
                }
                var frames = zip(batch.events, batch.ids).map { text($0.webSocketText(id: $1)) }
                if batch.keepAlive != nil {
                    guard state.ping() else {
                        session.subscriber.end(.disconnected)  // the last ping was never answered
                        return .disconnected
                    }
                    frames.append(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer()))
                    if let id = batch.keepAliveID { frames.append(text(Self.position(id))) }
                }
                try await outbound.write(contentsOf: frames)
                metrics.sent(batch.events.count)
            }
        } catch {
            return .disconnected
        }
    }

    /// Reads the client's frames: answers pings, notes pongs, answers a close and ends the
    /// stream; data messages are ignored (the stream only sends).
    private static func read(_ inbound: NIOAsyncChannelInboundStream<WebSocketFrame>, _ outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>,
                             state: SocketState, subscriber: EventSubscriber) async {
        do {
            for try await frame in inbound {
                switch frame.opcode {
                case .ping:
                    try await outbound.write(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData))
                case .pong:
                    state.pong()
                case .connectionClose:
                    subscriber.end(.disconnected)
                    if state.claimClose() {
                        var data = frame.unmaskedData
                        let code = data.readWebSocketErrorCode() ?? .normalClosure
                        var reply = ByteBuffer()
                        reply.write(webSocketErrorCode: code)
                        try await outbound.write(WebSocketFrame(fin: true, opcode: .connectionClose, data: reply))
                    }
                    return
                default:
                    continue
                }
            }
        } catch {
            // The connection failed or closed.
        }
        subscriber.end(.disconnected)
    }

    private static func text(_ data: ByteBuffer) -> WebSocketFrame { WebSocketFrame(fin: true, opcode: .text, data: data) }

    private static func position(_ id: String) -> ByteBuffer { ByteBuffer(string: "{\"id\":\"\(id)\",\"type\":\"position\"}") }

    /// The close frame's code for an ending (nil: the client is gone, nothing to send).
    private static func closeCode(_ ending: EventSubscriber.Ending) -> WebSocketErrorCode? {
        switch ending {
        case .shutdown: .goingAway
        case .overflow: .unknown(1013)  // try again later: reconnect with lastEventId
        case .expired, .revoked: .policyViolation
        case .failed: .unexpectedServerError
        case .disconnected: nil
        }
    }
}

/// What a WebSocket's reader and writer share: whether a close frame was sent, whether a ping
/// awaits its pong.
private final class SocketState: Sendable {
    private let state = Mutex((closeSent: false, pingOutstanding: false))

    /// True the first time: the caller sends the one close frame.
    func claimClose() -> Bool {
        state.withLock { s in
            defer { s.closeSent = true }
            return !s.closeSent
        }
    }

    /// A ping is to be sent; false when the previous one was never answered.
    func ping() -> Bool {
        state.withLock { s in
            guard !s.pingOutstanding else { return false }
            s.pingOutstanding = true
            return true
        }
    }

    func pong() { state.withLock { $0.pingOutstanding = false } }
}
