import NIOCore

extension NATSClient {
    /// Publishes a message.
    ///
    /// When the client is disconnected this waits for the reconnection up to
    /// ``NATSClientOptions/requestTimeout``, then throws ``NATSError/notConnected``.
    /// Throws ``NATSError/invalidSubject(_:)``, ``NATSError/invalidHeader(_:)`` or
    /// ``NATSError/payloadTooLarge(size:max:)`` before sending anything invalid.
    public func publish(_ subject: String, payload: [UInt8], headers: NATSHeaders? = nil,
                        replyTo: String? = nil) async throws {
        let buffer = try encodePublish(subject, replyTo: replyTo, headers: headers, payload: payload)
        if state != .connected {
            try await waitForConnection(timeout: options.requestTimeout, error: .notConnected)
        }
        try send(buffer)
    }

    /// Encodes PUB or HPUB after validating subject, reply, headers and size.
    func encodePublish(_ subject: String, replyTo: String?, headers: NATSHeaders?,
                       payload: [UInt8]) throws(NATSError) -> ByteBuffer {
        guard state != .closed else { throw .closed }
        try SubjectValidator.validate(subject, allowWildcards: false)
        if let replyTo { try SubjectValidator.validate(replyTo, allowWildcards: false) }
        let headerBytes = try headers.map { h throws(NATSError) in try h.encoded() }
        let total = (headerBytes?.count ?? 0) + payload.count
        let max = info?.maxPayload ?? 1_048_576
        if total > max { throw .payloadTooLarge(size: total, max: max) }
        var buffer = ByteBuffer()
        buffer.reserveCapacity(total + subject.utf8.count + 64)
        let reply = replyTo.map { " \($0)" } ?? ""
        if let headerBytes {
            buffer.writeString("HPUB \(subject)\(reply) \(headerBytes.count) \(total)\r\n")
            buffer.writeBytes(headerBytes)
        } else {
            buffer.writeString("PUB \(subject)\(reply) \(total)\r\n")
        }
        buffer.writeBytes(payload)
        buffer.writeString("\r\n")
        return buffer
    }

    /// Sends PING and waits for the PONG: everything written before has been processed by
    /// the server. Throws ``NATSError/timeout`` (default: the request time-out),
    /// ``NATSError/notConnected`` or ``NATSError/connectionLost``.
    public func flush(timeout: Duration? = nil) async throws {
        guard state == .connected, let conn = connection else {
            throw state == .closed ? NATSError.closed : NATSError.notConnected
        }
        let id = nextWaiterID
        nextWaiterID += 1
        let timer = Task { [weak self] in
            do { try await Task.sleep(for: timeout ?? self?.options.requestTimeout ?? .seconds(5)) } catch { return }
            await self?.failPongWaiter(id, NATSError.timeout)
        }
        defer { timer.cancel() }
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            pongWaiters[id] = c
            pongQueue.append(id)
            conn.write(ByteBuffer(string: "PING\r\n"))
        }
    }

    private func failPongWaiter(_ id: UInt64, _ error: any Error) {
        // The id stays in pongQueue so that its PONG is still matched to it.
        pongWaiters.removeValue(forKey: id)?.resume(throwing: error)
    }

    /// Sends a request and waits for the first reply.
    ///
    /// Replies come through one shared inbox subscription (`_INBOX.<random>.*`).
    /// Throws ``NATSError/noResponders`` when nobody listens on `subject`,
    /// ``NATSError/timeout`` after `timeout` (default ``NATSClientOptions/requestTimeout``),
    /// ``NATSError/connectionLost`` when the connection drops meanwhile, and
    /// ``NATSError/notConnected`` when disconnected for the whole time-out.
    public func request(_ subject: String, payload: [UInt8], headers: NATSHeaders? = nil,
                        timeout: Duration? = nil) async throws -> NATSMessage {
        let timeout = timeout ?? options.requestTimeout
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        try ensureMux()
        let token = NUID.next(12)
        let buffer = try encodePublish(subject, replyTo: muxPrefix + token, headers: headers, payload: payload)
        if state != .connected {
            try await waitForConnection(timeout: timeout, error: .notConnected)
        }
        let remaining = clock.now.duration(to: deadline)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<NATSMessage, any Error>) in
                pendingRequests[token] = c
                requestSubjects[token] = subject
                requestTimers[token] = Task { [weak self] in
                    do { try await Task.sleep(for: remaining) } catch { return }
                    await self?.failRequest(token, NATSError.timeout)
                }
                do { try send(buffer) } catch { failRequest(token, error) }
            }
        } onCancel: {
            Task { await self.failRequest(token, CancellationError()) }
        }
    }

    func failRequest(_ token: String, _ error: any Error) {
        requestSubjects.removeValue(forKey: token)
        requestTimers.removeValue(forKey: token)?.cancel()
        pendingRequests.removeValue(forKey: token)?.resume(throwing: error)
    }

    private func ensureMux() throws {
        guard muxSID == nil else { return }
        let sub = try makeSubscription(muxPrefix + "*", queue: nil, endOnDisconnect: false)
        muxSID = sub.sid
        muxSubscription = sub
    }

    /// A unique inbox subject.
    public nonisolated func newInbox() -> String {
        "_INBOX.\(NUID.next())"
    }
}
