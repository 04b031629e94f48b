public import Foundation

/// Credentials and an identity given once: a developer credential, or one minted with
/// `syncledger credentials create`.
public struct StaticCredentials: CredentialsProvider {
    /// The credentials every request is signed with.
    public let awsCredentials: AWSCredentials
    /// The identity whose datasets they reach.
    public let identity: String

    /// Fixed credentials for `identity`.
    public init(_ credentials: AWSCredentials, identityID: String) {
        self.awsCredentials = credentials
        self.identity = identityID
    }

    /// Fixed credentials for `identity`.
    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, identityID: String) {
        self.init(AWSCredentials(accessKeyID: accessKeyID, secretAccessKey: secretAccessKey, sessionToken: sessionToken), identityID: identityID)
    }

    /// The given credentials.
    public func credentials() async throws -> AWSCredentials { awsCredentials }

    /// The given identity.
    public func identityID() async throws -> String { identity }
}

/// Credentials from the AWS SDKs' environment variables: `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and, for temporary credentials, `AWS_SESSION_TOKEN`.
public struct EnvironmentCredentials: CredentialsProvider {
    /// The credentials read.
    public let awsCredentials: AWSCredentials
    /// The identity whose datasets they reach.
    public let identity: String

    private init(_ credentials: AWSCredentials, identity: String) {
        self.awsCredentials = credentials
        self.identity = identity
    }

    /// Reads the credentials from `environment` (by default the process's).
    ///
    /// - Parameter identityID: the identity whose datasets the credentials reach.
    /// - Throws: ``SyncClientError/notAuthorized(_:)`` when `AWS_ACCESS_KEY_ID` or
    ///   `AWS_SECRET_ACCESS_KEY` is missing or empty.
    public static func fromEnvironment(identityID: String,
                                       _ environment: [String: String] = ProcessInfo.processInfo.environment) throws(SyncClientError) -> EnvironmentCredentials {
        let missing = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"].filter { (environment[$0] ?? "").isEmpty }
        guard missing.isEmpty, let key = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"] else {
            throw .notAuthorized("no credentials in the environment: set \(missing.joined(separator: " and ")) (and AWS_SESSION_TOKEN for temporary credentials)")
        }
        let token = environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        return EnvironmentCredentials(AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: token), identity: identityID)
    }

    /// The given credentials.
    public func credentials() async throws -> AWSCredentials { awsCredentials }

    /// The given identity.
    public func identityID() async throws -> String { identity }
}

extension AWSCredentials: CustomStringConvertible, CustomDebugStringConvertible {
    /// The access key id only: the secret and the session token are never printed.
    public var description: String {
        "AWSCredentials(\(accessKeyID), secret: <redacted>\(sessionToken == nil ? "" : ", session token: <redacted>")\(expiration.map { ", expires \($0)" } ?? ""))"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }
}
