import NIOCore

/// The client's record of a live subscription.
struct SubscriptionState: Sendable {
    var subject: String
    var queue: String?
    var continuation: AsyncThrowingStream<NATSMessage, any Error>.Continuation
    /// Ended with ``NATSError/connectionLost`` when the connection drops (used by pulls).
    var endOnDisconnect: Bool
}

/// A subscription: an asynchronous sequence of the messages delivered to it, in order.
///
/// Each subscription buffers up to ``NATSClientOptions/subscriptionBufferLimit`` messages
/// (65 536 by default). When the buffer is full the subscription is dropped: it is
/// unsubscribed on the server and its sequence ends by throwing ``NATSError/slowConsumer(subject:)``.
/// A subscription survives reconnections (it is re-sent with the same sid). Its sequence ends
/// (without error) after ``unsubscribe()`` or ``NATSClient/close()``. Iterate it from one task only.
public final class NATSSubscription: AsyncSequence, Sendable {
    public typealias Element = NATSMessage

    /// The subject subscribed to.
    public let subject: String
    /// The queue group, if any.
    public let queue: String?
    let sid: UInt64
    private let client: NATSClient
    private let stream: AsyncThrowingStream<NATSMessage, any Error>

    init(client: NATSClient, sid: UInt64, subject: String, queue: String?,
         stream: AsyncThrowingStream<NATSMessage, any Error>) {
        self.client = client
        self.sid = sid
        self.subject = subject
        self.queue = queue
        self.stream = stream
    }

    /// Removes the subscription; its sequence ends after the messages already buffered.
    public func unsubscribe() async {
        await client.removeSubscription(sid)
    }

    deinit {
        let client = self.client
        let sid = self.sid
        Task { await client.removeSubscription(sid) }
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        /// Keeps the subscription (and so its server-side interest) alive while iterating.
        let subscription: NATSSubscription
        var base: AsyncThrowingStream<NATSMessage, any Error>.AsyncIterator

        public mutating func next() async throws -> NATSMessage? {
            try await base.next()
        }

        /// The next message, awaited on the caller's actor (an actor may keep the iterator).
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(any Error) -> NATSMessage? {
            try await base.next(isolation: actor)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(subscription: self, base: stream.makeAsyncIterator())
    }
}

extension NATSClient {
    /// Subscribes to `subject` (wildcards allowed), optionally in a queue group.
    ///
    /// The SUB is written at once when connected, else on (re)connection. Call ``flush(timeout:)``
    /// after subscribing when another connection must see the interest before it publishes.
    public func subscribe(_ subject: String, queue: String? = nil) async throws -> NATSSubscription {
        try makeSubscription(subject, queue: queue, endOnDisconnect: false)
    }

    func makeSubscription(_ subject: String, queue: String?, endOnDisconnect: Bool) throws -> NATSSubscription {
        try SubjectValidator.validate(subject)
        if let queue { try SubjectValidator.validateQueue(queue) }
        guard state != .closed else { throw NATSError.closed }
        let sid = nextSID
        nextSID += 1
        let (stream, continuation) = AsyncThrowingStream<NATSMessage, any Error>.makeStream(
            bufferingPolicy: .bufferingOldest(max(1, options.subscriptionBufferLimit)))
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { await self.removeSubscription(sid) }
        }
        subscriptions[sid] = SubscriptionState(subject: subject, queue: queue, continuation: continuation,
                                               endOnDisconnect: endOnDisconnect)
        if connectSent, let conn = connection {
            conn.write(ByteBuffer(string: subLine(sid: sid, subject: subject, queue: queue)))
        }
        return NATSSubscription(client: self, sid: sid, subject: subject, queue: queue, stream: stream)
    }

    func removeSubscription(_ sid: UInt64) {
        guard let sub = subscriptions.removeValue(forKey: sid) else { return }
        if connectSent, let conn = connection {
            conn.write(ByteBuffer(string: "UNSUB \(sid)\r\n"))
        }
        sub.continuation.finish()
    }

    /// Routes a MSG/HMSG to its request or subscription.
    func deliver(_ message: NATSMessage) {
        if message.sid == muxSID {
            guard message.subject.hasPrefix(muxPrefix) else { return }
            let token = String(message.subject.dropFirst(muxPrefix.count))
            guard let c = pendingRequests.removeValue(forKey: token) else { return }
            requestTimers.removeValue(forKey: token)?.cancel()
            requestSubjects.removeValue(forKey: token)
            if message.status == 503 {
                c.resume(throwing: NATSError.noResponders)
            } else {
                c.resume(returning: message)
            }
            return
        }
        guard let sub = subscriptions[message.sid] else { return }
        if case .dropped = sub.continuation.yield(message) {
            subscriptions.removeValue(forKey: message.sid)
            if connectSent, let conn = connection {
                conn.write(ByteBuffer(string: "UNSUB \(message.sid)\r\n"))
            }
            sub.continuation.finish(throwing: NATSError.slowConsumer(subject: sub.subject))
        }
    }
}
