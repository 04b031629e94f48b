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
    /// Messages are pulled on demand (at most 256 buffered), so a slow reader applies
    /// backpressure. Iterate from one task. Stopping the iteration leaves the consumer to
    /// be removed by the server after 30 s of inactivity (or when this sequence is released).
    public func orderedMessages(stream: String, startSequence: UInt64, filterSubject: String? = nil)
        -> AsyncThrowingStream<StoredMessage, any Error> {
        let state = OrderedConsumer(js: self, stream: stream, filterSubject: filterSubject,
                                    startSequence: max(1, startSequence), lastPerSubject: false)
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
    private var buffer: [JetStreamMessage] = []
    private var bufferIndex = 0
    private var needsReset = true
    private var failures = 0
    /// With `last_per_subject`: the stream's last sequence before the consumer was made;
    /// once the snapshot is delivered, later restarts begin after it at least.
    private var snapshotFloor: UInt64 = 0

    static let batch = 256
    static let longPoll: Duration = .seconds(5)

    init(js: JetStreamContext, stream: String, filterSubject: String?, startSequence: UInt64, lastPerSubject: Bool) {
        self.js = js
        self.stream = stream
        self.filterSubject = filterSubject
        self.nextSequence = startSequence
        self.initialPhase = lastPerSubject
    }

    deinit {
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
            while bufferIndex < buffer.count {
                let m = buffer[bufferIndex]
                bufferIndex += 1
                if let accepted = accept(m) { return accepted }
            }
            buffer = []
            bufferIndex = 0
            if !needsReset, await js.client.connectionGeneration != generation { needsReset = true }
            do {
                if needsReset { try await recreate() }
                guard let name = consumerName else { continue }
                var result = try await js.pull(stream: stream, consumer: name, batch: Self.batch,
                                               expires: js.timeout, noWait: true)
                if result.messages.isEmpty && result.end == .completed {
                    if initialPhase { endInitialPhase() }
                    result = try await js.pull(stream: stream, consumer: name, batch: 1,
                                               expires: Self.longPoll, noWait: false)
                }
                buffer = result.messages
                if result.end != .completed { needsReset = true }
                failures = 0
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
        buffer = []
        bufferIndex = 0
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
        let info = try await js.createConsumer(stream: stream, config: config)
        consumerName = info.name
        expectedConsumerSequence = 1
        needsReset = false
    }
}
