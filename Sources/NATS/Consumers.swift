public import Foundation

/// Where a consumer starts.
public enum DeliverPolicy: String, Codable, Sendable {
    case all, last, new
    case byStartSequence = "by_start_sequence"
    case byStartTime = "by_start_time"
    case lastPerSubject = "last_per_subject"
}

/// How a consumer's messages are acknowledged.
public enum AckPolicy: String, Codable, Sendable { case none, all, explicit }

/// A consumer's configuration (JSON keys as the JetStream API).
public struct ConsumerConfig: Codable, Sendable, Equatable {
    /// A durable name (the consumer survives inactivity); nil for an ephemeral consumer.
    public var durableName: String?
    /// The consumer's name (defaults to `durableName`, or a server-chosen name).
    public var name: String?
    public var deliverPolicy: DeliverPolicy = .all
    /// The first stream sequence with ``DeliverPolicy/byStartSequence``.
    public var optStartSeq: UInt64?
    public var ackPolicy: AckPolicy = .explicit
    /// How long the server waits for an ack before redelivering. Sent as nanoseconds.
    public var ackWait: Duration?
    public var maxDeliver: Int?
    public var filterSubject: String?
    /// An idle consumer is deleted after this long. Sent as nanoseconds.
    public var inactiveThreshold: Duration?
    public var memStorage: Bool?
    public var numReplicas: Int?
    public var maxAckPending: Int?
    public var headersOnly: Bool?
    public var replayPolicy: String = "instant"

    public init(durableName: String? = nil, deliverPolicy: DeliverPolicy = .all, ackPolicy: AckPolicy = .explicit) {
        self.durableName = durableName
        self.deliverPolicy = deliverPolicy
        self.ackPolicy = ackPolicy
    }

    enum CodingKeys: String, CodingKey {
        case durableName = "durable_name", name, deliverPolicy = "deliver_policy", optStartSeq = "opt_start_seq"
        case ackPolicy = "ack_policy", ackWait = "ack_wait", maxDeliver = "max_deliver"
        case filterSubject = "filter_subject", inactiveThreshold = "inactive_threshold"
        case memStorage = "mem_storage", numReplicas = "num_replicas", maxAckPending = "max_ack_pending"
        case headersOnly = "headers_only", replayPolicy = "replay_policy"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        durableName = try c.decodeIfPresent(String.self, forKey: .durableName)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        deliverPolicy = try c.decodeIfPresent(DeliverPolicy.self, forKey: .deliverPolicy) ?? .all
        optStartSeq = try c.decodeIfPresent(UInt64.self, forKey: .optStartSeq)
        ackPolicy = try c.decodeIfPresent(AckPolicy.self, forKey: .ackPolicy) ?? .explicit
        ackWait = try c.decodeIfPresent(Int64.self, forKey: .ackWait).map { .nanoseconds($0) }
        maxDeliver = try c.decodeIfPresent(Int.self, forKey: .maxDeliver)
        filterSubject = try c.decodeIfPresent(String.self, forKey: .filterSubject)
        inactiveThreshold = try c.decodeIfPresent(Int64.self, forKey: .inactiveThreshold).map { .nanoseconds($0) }
        memStorage = try c.decodeIfPresent(Bool.self, forKey: .memStorage)
        numReplicas = try c.decodeIfPresent(Int.self, forKey: .numReplicas)
        maxAckPending = try c.decodeIfPresent(Int.self, forKey: .maxAckPending)
        headersOnly = try c.decodeIfPresent(Bool.self, forKey: .headersOnly)
        replayPolicy = try c.decodeIfPresent(String.self, forKey: .replayPolicy) ?? "instant"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(durableName, forKey: .durableName)
        try c.encodeIfPresent(name, forKey: .name)
        try c.encode(deliverPolicy, forKey: .deliverPolicy)
        try c.encodeIfPresent(optStartSeq, forKey: .optStartSeq)
        try c.encode(ackPolicy, forKey: .ackPolicy)
        try c.encodeIfPresent(ackWait?.nanoseconds, forKey: .ackWait)
        try c.encodeIfPresent(maxDeliver, forKey: .maxDeliver)
        try c.encodeIfPresent(filterSubject, forKey: .filterSubject)
        try c.encodeIfPresent(inactiveThreshold?.nanoseconds, forKey: .inactiveThreshold)
        try c.encodeIfPresent(memStorage, forKey: .memStorage)
        try c.encodeIfPresent(numReplicas, forKey: .numReplicas)
        try c.encodeIfPresent(maxAckPending, forKey: .maxAckPending)
        try c.encodeIfPresent(headersOnly, forKey: .headersOnly)
        try c.encode(replayPolicy, forKey: .replayPolicy)
    }
}

/// Sequence pair of a consumer's progress.
public struct SequenceInfo: Codable, Sendable, Equatable {
    public var consumerSeq: UInt64
    public var streamSeq: UInt64
    enum CodingKeys: String, CodingKey { case consumerSeq = "consumer_seq", streamSeq = "stream_seq" }
}

/// A consumer's configuration and state.
public struct ConsumerInfo: Codable, Sendable {
    public var streamName: String
    public var name: String
    public var config: ConsumerConfig
    public var delivered: SequenceInfo?
    public var ackFloor: SequenceInfo?
    public var numAckPending: Int?
    public var numRedelivered: Int?
    public var numWaiting: Int?
    public var numPending: UInt64?
    public var cluster: ClusterInfo?

    enum CodingKeys: String, CodingKey {
        case streamName = "stream_name", name, config, delivered, ackFloor = "ack_floor"
        case numAckPending = "num_ack_pending", numRedelivered = "num_redelivered", numWaiting = "num_waiting"
        case numPending = "num_pending", cluster
    }
}

/// Where a consumed message comes from, parsed from its `$JS.ACK…` reply subject.
public struct JetStreamMessageMetadata: Sendable, Equatable {
    public var domain: String?
    public var stream: String
    public var consumer: String
    /// How many times this message was delivered (1 the first time).
    public var delivered: UInt64
    public var streamSequence: UInt64
    public var consumerSequence: UInt64
    public var timestamp: Date
    /// Messages left for the consumer after this one.
    public var pending: UInt64

    /// Parses `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` and the v2
    /// form `$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]`.
    public init?(replySubject: String) {
        let t = replySubject.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard t.count >= 9, t[0] == "$JS", t[1] == "ACK" else { return nil }
        let base: Int
        if t.count == 9 {
            base = 2
            domain = nil
        } else if t.count >= 11 {
            base = 4
            domain = t[2] == "_" ? nil : t[2]
        } else {
            return nil
        }
        guard let d = UInt64(t[base + 2]), let s = UInt64(t[base + 3]), let c = UInt64(t[base + 4]),
              let ts = UInt64(t[base + 5]), let p = UInt64(t[base + 6]) else { return nil }
        stream = t[base]
        consumer = t[base + 1]
        delivered = d
        streamSequence = s
        consumerSequence = c
        timestamp = Date(timeIntervalSince1970: Double(ts) / 1e9)
        pending = p
    }
}

/// A message delivered by a consumer, with its metadata and acknowledgement methods.
public struct JetStreamMessage: Sendable {
    public let subject: String
    public let headers: NATSHeaders?
    public let payload: [UInt8]
    /// The `$JS.ACK…` subject acknowledgements go to.
    public let replyTo: String
    public let metadata: JetStreamMessageMetadata
    let client: NATSClient

    init(_ message: NATSMessage, client: NATSClient) throws {
        guard let reply = message.replyTo, let metadata = JetStreamMessageMetadata(replySubject: reply) else {
            throw NATSError.protocolViolation("JetStream message without a $JS.ACK reply subject")
        }
        subject = message.subject
        headers = message.headers
        payload = message.payload
        replyTo = reply
        self.metadata = metadata
        self.client = client
    }

    /// The message as a ``StoredMessage`` (stream sequence and storage time).
    public var stored: StoredMessage {
        StoredMessage(subject: subject, sequence: metadata.streamSequence, headers: headers, payload: payload,
                      time: metadata.timestamp)
    }

    /// Acknowledges the message (`+ACK`).
    public func ack() async throws { try await client.publish(replyTo, payload: Array("+ACK".utf8)) }

    /// Acknowledges and waits for the server's confirmation.
    public func ackSync(timeout: Duration? = nil) async throws {
        _ = try await client.request(replyTo, payload: Array("+ACK".utf8), timeout: timeout)
    }

    /// Asks for redelivery (`-NAK`), after `delay` when given.
    public func nak(delay: Duration? = nil) async throws {
        let body = delay.map { "-NAK {\"delay\":\($0.nanoseconds)}" } ?? "-NAK"
        try await client.publish(replyTo, payload: Array(body.utf8))
    }

    /// Stops redelivery of this message (`+TERM`).
    public func term() async throws { try await client.publish(replyTo, payload: Array("+TERM".utf8)) }

    /// Resets the ack wait timer (`+WPI`).
    public func inProgress() async throws { try await client.publish(replyTo, payload: Array("+WPI".utf8)) }
}
