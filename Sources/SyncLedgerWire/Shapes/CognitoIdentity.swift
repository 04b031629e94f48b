/// The Cognito Identity bodies (awsJson1_1: `POST /` with `X-Amz-Target:
/// AWSCognitoIdentityService.<Operation>`) of the operations a client signs in with, as botocore's
/// `cognito-identity` model (2014-06-30) defines them: PascalCase members, dates as epoch seconds.
/// Decode and encode them with ``WireJSON/decode(_:from:)`` and ``WireJSON/encode(_:)``.
public enum CognitoIdentity {
    /// The `X-Amz-Target` of `operation` (`GetId`, `GetCredentialsForIdentity`, …).
    public static func target(_ operation: String) -> String { "AWSCognitoIdentityService.\(operation)" }

    /// The content type of Cognito Identity's requests and answers.
    public static let contentType = "application/x-amz-json-1.1"

    /// GetId's request: the identity of these logins in the pool (a new one when none has them).
    public struct GetIdRequest: Codable, Sendable, Hashable {
        /// The AWS account (unused by SyncLedger).
        public var accountId: String?
        /// The identity pool (required).
        public var identityPoolId: String
        /// Provider name → token; none for an unauthenticated identity.
        public var logins: [String: String]?

        /// A request.
        public init(accountId: String? = nil, identityPoolId: String, logins: [String: String]? = nil) {
            self.accountId = accountId
            self.identityPoolId = identityPoolId
            self.logins = logins
        }

        enum CodingKeys: String, CodingKey { case accountId = "AccountId", identityPoolId = "IdentityPoolId", logins = "Logins" }
    }

    /// GetId's answer.
    public struct GetIdResponse: Codable, Sendable, Hashable {
        /// The identity.
        public var identityId: String?

        /// An answer.
        public init(identityId: String? = nil) { self.identityId = identityId }

        enum CodingKeys: String, CodingKey { case identityId = "IdentityId" }
    }

    /// GetCredentialsForIdentity's request: temporary credentials for an identity.
    public struct GetCredentialsForIdentityRequest: Codable, Sendable, Hashable {
        /// The identity (required).
        public var identityId: String
        /// The logins of an authenticated identity.
        public var logins: [String: String]?
        /// A role to assume (unused by SyncLedger).
        public var customRoleArn: String?

        /// A request.
        public init(identityId: String, logins: [String: String]? = nil, customRoleArn: String? = nil) {
            self.identityId = identityId
            self.logins = logins
            self.customRoleArn = customRoleArn
        }

        enum CodingKeys: String, CodingKey { case identityId = "IdentityId", logins = "Logins", customRoleArn = "CustomRoleArn" }
    }

    /// Temporary credentials (botocore's `Credentials`).
    public struct Credentials: Codable, Sendable, Hashable {
        /// The access key id.
        public var accessKeyId: String?
        /// The secret (never logged).
        public var secretKey: String?
        /// The session token to send with each request.
        public var sessionToken: String?
        /// When they expire.
        public var expiration: Timestamp?

        /// Credentials.
        public init(accessKeyId: String? = nil, secretKey: String? = nil, sessionToken: String? = nil, expiration: Timestamp? = nil) {
            self.accessKeyId = accessKeyId
            self.secretKey = secretKey
            self.sessionToken = sessionToken
            self.expiration = expiration
        }

        enum CodingKeys: String, CodingKey {
            case accessKeyId = "AccessKeyId", secretKey = "SecretKey", sessionToken = "SessionToken", expiration = "Expiration"
        }

        /// Decodes the JSON form; the expiration as epoch seconds.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            accessKeyId = try c.decodeIfPresent(String.self, forKey: .accessKeyId)
            secretKey = try c.decodeIfPresent(String.self, forKey: .secretKey)
            sessionToken = try c.decodeIfPresent(String.self, forKey: .sessionToken)
            expiration = try c.decodeEpochSeconds(forKey: .expiration)
        }

        /// Encodes the JSON form, leaving out what is nil; the expiration as epoch seconds.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeIfPresent(accessKeyId, forKey: .accessKeyId)
            try c.encodeIfPresent(secretKey, forKey: .secretKey)
            try c.encodeIfPresent(sessionToken, forKey: .sessionToken)
            try c.encodeEpochSeconds(expiration, forKey: .expiration)
        }
    }

    /// GetCredentialsForIdentity's answer: the identity (another one when it was merged away)
    /// and its credentials.
    public struct GetCredentialsForIdentityResponse: Codable, Sendable, Hashable {
        /// The identity the credentials are for.
        public var identityId: String?
        /// The credentials.
        public var credentials: Credentials?

        /// An answer.
        public init(identityId: String? = nil, credentials: Credentials? = nil) {
            self.identityId = identityId
            self.credentials = credentials
        }

        enum CodingKeys: String, CodingKey { case identityId = "IdentityId", credentials = "Credentials" }
    }
}
