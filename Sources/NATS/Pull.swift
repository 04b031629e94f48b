import Foundation

extension JetStreamContext {
    private struct CreateConsumerRequest: Encodable {
        var streamName: String
        var config: ConsumerConfig
        enum CodingKeys: String, CodingKey { case streamName = "stream_name", config }
    }

    private struct SuccessResponse: Decodable { var success: Bool? }

    /// Creates (or, if identical, returns) a consumer on `stream`. A config without
    /// `durableName`/`name` makes an ephemeral consumer with a server-chosen name.
    @discardableResult
    public func createConsumer(stream: String, config: ConsumerConfig) async throws -> ConsumerInfo {
        let body = try Self.encode(CreateConsumerRequest(streamName: stream, config: config))
        if let name = config.name ?? config.durableName {
            return try await api("CONSUMER.CREATE.\(stream).\(name)", body: body)
        }
        return try await api("CONSUMER.CREATE.\(stream)", body: body)
    }

    /// Deletes a consumer.
    public func deleteConsumer(stream: String, consumer: String) async throws {
        let _: SuccessResponse = try await api("CONSUMER.DELETE.\(stream).\(consumer)")
    }

    /// A consumer's configuration and state, or nil when it does not exist (10014).
    public func consumerInfo(stream: String, consumer: String) async throws -> ConsumerInfo? {
        do {
            return try await api("CONSUMER.INFO.\(stream).\(consumer)")
        } catch let e as JetStreamAPIError where e.isConsumerNotFound {
            return nil
        }
    }

    /// Pulls up to `batch` messages from a pull consumer.
    ///
    /// Sends `{"batch":n,"expires":ns}` to `CONSUMER.MSG.NEXT.<stream>.<consumer>` with a fresh
    /// inbox, and returns when `batch` messages arrived, the server ends the pull (status 404,
    /// 408 or 409), or `expires` (plus a margin) passed. Returns an empty array when no message
    /// came. If the connection drops during the pull, the messages received so far are
    /// returned, or ``NATSError/connectionLost`` when there are none.
    public func fetch(stream: String, consumer: String, batch: Int, expires: Duration = .seconds(5))
        async throws -> [JetStreamMessage] {
        try await pull(stream: stream, consumer: consumer, batch: batch, expires: expires, noWait: false).messages
    }

    /// How a pull ended.
    enum PullEnd: Equatable {
        /// The batch was delivered, or the server ended the pull (404/408).
        case completed
        /// The server answered 409 (consumer deleted, leadership change …).
        case conflict(String)
        /// No terminal status before the deadline (lost pull request, server gone), or the
        /// connection dropped after some messages arrived.
        case deadline
    }

    /// Runs one pull request and collects its messages.
    /// With `noWait` the server answers at once with what it has (then 404).
    func pull(stream: String, consumer: String, batch: Int, expires: Duration, noWait: Bool)
        async throws -> (messages: [JetStreamMessage], end: PullEnd) {
        let client = self.client
        let inbox = client.newInbox()
        let sub = try await client.makeSubscription(inbox, queue: nil, endOnDisconnect: true)
        let deadlineHit = DeadlineFlag()
        let timer = Task {
            do { try await Task.sleep(for: expires + .seconds(1)) } catch { return }
            deadlineHit.set()
            await sub.unsubscribe()
        }
        defer {
            timer.cancel()
            Task { await sub.unsubscribe() }
        }
        let body = noWait
            ? "{\"batch\":\(max(1, batch)),\"no_wait\":true}"
            : "{\"batch\":\(max(1, batch)),\"expires\":\(expires.nanoseconds)}"
        try await client.publish("\(apiPrefix).CONSUMER.MSG.NEXT.\(stream).\(consumer)",
                                 payload: Array(body.utf8), replyTo: inbox)
        var out: [JetStreamMessage] = []
        do {
            for try await message in sub {
                if let status = message.status {
                    switch status {
                    case 100: continue
                    case 404, 408: return (out, .completed)
                    case 409: return (out, .conflict(message.statusDescription ?? "409"))
                    default:
                        throw JetStreamAPIError(code: status, errorCode: 0,
                                                description: message.statusDescription ?? "pull failed with status \(status)")
                    }
                }
                out.append(try JetStreamMessage(message, client: client))
                if out.count >= batch { return (out, .completed) }
            }
        } catch NATSError.connectionLost {
            if out.isEmpty { throw NATSError.connectionLost }
            return (out, .deadline)
        }
        return (out, deadlineHit.isSet ? .deadline : .completed)
    }
}

/// A flag set once from another task.
final class DeadlineFlag: Sendable {
    private let box = NIOLockedValueBoxBool()
    func set() { box.set() }
    var isSet: Bool { box.get() }
}
