import Foundation

extension JetStreamContext {
    /// Tails `stream` from `startSequence`, in stream order, never skipping nor repeating a
    /// message — across reconnections, server restarts and leader changes.
    ///
    /// Built on ephemeral pull consumers (ack none, memory storage, one replica,
    /// deliver `by_start_sequence`). Each delivered message's consumer sequence must be the
    /// next one and its stream sequence must grow; on a gap, a 409 (consumer deleted,
    /// leadership change), a lost pull or a reconnection, the consumer is deleted and recreated
    /// from the sequence after the last message handed out. Transient errors (time-outs, no
    /// responders, disconnections) are retried with a backoff; the sequence throws only when the
    /// stream keeps failing with a JetStream API error (e.g. the stream was deleted).
    ///
    /// One pull request of up to 256 messages stays open for 5 s and delivers messages as they
    /// arrive, through one reply subscription for the consumer's life (no subscription or
    /// request per message); at most 256 are buffered, so a slow reader applies backpressure. Iterate from one task. Stopping the iteration leaves the consumer to
    /// be removed by the server after 30 s of inactivity (or when this sequence is released).
    ///
    /// - Parameter pullExpiry: how long one pull request stays open on a quiet stream (5 s).
    public func orderedMessages(stream: String, startSequence: UInt64, filterSubject: String? = nil,
                                pullExpiry: Duration = .seconds(5))
        -> AsyncThrowingStream<StoredMessage, any Error> {
        let state = OrderedConsumer(js: self, stream: stream, filterSubject: filterSubject,
                                    startSequence: max(1, startSequence), lastPerSubject: false, longPoll: pullExpiry)
        return AsyncThrowingStream(unfolding: { try await state.next()?.stored })
    }
}

/// The state of one ordered consumer (see ``JetStreamContext/orderedMessages(stream:startSequence:filterSubject:)``).
actor OrderedConsumer {
    let js: JetStreamContext
    let stream: String
    let filterSubject: String?
    /// The next stream sequence to deliver (every lower one was handed out or skipped by the filter).
    private var nextSequence: UInt64
    /// True until the initial `last_per_subject` snapshot has been delivered.
    private var initialPhase: Bool
    private var consumerName: String?
    private var expectedConsumerSequence: UInt64 = 1
    private var generation: UInt64 = 0
    private var needsReset = true
    private var failures = 0
    /// With `last_per_subject`: the stream's last sequence before the consumer was made;
    /// once the snapshot is delivered, later restarts begin after it at least.
    private var snapshotFloor: UInt64 = 0

    /// The consumer's replies: one subscription to `<inbox>.*` for as long as the consumer
    /// lives; pull request n is sent with the reply subject `<inbox>.n`, so a late status of an
    /// earlier request is told apart (data messages carry their own subject, and only one
    /// request is outstanding at a time).
    private var inbox = ""
    private var replies: NATSSubscription?
    private var iterator: NATSSubscription.AsyncIterator?
    /// The number of the outstanding pull request, and how many messages it may still deliver
    /// (0: none outstanding).
    private var request: UInt64 = 0
    private var remaining = 0
    /// When the outstanding request was sent, and since when ``next()`` has been waiting for a
    /// reply (nil: it is not waiting — busy with its caller, who may be slow).
    private var requestSent = ContinuousClock.now
    private var waitingSince: ContinuousClock.Instant?
    private var deadline: Task<Void, Never>?

    /// Messages one pull request asks for. The server delivers them as they arrive, so one
    /// request serves a quiet stream for ``longPoll`` and a busy one for this many messages.
    static let batch = 256
    /// How long a pull request stays open on a quiet stream, by default.
    static let longPoll: Duration = .seconds(5)
    let longPoll: Duration

    init(js: JetStreamContext, stream: String, filterSubject: String?, startSequence: UInt64, lastPerSubject: Bool,
         longPoll: Duration = OrderedConsumer.longPoll) {
        self.longPoll = longPoll
        self.js = js
        self.stream = stream
        self.filterSubject = filterSubject
        self.nextSequence = startSequence
        self.initialPhase = lastPerSubject
    }

    deinit {
        deadline?.cancel()
        if let name = consumerName {
            let js = self.js, stream = self.stream
            Task { try? await js.deleteConsumer(stream: stream, consumer: name) }
        }
    }

    /// True while the initial snapshot (last per subject) is being delivered.
    var isInitialPhase: Bool { initialPhase }

    /// The next message, waiting for one when the stream has none yet.
    func next() async throws -> JetStreamMessage? {
        while true {
            try Task.checkCancellation()
            if !needsReset, await js.client.connectionGeneration != generation { needsReset = true }
            do {
                if needsReset { try await recreate() }
                if remaining == 0 { try await pullMore() }
                guard var replies = iterator else {
                    needsReset = true
                    continue
                }
                waitingSince = .now
                let received = try await replies.next(isolation: self)
                waitingSince = nil
                iterator = replies
                guard let message = received else {
                    // The request's deadline passed with no word from the server (a lost
                    // request, a consumer gone with its server): start over.
                    needsReset = true
                    try await backoff()
                    continue
                }
                if let status = message.status {
                    // Statuses come on the request's own reply subject; an earlier one's is stale.
                    guard message.subject == replySubject(request) else { continue }
                    switch status {
                    case 100:
                        continue
                    case 404, 408:
                        // No message now (no_wait), or the request expired: ask again.
                        if initialPhase { endInitialPhase() }
                        finishRequest()
                    case 409:
                        // Consumer deleted, leadership change, …: recreate it, after a pause
                        // (a 409 that comes back every time must not spin).
                        needsReset = true
                        failures += 1
                        try await backoff()
                    default:
                        throw JetStreamAPIError(code: status, errorCode: 0,
                                                description: message.statusDescription ?? "pull failed with status \(status)")
                    }
                    continue
                }
                let m = try JetStreamMessage(message, client: js.client)
                remaining -= 1
                if remaining == 0 { finishRequest() }
                failures = 0
                if let accepted = accept(m) { return accepted }
            } catch let error as JetStreamAPIError where error.code < 500 && !error.isConsumerNotFound {
                failures += 1
                needsReset = true
                if failures >= 20 { throw error }
                try await backoff()
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                failures += 1
                needsReset = true
                try await backoff()
            }
        }
    }

    private func replySubject(_ n: UInt64) -> String { "\(inbox).\(n)" }

    /// Sends the next pull request: during the initial snapshot `no_wait` (answered 404 once
    /// the snapshot is out), else one that stays open for ``longPoll``. Its deadline (the
    /// expiry plus a second) ends the replies' sequence if the server never ends the request —
    /// judged only while this consumer waits for a reply and has heard nothing for a second, so
    /// a reader slower than the request's expiry (its replies, 408 included, waiting in the
    /// subscription's buffer) never costs a reset.
    private func pullMore() async throws {
        guard let name = consumerName else { throw NATSError.timeout }
        request += 1
        remaining = Self.batch
        let n = request
        let expires = initialPhase ? js.timeout : longPoll
        let body = initialPhase
            ? "{\"batch\":\(Self.batch),\"no_wait\":true}"
            : "{\"batch\":\(Self.batch),\"expires\":\(expires.nanoseconds)}"
        requestSent = .now
        deadline?.cancel()
        deadline = Task { [weak self] in
            var due = ContinuousClock.now + expires + .seconds(1)
            while true {
                do { try await Task.sleep(until: due) } catch { return }
                guard let again = await self?.expire(n, after: expires + .seconds(1)) else { return }
                due = again
            }
        }
        try await js.client.publish("\(js.apiPrefix).CONSUMER.MSG.NEXT.\(stream).\(name)",
                                    payload: Array(body.utf8), replyTo: replySubject(n))
    }

    /// The outstanding request is done (its batch delivered, or the server ended it).
    private func finishRequest() {
        remaining = 0
        deadline?.cancel()
        deadline = nil
    }

    /// Request `n`'s deadline (`limit` after it was sent) passed. If it is still outstanding
    /// and this consumer has waited for a reply for a second or more, the consumer is given up
    /// (reset) and its replies end; if it is busy with its caller, or began waiting just now,
    /// it is looked at again a second later. - Returns: when to look again, or nil.
    private func expire(_ n: UInt64, after limit: Duration) async -> ContinuousClock.Instant? {
        guard n == request, remaining > 0, let replies else { return nil }
        let now = ContinuousClock.now
        guard now - requestSent >= limit, let since = waitingSince, now - since >= .seconds(1) else {
            return now + .seconds(1)
        }
        // Decided before the suspension below: a late reply handled meanwhile cannot carry on
        // on the subscription about to end.
        needsReset = true
        await replies.unsubscribe()
        return nil
    }

    private func backoff() async throws {
        let ms = min(1000, 50 << min(failures, 5))
        try await Task.sleep(for: .milliseconds(ms))
    }

    /// Checks continuity; returns the message to hand out, or nil to skip it.
    private func accept(_ m: JetStreamMessage) -> JetStreamMessage? {
        let md = m.metadata
        guard md.consumer == consumerName, !needsReset else { return nil }
        if md.consumerSequence != expectedConsumerSequence {
            if md.consumerSequence > expectedConsumerSequence {
                needsReset = true // a gap: start over from nextSequence
            }
            return nil
        }
        expectedConsumerSequence += 1
        guard md.streamSequence >= nextSequence else { return nil } // already handed out
        nextSequence = md.streamSequence + 1
        if md.pending == 0 && initialPhase { endInitialPhase() }
        return m
    }

    private func endInitialPhase() {
        initialPhase = false
        nextSequence = max(nextSequence, snapshotFloor + 1)
    }

    private func recreate() async throws {
        if let old = consumerName {
            let js = self.js, stream = self.stream
            Task { try? await js.deleteConsumer(stream: stream, consumer: old) }
        }
        consumerName = nil
        finishRequest()
        if let old = replies { await old.unsubscribe() }
        replies = nil
        iterator = nil
        generation = await js.client.connectionGeneration
        if initialPhase {
            guard let info = try await js.streamInfo(stream) else {
                throw JetStreamAPIError(code: 404, errorCode: 10059, description: "stream not found")
            }
            snapshotFloor = info.state.lastSeq
        }
        var config = ConsumerConfig(deliverPolicy: initialPhase ? .lastPerSubject : .byStartSequence, ackPolicy: .none)
        config.name = "oc_\(NUID.next(16))"
        if !initialPhase { config.optStartSeq = nextSequence }
        config.filterSubject = filterSubject
        config.memStorage = true
        config.numReplicas = 1
        config.inactiveThreshold = .seconds(30)
        inbox = js.client.newInbox()
        let subscription = try await js.client.makeSubscription(inbox + ".*", queue: nil, endOnDisconnect: true)
        replies = subscription
        iterator = subscription.makeAsyncIterator()
        let info = try await js.createConsumer(stream: stream, config: config)
        consumerName = info.name
        expectedConsumerSequence = 1
        needsReset = false
    }
}
