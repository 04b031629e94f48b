public import Foundation

/// AWS credentials that sign requests (SigV4).
public struct AWSCredentials: Sendable, Hashable {
    /// The access key id (`AKIA…`, or `ASIA…` for temporary credentials).
    public var accessKeyID: String
    /// The secret key.
    public var secretAccessKey: String
    /// The session token of temporary credentials.
    public var sessionToken: String?
    /// When temporary credentials stop working.
    public var expiration: Date?

    /// Credentials.
    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, expiration: Date? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.expiration = expiration
    }
}

/// Where a client's credentials and identity come from.
public protocol CredentialsProvider: Sendable {
    /// Credentials valid for at least the next minute.
    func credentials() async throws -> AWSCredentials
    /// The identity the credentials are for (it can change after a login merged identities).
    func identityID() async throws -> String
}
