public import Foundation

/// How a stream retains messages.
public enum RetentionPolicy: String, Codable, Sendable { case limits, interest, workqueue }
/// Where a stream stores messages.
public enum StorageType: String, Codable, Sendable { case file, memory }
/// What a full stream does with new messages.
public enum DiscardPolicy: String, Codable, Sendable { case old, new }

/// A JetStream stream's configuration (JSON keys as the JetStream API).
public struct StreamConfig: Codable, Sendable, Equatable {
    public var name: String
    public var subjects: [String]?
    public var retention: RetentionPolicy = .limits
    public var storage: StorageType = .file
    public var numReplicas: Int = 1
    public var maxMsgs: Int64?
    public var maxBytes: Int64?
    /// Maximum age of messages; nil or zero is unlimited. Sent as nanoseconds.
    public var maxAge: Duration?
    public var maxMsgSize: Int32?
    public var maxMsgsPerSubject: Int64?
    public var discard: DiscardPolicy?
    /// Window of message-id de-duplication. Sent as nanoseconds.
    public var duplicateWindow: Duration?
    public var allowDirect: Bool?
    public var denyDelete: Bool?
    public var denyPurge: Bool?
    public var allowRollupHdrs: Bool?

    public init(name: String, subjects: [String]? = nil, storage: StorageType = .file, numReplicas: Int = 1) {
        self.name = name
        self.subjects = subjects
        self.storage = storage
        self.numReplicas = numReplicas
    }

    enum CodingKeys: String, CodingKey {
        case name, subjects, retention, storage, discard
        case numReplicas = "num_replicas", maxMsgs = "max_msgs", maxBytes = "max_bytes", maxAge = "max_age"
        case maxMsgSize = "max_msg_size", maxMsgsPerSubject = "max_msgs_per_subject"
        case duplicateWindow = "duplicate_window", allowDirect = "allow_direct", denyDelete = "deny_delete"
        case denyPurge = "deny_purge", allowRollupHdrs = "allow_rollup_hdrs"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        subjects = try c.decodeIfPresent([String].self, forKey: .subjects)
        retention = try c.decodeIfPresent(RetentionPolicy.self, forKey: .retention) ?? .limits
        storage = try c.decodeIfPresent(StorageType.self, forKey: .storage) ?? .file
        numReplicas = try c.decodeIfPresent(Int.self, forKey: .numReplicas) ?? 1
        maxMsgs = try c.decodeIfPresent(Int64.self, forKey: .maxMsgs)
        maxBytes = try c.decodeIfPresent(Int64.self, forKey: .maxBytes)
        maxAge = try c.decodeIfPresent(Int64.self, forKey: .maxAge).map { .nanoseconds($0) }
        maxMsgSize = try c.decodeIfPresent(Int32.self, forKey: .maxMsgSize)
        maxMsgsPerSubject = try c.decodeIfPresent(Int64.self, forKey: .maxMsgsPerSubject)
        discard = try c.decodeIfPresent(DiscardPolicy.self, forKey: .discard)
        duplicateWindow = try c.decodeIfPresent(Int64.self, forKey: .duplicateWindow).map { .nanoseconds($0) }
        allowDirect = try c.decodeIfPresent(Bool.self, forKey: .allowDirect)
        denyDelete = try c.decodeIfPresent(Bool.self, forKey: .denyDelete)
        denyPurge = try c.decodeIfPresent(Bool.self, forKey: .denyPurge)
        allowRollupHdrs = try c.decodeIfPresent(Bool.self, forKey: .allowRollupHdrs)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encodeIfPresent(subjects, forKey: .subjects)
        try c.encode(retention, forKey: .retention)
        try c.encode(storage, forKey: .storage)
        try c.encode(numReplicas, forKey: .numReplicas)
        try c.encodeIfPresent(maxMsgs, forKey: .maxMsgs)
        try c.encodeIfPresent(maxBytes, forKey: .maxBytes)
        try c.encodeIfPresent(maxAge?.nanoseconds, forKey: .maxAge)
        try c.encodeIfPresent(maxMsgSize, forKey: .maxMsgSize)
        try c.encodeIfPresent(maxMsgsPerSubject, forKey: .maxMsgsPerSubject)
        try c.encodeIfPresent(discard, forKey: .discard)
        try c.encodeIfPresent(duplicateWindow?.nanoseconds, forKey: .duplicateWindow)
        try c.encodeIfPresent(allowDirect, forKey: .allowDirect)
        try c.encodeIfPresent(denyDelete, forKey: .denyDelete)
        try c.encodeIfPresent(denyPurge, forKey: .denyPurge)
        try c.encodeIfPresent(allowRollupHdrs, forKey: .allowRollupHdrs)
    }
}

/// A stream's counters.
public struct StreamState: Codable, Sendable, Equatable {
    public var messages: UInt64
    public var bytes: UInt64
    public var firstSeq: UInt64
    public var lastSeq: UInt64
    public var consumerCount: Int

    enum CodingKeys: String, CodingKey {
        case messages, bytes, firstSeq = "first_seq", lastSeq = "last_seq", consumerCount = "consumer_count"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        messages = try c.decodeIfPresent(UInt64.self, forKey: .messages) ?? 0
        bytes = try c.decodeIfPresent(UInt64.self, forKey: .bytes) ?? 0
        firstSeq = try c.decodeIfPresent(UInt64.self, forKey: .firstSeq) ?? 0
        lastSeq = try c.decodeIfPresent(UInt64.self, forKey: .lastSeq) ?? 0
        consumerCount = try c.decodeIfPresent(Int.self, forKey: .consumerCount) ?? 0
    }
}

/// A replica of a clustered stream or consumer.
public struct PeerInfo: Codable, Sendable, Equatable {
    public var name: String
    public var current: Bool
    public var offline: Bool?
    public var lag: UInt64?

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        current = try c.decodeIfPresent(Bool.self, forKey: .current) ?? false
        offline = try c.decodeIfPresent(Bool.self, forKey: .offline)
        lag = try c.decodeIfPresent(UInt64.self, forKey: .lag)
    }
}

/// Cluster placement of a stream or consumer.
public struct ClusterInfo: Codable, Sendable, Equatable {
    public var name: String?
    /// The `server_name` of the current leader.
    public var leader: String?
    /// The other replicas.
    public var replicas: [PeerInfo]?
}

/// A stream's configuration and state.
public struct StreamInfo: Codable, Sendable {
    public var config: StreamConfig
    public var state: StreamState
    public var cluster: ClusterInfo?
}

/// The acknowledgement of a JetStream publish.
public struct PubAck: Codable, Sendable, Equatable {
    /// The stream that stored the message.
    public var stream: String
    /// The message's stream sequence.
    public var sequence: UInt64
    /// True when the message id was already stored: nothing new was stored and
    /// `sequence` is the original message's.
    public var duplicate: Bool
    public var domain: String?

    enum CodingKeys: String, CodingKey { case stream, sequence = "seq", duplicate, domain }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        stream = try c.decode(String.self, forKey: .stream)
        sequence = try c.decode(UInt64.self, forKey: .sequence)
        duplicate = try c.decodeIfPresent(Bool.self, forKey: .duplicate) ?? false
        domain = try c.decodeIfPresent(String.self, forKey: .domain)
    }
}

/// A message read back from a stream.
public struct StoredMessage: Sendable {
    public var subject: String
    public var sequence: UInt64
    public var headers: NATSHeaders?
    public var payload: [UInt8]
    /// When the stream stored the message.
    public var time: Date

    public init(subject: String, sequence: UInt64, headers: NATSHeaders?, payload: [UInt8], time: Date) {
        self.subject = subject
        self.sequence = sequence
        self.headers = headers
        self.payload = payload
        self.time = time
    }
}

/// Parses RFC 3339 timestamps with up to nanosecond fractions (`2024-05-01T10:00:00.123456789Z`).
enum RFC3339 {
    static func parse(_ s: String) -> Date? {
        let b = Array(s.utf8)
        func num(_ from: Int, _ len: Int) -> Int? {
            guard from + len <= b.count else { return nil }
            var v = 0
            for i in from..<(from + len) {
                guard b[i] >= 48, b[i] <= 57 else { return nil }
                v = v * 10 + Int(b[i] - 48)
            }
            return v
        }
        guard let y = num(0, 4), let mo = num(5, 2), let d = num(8, 2), let h = num(11, 2),
              let mi = num(14, 2), let sec = num(17, 2) else { return nil }
        var i = 19
        var fraction = 0.0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
        }
        var offset = 0
        if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            guard let oh = num(i + 1, 2), let om = num(i + 4, 2) else { return nil }
            offset = (oh * 3600 + om * 60) * (b[i] == UInt8(ascii: "+") ? 1 : -1)
        }
        // Days from civil (Howard Hinnant's algorithm).
        let yy = mo <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        let seconds = days * 86400 + h * 3600 + mi * 60 + sec - offset
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }
}
