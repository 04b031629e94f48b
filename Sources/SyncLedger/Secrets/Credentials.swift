import Foundation
import LedgerStorage

/// An access key the server accepts (AWS Signature Version 4), kept in the ``SecretStore``.
/// Credentials are not log entries: they are secrets, not user data, and are never replicated,
/// exported or logged.
public struct Credential: Sendable, Hashable, Codable {
    /// What a credential may reach.
    public enum Scope: Sendable, Hashable, Codable, CustomStringConvertible {
        /// Every operation for every identity (Cognito's developer credentials).
        case admin
        /// Only this identity's datasets and devices.
        case identity(pool: String, identity: String)

        public var description: String {
            switch self {
            case .admin: "admin"
            case .identity(let pool, let identity): "identity \(identity) in pool \(pool)"
            }
        }
    }

    /// The access key id (`AKIA…`, or `ASIA…` when it has a session token).
    public let accessKeyID: String
    /// The secret access key.
    public let secretAccessKey: String
    /// A session token that requests must carry (`x-amz-security-token`), if any.
    public let sessionToken: String?
    /// What it may reach.
    public let scope: Scope
    /// When it was made.
    public let created: Timestamp
    /// When it stops working (temporary credentials, and an old key kept for a grace period
    /// after a rotation); nil: until revoked.
    public let expires: Timestamp?

    /// A credential.
    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, scope: Scope, created: Timestamp = .now, expires: Timestamp? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.scope = scope
        self.created = created
        self.expires = expires
    }

    /// Whether it has expired at `now`.
    public func isExpired(at now: Timestamp) -> Bool { expires.map { now >= $0 } ?? false }

    /// The same credential with another expiry.
    func expiring(at time: Timestamp?) -> Credential {
        Credential(accessKeyID: accessKeyID, secretAccessKey: secretAccessKey, sessionToken: sessionToken, scope: scope, created: created, expires: time)
    }

    /// How long a temporary credential (one with a session token) lives unless told otherwise.
    public static let defaultTemporaryLifetime: Duration = .seconds(3600)

    /// A fresh random credential. A credential with a session token is temporary: it expires
    /// after `lifetime` (default one hour), as AWS's temporary credentials do.
    public static func generate(scope: Scope, withSessionToken: Bool = false, lifetime: Duration? = nil, now: Timestamp = .now) -> Credential {
        let upper = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        let secretAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        var rng = SystemRandomNumberGenerator()
        let id = (withSessionToken ? "ASIA" : "AKIA") + String((0..<16).map { _ in upper.randomElement(using: &rng)! })
        let secret = String((0..<40).map { _ in secretAlphabet.randomElement(using: &rng)! })
        let token = withSessionToken ? String((0..<64).map { _ in secretAlphabet.randomElement(using: &rng)! }) : nil
        let life = lifetime ?? (withSessionToken ? defaultTemporaryLifetime : nil)
        let expires = life.map { now.adding($0) }
        return Credential(accessKeyID: id, secretAccessKey: secret, sessionToken: token, scope: scope, created: now, expires: expires)
    }

    /// Whether `id` is a well-formed access key id: 16-128 characters of A-Z and 0-9 (AWS's
    /// `[\w]+` pattern, as AWS generates them).
    public static func isValidAccessKeyID(_ id: String) -> Bool {
        (16...128).contains(id.utf8.count) && id.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F }
    }
}

extension Timestamp {
    /// This time moved by `duration`, saturating at the ends of time rather than trapping.
    public func adding(_ duration: Duration) -> Timestamp {
        let (sum, overflow) = milliseconds.addingReportingOverflow(duration.milliseconds)
        return Timestamp(milliseconds: overflow ? (duration > .zero ? .max : .min) : sum)
    }
}

