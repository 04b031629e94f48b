/// A message received from NATS.
public struct NATSMessage: Sendable {
    /// The subject the message was published to.
    public let subject: String
    /// The reply subject, when the publisher set one.
    public let replyTo: String?
    /// The headers (HMSG), nil for a plain MSG.
    public let headers: NATSHeaders?
    /// The payload.
    public let payload: [UInt8]
    /// The subscription id the server delivered the message for.
    let sid: UInt64

    init(subject: String, replyTo: String?, headers: NATSHeaders?, payload: [UInt8], sid: UInt64 = 0) {
        self.subject = subject
        self.replyTo = replyTo
        self.headers = headers
        self.payload = payload
        self.sid = sid
    }

    /// The status of the `NATS/1.0 <status>` header line (503 no responders, 404, 408 …).
    public var status: Int? { headers?.status }
    /// The description after the status code.
    public var statusDescription: String? { headers?.statusDescription }
    /// The payload decoded as UTF-8.
    public var string: String { String(decoding: payload, as: UTF8.self) }
}

/// The server's INFO.
public struct NATSServerInfo: Sendable, Codable, Equatable {
    public var serverID: String
    public var serverName: String?
    public var version: String
    public var proto: Int?
    public var host: String?
    public var port: Int?
    public var maxPayload: Int
    public var headers: Bool
    public var jetstream: Bool
    public var connectURLs: [String]
    public var clientID: UInt64?
    public var cluster: String?
    /// The server requires credentials in CONNECT.
    public var authRequired: Bool
    /// The server requires TLS (the client upgrades after this INFO).
    public var tlsRequired: Bool
    /// The server accepts TLS without requiring it.
    public var tlsAvailable: Bool
    /// What an nkey client signs.
    public var nonce: String?

    enum CodingKeys: String, CodingKey {
        case serverID = "server_id", serverName = "server_name", version, proto, host, port
        case maxPayload = "max_payload", headers, jetstream, connectURLs = "connect_urls"
        case clientID = "client_id", cluster
        case authRequired = "auth_required", tlsRequired = "tls_required", tlsAvailable = "tls_available", nonce
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        serverID = try c.decodeIfPresent(String.self, forKey: .serverID) ?? ""
        serverName = try c.decodeIfPresent(String.self, forKey: .serverName)
        version = try c.decodeIfPresent(String.self, forKey: .version) ?? ""
        proto = try c.decodeIfPresent(Int.self, forKey: .proto)
        host = try c.decodeIfPresent(String.self, forKey: .host)
        port = try c.decodeIfPresent(Int.self, forKey: .port)
        maxPayload = try c.decodeIfPresent(Int.self, forKey: .maxPayload) ?? 1_048_576
        headers = try c.decodeIfPresent(Bool.self, forKey: .headers) ?? false
        jetstream = try c.decodeIfPresent(Bool.self, forKey: .jetstream) ?? false
        connectURLs = try c.decodeIfPresent([String].self, forKey: .connectURLs) ?? []
        clientID = try c.decodeIfPresent(UInt64.self, forKey: .clientID)
        cluster = try c.decodeIfPresent(String.self, forKey: .cluster)
        authRequired = try c.decodeIfPresent(Bool.self, forKey: .authRequired) ?? false
        tlsRequired = try c.decodeIfPresent(Bool.self, forKey: .tlsRequired) ?? false
        tlsAvailable = try c.decodeIfPresent(Bool.self, forKey: .tlsAvailable) ?? false
        nonce = try c.decodeIfPresent(String.self, forKey: .nonce)
    }
}

enum SubjectValidator {
    /// A subject: non-empty tokens separated by dots; no whitespace, CR, LF or NUL.
    static func validate(_ subject: String, allowWildcards: Bool = true) throws(NATSError) {
        if subject.isEmpty { throw .invalidSubject(subject) }
        var tokenLength = 0
        for b in subject.utf8 {
            switch b {
            case 0, 9, 10, 13, 32, 127: throw .invalidSubject(subject)
            case UInt8(ascii: "."):
                if tokenLength == 0 { throw .invalidSubject(subject) }
                tokenLength = 0
            case UInt8(ascii: "*"), UInt8(ascii: ">"):
                if !allowWildcards { throw .invalidSubject(subject) }
                tokenLength += 1
            default: tokenLength += 1
            }
        }
        if tokenLength == 0 { throw .invalidSubject(subject) }
    }

    /// A queue group name: non-empty, no whitespace.
    static func validateQueue(_ queue: String) throws(NATSError) {
        if queue.isEmpty { throw .invalidSubject(queue) }
        for b in queue.utf8 where b <= 32 || b == 127 { throw .invalidSubject(queue) }
    }
}

/// Random tokens for inboxes.
enum NUID {
    private static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
    static func next(_ length: Int = 22) -> String {
        var g = SystemRandomNumberGenerator()
        return String(decoding: (0..<length).map { _ in alphabet[Int(g.next() % UInt64(alphabet.count))] }, as: UTF8.self)
    }
}

extension Duration {
    /// Whole nanoseconds (saturating).
    var nanoseconds: Int64 {
        let (s, a) = components
        let (m, o) = s.multipliedReportingOverflow(by: 1_000_000_000)
        if o { return s < 0 ? .min : .max }
        return m &+ a / 1_000_000_000
    }
}
