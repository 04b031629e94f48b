import Foundation

/// Errors raised by the core NATS client.
public enum NATSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The connection to the server was lost while the operation was in flight.
    case connectionLost
    /// The client is not connected (and did not reconnect within the allowed time).
    case notConnected
    /// The operation did not complete in time.
    case timeout
    /// A request found no subscriber on its subject (status 503 from the server).
    case noResponders
    /// The client was closed.
    case closed
    /// The server sent something that is not valid NATS protocol.
    case protocolViolation(String)
    /// The server answered `-ERR`.
    case serverError(String)
    /// A payload (plus headers) exceeds the server's `max_payload`.
    case payloadTooLarge(size: Int, max: Int)
    /// A subject (or queue group name) is not valid.
    case invalidSubject(String)
    /// A header name or value is not valid (for example it contains CR or LF).
    case invalidHeader(String)
    /// A subscription's buffer filled up: the subscription was dropped.
    case slowConsumer(subject: String)
    /// No server could be reached.
    case cannotConnect(String)
    /// A server URL could not be parsed.
    case invalidURL(String)
    /// The server refused the credentials (`-ERR 'Authorization Violation'`), or asked for
    /// credentials and none were given. Names the server.
    case authorizationViolation(String)
    /// Credentials could not be used (an nkey seed that does not parse, a missing nonce).
    /// Never contains the secret.
    case invalidCredentials(String)
    /// Authentication failed for another reason the server gave (expired, timeout).
    case authenticationFailed(String)
    /// The server's certificate was not verified: not signed by a trusted CA, or not naming
    /// the server.
    case certificateUntrusted(String)
    /// The TLS handshake failed otherwise (for example the server refused the client certificate).
    case tlsHandshakeFailed(String)
    /// The client requires TLS and the server does not offer it.
    case tlsRequired(String)
    /// The server refused a publish or subscription under the user's permissions
    /// (`-ERR 'Permissions Violation for Publish to "…"'`): the request on that subject, or the
    /// subscription, fails with it.
    case permissionViolation(String)
    /// A TLS setting could not be used (a CA, certificate or key file that cannot be read).
    case tlsConfiguration(String)

    public var description: String {
        switch self {
        case .connectionLost: "NATS: connection lost"
        case .notConnected: "NATS: not connected"
        case .timeout: "NATS: timeout"
        case .noResponders: "NATS: no responders"
        case .closed: "NATS: client closed"
        case .protocolViolation(let s): "NATS: protocol violation: \(s)"
        case .serverError(let s): "NATS: server error: \(s)"
        case .payloadTooLarge(let size, let max): "NATS: payload of \(size) bytes exceeds max_payload \(max)"
        case .invalidSubject(let s): "NATS: invalid subject \(s.debugDescription)"
        case .invalidHeader(let s): "NATS: invalid header: \(s)"
        case .slowConsumer(let s): "NATS: slow consumer on \(s), subscription dropped"
        case .cannotConnect(let s): "NATS: cannot connect: \(s)"
        case .invalidURL(let s): "NATS: invalid server URL \(s.debugDescription)"
        case .authorizationViolation(let s):
            "NATS: authorization violation: \(s) refused the credentials (check the user and password, token or nkey, and the server's authorization settings)"
        case .invalidCredentials(let s): "NATS: invalid credentials: \(s)"
        case .authenticationFailed(let s): "NATS: authentication failed: \(s)"
        case .certificateUntrusted(let s): "NATS: TLS certificate verification failed: \(s)"
        case .tlsHandshakeFailed(let s): "NATS: TLS handshake failed: \(s)"
        case .tlsRequired(let s): "NATS: TLS required: \(s)"
        case .tlsConfiguration(let s): "NATS: TLS configuration: \(s)"
        case .permissionViolation(let s): "NATS: permissions violation: \(s) (the server's permissions for this user do not allow it)"
        }
    }
}

extension NATSError {
    /// A `-ERR` received before the connection was established, as a typed error.
    static func handshakeError(_ text: String, server: ServerAddress) -> NATSError {
        let lower = text.lowercased()
        if lower.contains("authorization violation") { return .authorizationViolation("\(server)") }
        if lower.contains("authentication") || lower.contains("user authentication") {
            return .authenticationFailed("\(server): \(text)")
        }
        if lower.contains("secure connection") || lower.contains("tls required") {
            return .tlsRequired("\(server): \(text)")
        }
        return .serverError(text)
    }
}

/// An error answered by the JetStream API (`{"error":{"code":..,"err_code":..,"description":..}}`).
public struct JetStreamAPIError: Error, Sendable, Equatable, Codable, CustomStringConvertible {
    /// The HTTP-like status code (400, 404, 503 …).
    public var code: Int
    /// The JetStream error code (`err_code`), e.g. 10071 for a wrong last sequence.
    public var errorCode: Int
    /// The server's description.
    public var description: String

    public init(code: Int, errorCode: Int, description: String) {
        self.code = code
        self.errorCode = errorCode
        self.description = description
    }

    enum CodingKeys: String, CodingKey {
        case code
        case errorCode = "err_code"
        case description
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        code = try c.decodeIfPresent(Int.self, forKey: .code) ?? 0
        errorCode = try c.decodeIfPresent(Int.self, forKey: .errorCode) ?? 0
        description = try c.decodeIfPresent(String.self, forKey: .description) ?? ""
    }

    /// 10071 (or, from a replicated stream when another publish expecting the same subject
    /// sequence is in flight, 10164 without the number): an expected last sequence (stream or
    /// subject) did not match.
    public var isWrongLastSequence: Bool { errorCode == 10071 || errorCode == 10164 }
    /// 10059: the stream does not exist.
    public var isStreamNotFound: Bool { errorCode == 10059 }
    /// 10037: no message was found.
    public var isMessageNotFound: Bool { errorCode == 10037 }
    /// 10014: the consumer does not exist.
    public var isConsumerNotFound: Bool { errorCode == 10014 }
    /// 10060: the expected stream name did not match.
    public var isStreamMismatch: Bool { errorCode == 10060 }

    /// The stream's actual last sequence when the server names it
    /// (the number after `wrong last sequence: ` in the description).
    public var currentLastSequence: UInt64? {
        guard isWrongLastSequence, let colon = description.lastIndex(of: ":") else { return nil }
        let digits = description[description.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        return UInt64(digits)
    }
}

/// Errors raised by the Key-Value store.
public enum KeyValueError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The key is not valid (`[-/_=.a-zA-Z0-9]+`, no leading or trailing dot).
    case invalidKey(String)
    /// The bucket name is not valid (`[-_a-zA-Z0-9]+`).
    case invalidBucket(String)
    /// `create` found the key present (not deleted) at `revision`.
    case keyExists(revision: UInt64?)
    /// `update`/`delete` was given a revision that is not the key's last one.
    /// `current` is the key's current revision when the server reports it.
    case wrongLastRevision(current: UInt64?)

    /// True for `wrongLastRevision` (JetStream error 10071).
    public var isWrongLastSequence: Bool {
        if case .wrongLastRevision = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .invalidKey(let k): "KV: invalid key \(k.debugDescription)"
        case .invalidBucket(let b): "KV: invalid bucket name \(b.debugDescription)"
        case .keyExists(let r): "KV: key exists (revision \(r.map(String.init) ?? "?"))"
        case .wrongLastRevision(let r): "KV: wrong last revision (current \(r.map(String.init) ?? "?"))"
        }
    }
}

extension Error {
    /// True when this error says an expected last (subject) sequence or revision did not match.
    public var isWrongLastSequence: Bool {
        if let e = self as? JetStreamAPIError { return e.isWrongLastSequence }
        if let e = self as? KeyValueError { return e.isWrongLastSequence }
        return false
    }
}
