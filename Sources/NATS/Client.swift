import NIOCore
import NIOSSL

/// Options of a ``NATSClient``.
public struct NATSClientOptions: Sendable {
    /// Server URLs (`nats://host:port`), tried round-robin. Servers announced in INFO's
    /// `connect_urls` are added to this list — except those of the first INFO of a connection
    /// that is then upgraded to TLS: that INFO came in clear, so only INFOs received over TLS
    /// may add servers (a man in the middle cannot add its own host and receive the credentials).
    public var servers: [String]
    /// The name sent in CONNECT.
    public var name: String?
    /// How often the client PINGs the server; after 2 PINGs without PONG the connection is
    /// considered stale and dropped (then reconnected). Default 2 minutes.
    public var pingInterval: Duration = .seconds(120)
    /// Backoff base between reconnection passes over the server list; it doubles each pass,
    /// is capped at 2 s and gets up to 25 % jitter. Default 250 ms.
    public var reconnectWait: Duration = .milliseconds(250)
    /// How many connection attempts a reconnection makes before the client closes; -1 (the
    /// default) retries forever.
    public var maxReconnectAttempts: Int = -1
    /// Default time-out of ``NATSClient/request(_:payload:headers:timeout:)``, and how long a
    /// publish waits for a reconnection. Default 5 s.
    public var requestTimeout: Duration = .seconds(5)
    /// Time-out of one connection attempt (TCP connect plus INFO/CONNECT/PING/PONG). Default 2 s.
    public var connectTimeout: Duration = .seconds(2)
    /// Messages a subscription buffers before it is dropped as a slow consumer. Default 65 536.
    public var subscriptionBufferLimit: Int = 65_536
    /// Credentials sent in CONNECT, on the first connection and on every reconnection.
    /// Default ``NATSAuth/none``. With a password or a token the client upgrades to TLS whenever
    /// the server offers it (`tls_available`), even if neither side requires TLS; only a server
    /// that offers no TLS gets them in clear — set ``NATSTLSOptions/required`` (or use `tls://`
    /// URLs) to refuse that, since a man in the middle can hide the offer.
    public var auth: NATSAuth = .none
    /// TLS: when to require it, what to trust, and an optional client certificate.
    public var tls = NATSTLSOptions()

    public init(servers: [String]) {
        self.servers = servers
    }
}

/// Connection state changes, delivered by ``NATSClient/events``.
public enum NATSClientEvent: Sendable, Equatable {
    /// The first connection succeeded.
    case connected(server: String)
    /// The connection was lost; the client is reconnecting.
    case disconnected
    /// The client reconnected (subscriptions were re-sent before this event).
    case reconnected(server: String)
    /// The client was closed (by ``NATSClient/close()`` or after the reconnect attempts ran out).
    case closed
}

/// A NATS client: one connection at a time, reconnecting on loss.
///
/// Guarantees and limits:
/// - On connection loss the client reconnects (servers round-robin, backoff with jitter),
///   re-sends every live subscription with its sid, then emits `.reconnected`.
/// - Requests in flight when the connection drops fail with ``NATSError/connectionLost``.
/// - Publishes (and requests) made while disconnected wait for the reconnection up to
///   ``NATSClientOptions/requestTimeout`` and then fail with ``NATSError/notConnected``.
///   Messages written just before a loss may be lost (core NATS is at-most-once).
/// - Authentication (``NATSClientOptions/auth``: user/password, token or nkey) is sent on every
///   (re)connection; a refusal fails the connection with ``NATSError/authorizationViolation(_:)``.
/// - TLS (``NATSClientOptions/tls``) is negotiated after INFO when either side requires it; the
///   server's certificate is verified, failures are ``NATSError/certificateUntrusted(_:)`` or
///   ``NATSError/tlsHandshakeFailed(_:)``.
public actor NATSClient {
    enum State { case connecting, connected, disconnected, closed }

    let options: NATSClientOptions
    var servers: [ServerAddress]
    var serverIndex = 0
    var state: State = .connecting
    var everConnected = false
    var connection: NATSConnection?
    var generation: UInt64 = 0
    var connectSent = false
    var handshake: (generation: UInt64, continuation: CheckedContinuation<Void, any Error>)?
    var info: NATSServerInfo?
    var currentServer: ServerAddress?

    var subscriptions: [UInt64: SubscriptionState] = [:]
    var nextSID: UInt64 = 1

    var pongQueue: [UInt64] = []
    var pongWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    var pingsOutstanding = 0
    var nextWaiterID: UInt64 = 1
    var connectionWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]

    var muxSID: UInt64?
    var muxSubscription: NATSSubscription?
    let muxPrefix = "_INBOX.\(NUID.next())."
    var pendingRequests: [String: CheckedContinuation<NATSMessage, any Error>] = [:]
    var requestTimers: [String: Task<Void, Never>] = [:]
    /// The subject of each pending request, to fail it on a permissions violation.
    var requestSubjects: [String: String] = [:]

    var pingTask: Task<Void, Never>?
    var reconnectTask: Task<Void, Never>?
    let broadcaster = EventBroadcaster()
    let tls: TLSUpgrade

    init(options: NATSClientOptions) throws(NATSError) {
        self.options = options
        var list: [ServerAddress] = []
        for s in options.servers {
            let a = try ServerAddress(parsing: s)
            if !list.contains(a) { list.append(a) }
        }
        if list.isEmpty { throw .invalidURL("no server given") }
        servers = list
        let required = options.tls.isRequired || list.contains { $0.tlsScheme }
        var context: NIOSSLContext?
        if required || options.tls.keyFile != nil { context = try options.tls.makeContext() }
        var secret = false
        switch options.auth {
        case .userPassword, .token: secret = true
        case .none, .nkey: break
        }
        tls = TLSUpgrade(context: context, required: required, whenOffered: secret)
    }

    /// Connects to the first reachable server of `options.servers` (each tried once).
    public static func connect(_ options: NATSClientOptions) async throws -> NATSClient {
        let client = try NATSClient(options: options)
        try await client.start()
        return client
    }

    func start() async throws {
        var lastError: any Error = NATSError.cannotConnect("no server")
        for (i, addr) in servers.enumerated() {
            do {
                serverIndex = i
                try await establish(addr)
                return
            } catch {
                lastError = error
            }
        }
        state = .closed
        broadcaster.finish()
        throw lastError
    }

    /// A new stream of connection events from now on (each access makes a new stream).
    public nonisolated var events: AsyncStream<NATSClientEvent> { broadcaster.makeStream() }

    /// A new stream of connection events from now on.
    public nonisolated func makeEventStream() -> AsyncStream<NATSClientEvent> { broadcaster.makeStream() }

    /// True while a connection is established.
    public var isConnected: Bool { state == .connected }

    /// The INFO of the server currently (or last) connected.
    public var serverInfo: NATSServerInfo? { info }

    /// The URL of the server currently (or last) connected.
    public var connectedServer: String? { currentServer?.description }

    /// Increases on every (re)connection; lets higher layers notice a reconnection.
    var connectionGeneration: UInt64 { generation }

    /// Returns once connected; throws ``NATSError/timeout`` after `timeout`, or
    /// ``NATSError/closed``.
    public func waitUntilConnected(timeout: Duration) async throws {
        try await waitForConnection(timeout: timeout, error: .timeout)
    }

    func waitForConnection(timeout: Duration, error: NATSError) async throws {
        if state == .connected { return }
        if state == .closed { throw NATSError.closed }
        let id = nextWaiterID
        nextWaiterID += 1
        let timer = Task { [weak self] in
            do { try await Task.sleep(for: timeout) } catch { return }
            await self?.failConnectionWaiter(id, error)
        }
        defer { timer.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                connectionWaiters[id] = c
            }
        } onCancel: {
            Task { await self.failConnectionWaiter(id, CancellationError()) }
        }
    }

    private func failConnectionWaiter(_ id: UInt64, _ error: any Error) {
        connectionWaiters.removeValue(forKey: id)?.resume(throwing: error)
    }

    // MARK: - Connection establishment

    /// Opens a connection and runs INFO → CONNECT, SUBs → PING → PONG.
    private func establish(_ address: ServerAddress) async throws {
        let conn = try await NATSConnection.connect(to: address, timeout: options.connectTimeout, tls: tls)
        if state == .closed {
            conn.close()
            throw NATSError.closed
        }
        generation += 1
        let gen = generation
        connection = conn
        connectSent = false
        pingsOutstanding = 0
        pongQueue = []
        Task { await self.readLoop(conn, generation: gen) }
        let timer = Task { [weak self] in
            do { try await Task.sleep(for: self?.options.connectTimeout ?? .seconds(2)) } catch { return }
            await self?.failHandshake(gen, NATSError.timeout)
        }
        defer { timer.cancel() }
        do {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                handshake = (gen, c)
            }
        } catch {
            conn.close()
            if generation == gen {
                connection = nil
                connectSent = false
            }
            throw error
        }
        guard state != .closed else {
            conn.close()
            throw NATSError.closed
        }
        let reconnected = everConnected
        everConnected = true
        state = .connected
        currentServer = address
        startPingTimer(gen)
        for (_, c) in connectionWaiters { c.resume() }
        connectionWaiters = [:]
        broadcaster.emit(reconnected ? .reconnected(server: address.description) : .connected(server: address.description))
    }

    private func failHandshake(_ gen: UInt64, _ error: any Error) {
        guard let h = handshake, h.generation == gen else { return }
        handshake = nil
        h.continuation.resume(throwing: error)
    }

    private func readLoop(_ conn: NATSConnection, generation gen: UInt64) async {
        var lastError: NATSError?
        for await event in conn.events {
            guard gen == generation else { break }
            switch event {
            case .op(let op): handle(op, conn: conn, generation: gen)
            case .failed(let e): lastError = e
            }
        }
        conn.close()
        connectionEnded(gen, error: lastError ?? .connectionLost)
    }

    private func handle(_ op: ServerOp, conn: NATSConnection, generation gen: UInt64) {
        switch op {
        case .msg(let m):
            deliver(m)
        case .ping:
            conn.write(ByteBuffer(string: "PONG\r\n"))
        case .pong:
            pingsOutstanding = 0
            if let h = handshake, h.generation == gen, connectSent {
                handshake = nil
                h.continuation.resume()
            } else if !pongQueue.isEmpty {
                let id = pongQueue.removeFirst()
                pongWaiters.removeValue(forKey: id)?.resume()
            }
        case .ok:
            break
        case .err(let text):
            if let h = handshake, h.generation == gen {
                handshake = nil
                h.continuation.resume(throwing: NATSError.handshakeError(text, server: conn.address))
            } else {
                permissionViolation(text)
            }
        case .info(let i):
            info = i
            for url in i.connectURLs {
                if let a = try? ServerAddress(parsing: url), !servers.contains(a) { servers.append(a) }
            }
            if let h = handshake, h.generation == gen, !connectSent {
                let line: String
                do {
                    line = try connectLine(info: i, tls: conn.address.tlsScheme || tls.upgrades(for: i))
                } catch {
                    handshake = nil
                    h.continuation.resume(throwing: error)
                    return
                }
                connectSent = true
                conn.write(ByteBuffer(string: line))
                var buf = ByteBuffer()
                for (sid, sub) in subscriptions.sorted(by: { $0.key < $1.key }) {
                    buf.writeString(subLine(sid: sid, subject: sub.subject, queue: sub.queue))
                }
                buf.writeString("PING\r\n")
                conn.write(buf)
            }
        }
    }

    /// CONNECT, with the credentials (never logged: this line is only written to the socket).
    private func connectLine(info: NATSServerInfo, tls: Bool) throws(NATSError) -> String {
        var fields = [#""verbose":false"#, #""pedantic":false"#, #""headers":true"#, #""no_responders":true"#,
                      #""protocol":1"#, #""lang":"swift""#, #""version":"0.1.0""#, #""echo":true"#,
                      #""tls_required":\#(tls)"#]
        if let name = options.name { fields.append(#""name":"# + jsonString(name)) }
        fields += try options.auth.connectFields(nonce: info.nonce)
        return "CONNECT {\(fields.joined(separator: ","))}\r\n"
    }

    func subLine(sid: UInt64, subject: String, queue: String?) -> String {
        if let queue { return "SUB \(subject) \(queue) \(sid)\r\n" }
        return "SUB \(subject) \(sid)\r\n"
    }

    private func connectionEnded(_ gen: UInt64, error: NATSError) {
        guard gen == generation else { return }
        failHandshake(gen, error)
        connection = nil
        connectSent = false
        pingTask?.cancel()
        pingTask = nil
        guard state == .connected else { return }
        state = .disconnected
        broadcaster.emit(.disconnected)
        failInFlight(with: .connectionLost)
        reconnectTask = Task { await self.reconnectLoop() }
    }

    /// Fails requests, flushes and disconnect-bound subscriptions.
    private func failInFlight(with error: NATSError) {
        for (token, c) in pendingRequests {
            requestTimers.removeValue(forKey: token)?.cancel()
            c.resume(throwing: error)
        }
        pendingRequests = [:]
        requestSubjects = [:]
        for (_, c) in pongWaiters { c.resume(throwing: error) }
        pongWaiters = [:]
        pongQueue = []
        for (sid, sub) in subscriptions where sub.endOnDisconnect {
            subscriptions.removeValue(forKey: sid)
            sub.continuation.finish(throwing: error)
        }
    }

    private func reconnectLoop() async {
        var attempts = 0
        var pass = 0
        while state == .disconnected, !Task.isCancelled {
            for _ in 0..<servers.count {
                if options.maxReconnectAttempts >= 0 && attempts >= options.maxReconnectAttempts {
                    await close()
                    return
                }
                attempts += 1
                serverIndex = (serverIndex + 1) % servers.count
                do {
                    try await establish(servers[serverIndex])
                    return
                } catch {
                    if state != .disconnected || Task.isCancelled { return }
                }
            }
            pass += 1
            let base = Double(options.reconnectWait.nanoseconds) * Double(1 << min(pass - 1, 6))
            let capped = min(base, 2e9)
            let jittered = capped * Double.random(in: 1.0...1.25)
            try? await Task.sleep(for: .nanoseconds(Int64(jittered)))
        }
    }

    private func startPingTimer(_ gen: UInt64) {
        pingTask?.cancel()
        let interval = options.pingInterval
        pingTask = Task { [weak self] in
            while !Task.isCancelled {
                do { try await Task.sleep(for: interval) } catch { return }
                guard let self, await self.sendPing(gen) else { return }
            }
        }
    }

    /// Sends a keep-alive PING; drops the connection after 2 unanswered ones.
    private func sendPing(_ gen: UInt64) -> Bool {
        guard gen == generation, state == .connected, let conn = connection else { return false }
        if pingsOutstanding >= 2 {
            conn.close()
            return false
        }
        pingsOutstanding += 1
        pongQueue.append(0)
        conn.write(ByteBuffer(string: "PING\r\n"))
        return true
    }

    /// Writes to the established connection.
    func send(_ buffer: ByteBuffer) throws(NATSError) {
        guard state == .connected, let conn = connection else { throw .notConnected }
        conn.write(buffer)
    }

    /// Closes the connection (after a best-effort flush) and ends every subscription,
    /// request and event stream. Idempotent.
    public func close() async {
        guard state != .closed else { return }
        if state == .connected { try? await flush(timeout: .seconds(1)) }
        guard state != .closed else { return }
        state = .closed
        reconnectTask?.cancel()
        pingTask?.cancel()
        if let h = handshake {
            handshake = nil
            h.continuation.resume(throwing: NATSError.closed)
        }
        failInFlight(with: .closed)
        for (_, c) in connectionWaiters { c.resume(throwing: NATSError.closed) }
        connectionWaiters = [:]
        for (_, sub) in subscriptions { sub.continuation.finish() }
        subscriptions = [:]
        connection?.close()
        connection = nil
        broadcaster.emit(.closed)
        broadcaster.finish()
    }
}
