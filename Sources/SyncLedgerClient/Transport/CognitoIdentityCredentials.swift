public import AsyncHTTPClient
public import Foundation
import NIOHTTP1
import Synchronization
import SyncLedgerWire

/// Credentials from Cognito Identity's enhanced (simplified) flow against the same server:
/// `GetId` for an identity when none is cached, then `GetCredentialsForIdentity` with the
/// logins, unsigned, as the AWS SDKs' Cognito credentials providers do.
///
/// - Credentials are refreshed when less than 5 minutes remain before their expiration;
///   concurrent callers share one refresh.
/// - When the server answers with another identity than the cached one (a login merged it into
///   another), the provider switches to it and calls `onIdentityChange(old, new)` before
///   handing out the new credentials.
/// - As Android's provider does, a cached identity the server does not know
///   (`ResourceNotFoundException`) is dropped and `GetId` asked again, once. So is a cached
///   identity refused (`NotAuthorizedException`) while there are logins: `GetId` with the logins
///   finds the identity they prove (the one a merge kept).
///
/// Secrets, session tokens and login tokens are never logged nor put in errors.
public final class CognitoIdentityCredentials: CredentialsProvider {
    /// Called after the identity changed, with the old and the new identity id.
    public typealias IdentityChangeHandler = @Sendable (_ old: String, _ new: String) async -> Void
    /// The logins to send: provider name → token (empty for an unauthenticated identity).
    public typealias LoginsProvider = @Sendable () async throws -> [String: String]

    /// The identity pool.
    public let pool: String
    /// How long before their expiration credentials are refreshed.
    public static let refreshMargin: TimeInterval = 300

    private let endpoint: Result<HTTPEndpoint, SyncClientError>
    private let logins: LoginsProvider
    private let onIdentityChange: IdentityChangeHandler?
    private let client: HTTPClient
    private let timeout: Duration
    private let now: @Sendable () -> Date
    private let state: Mutex<State>

    private struct State {
        var identity: String?
        var credentials: AWSCredentials?
        /// The refresh under way, shared by every caller.
        var refresh: Task<(String, AWSCredentials), any Error>?
    }

    /// A provider for an identity of `pool` on the server at `endpoint`.
    ///
    /// - Parameters:
    ///   - endpoint: the server (`http://` or `https://`); any other URL makes every call throw
    ///     ``SyncClientError/invalidParameter(_:)``.
    ///   - pool: the identity pool id.
    ///   - identityID: an identity cached from an earlier run, if any (else `GetId` makes one).
    ///   - logins: the logins to send, asked at every refresh.
    ///   - onIdentityChange: called when the server moved the identity to another (a merge);
    ///     the provider already answers the new identity while it runs.
    ///   - httpClient: the AsyncHTTPClient to send with (by default
    ///     ``CognitoSyncTransport/defaultHTTPClient``).
    ///   - timeout: how long one call may take.
    public convenience init(endpoint: URL, pool: String, identityID: String? = nil, logins: @escaping LoginsProvider = { [:] },
                            onIdentityChange: IdentityChangeHandler? = nil, httpClient: HTTPClient = CognitoSyncTransport.defaultHTTPClient, timeout: Duration = .seconds(30)) {
        self.init(endpoint: endpoint, pool: pool, identityID: identityID, logins: logins, onIdentityChange: onIdentityChange,
                  httpClient: httpClient, timeout: timeout, now: { Date() })
    }

    /// The same with a clock (tests).
    init(endpoint: URL, pool: String, identityID: String?, logins: @escaping LoginsProvider, onIdentityChange: IdentityChangeHandler?,
         httpClient: HTTPClient, timeout: Duration, now: @escaping @Sendable () -> Date) {
        self.endpoint = HTTPEndpoint.parse(endpoint)
        self.pool = pool
        self.logins = logins
        self.onIdentityChange = onIdentityChange
        self.client = httpClient
        self.timeout = timeout
        self.now = now
        self.state = Mutex(State(identity: identityID))
    }

    /// The cached identity, or the one a refresh (GetId, GetCredentialsForIdentity) finds.
    public func identityID() async throws -> String {
        if let identity = state.withLock({ $0.identity }) { return identity }
        return try await refreshed().0
    }

    /// Credentials with more than 5 minutes left, refreshed when needed.
    public func credentials() async throws -> AWSCredentials {
        try await refreshed().1
    }

    /// Forgets the credentials (not the identity): the next call gets new ones, with the logins
    /// as they are then (after a login or logout).
    public func invalidate() {
        state.withLock { $0.credentials = nil }
    }

    /// The cached identity and credentials when still fresh, else those of the refresh under
    /// way or of a new one.
    private func refreshed() async throws -> (String, AWSCredentials) {
        enum Next { case ready(String, AWSCredentials), wait(Task<(String, AWSCredentials), any Error>) }
        let now = self.now()
        let next: Next = state.withLock { state in
            if let identity = state.identity, let credentials = state.credentials,
               credentials.expiration.map({ $0.timeIntervalSince(now) > Self.refreshMargin }) ?? true {
                return .ready(identity, credentials)
            }
            if let running = state.refresh { return .wait(running) }
            let task = Task { try await self.refresh() }
            state.refresh = task
            return .wait(task)
        }
        switch next {
        case .ready(let identity, let credentials): return (identity, credentials)
        case .wait(let task): return try await task.value
        }
    }

    /// One refresh: GetId if needed, GetCredentialsForIdentity, the identity switch.
    private func refresh() async throws -> (String, AWSCredentials) {
        do {
            let (old, identity, credentials) = try await fetch()
            state.withLock {
                $0.identity = identity
                $0.credentials = credentials
            }
            if let old, old != identity, let onIdentityChange { await onIdentityChange(old, identity) }
            state.withLock { $0.refresh = nil }
            return (identity, credentials)
        } catch {
            state.withLock { $0.refresh = nil }
            throw error
        }
    }

    private func fetch() async throws -> (old: String?, identity: String, credentials: AWSCredentials) {
        let endpoint = try self.endpoint.get()
        let logins: [String: String]
        do {
            logins = try await self.logins()
        } catch let error as SyncClientError {
            throw error
        } catch {
            throw SyncClientError.notAuthorized("the logins could not be had: \(type(of: error))")
        }
        let cached = state.withLock { $0.identity }
        var identity: String
        if let cached { identity = cached } else { identity = try await getID(endpoint, logins: logins) }
        var fresh = cached == nil
        while true {
            do {
                let (answered, credentials) = try await credentialsForIdentity(endpoint, identity: identity, logins: logins)
                return (cached, answered, credentials)
            } catch let error as SyncClientError where !fresh && Self.retriesWithGetID(error, logins: logins) {
                // The cached identity is gone (or was merged away): the one GetId finds now.
                identity = try await getID(endpoint, logins: logins)
                fresh = true
            }
        }
    }

    /// Whether a refusal of a cached identity is worth one GetId and a retry.
    private static func retriesWithGetID(_ error: SyncClientError, logins: [String: String]) -> Bool {
        switch error {
        case .notFound: true
        case .notAuthorized: !logins.isEmpty
        default: false
        }
    }

    // MARK: Calls

    private func getID(_ endpoint: HTTPEndpoint, logins: [String: String]) async throws -> String {
        let request = CognitoIdentity.GetIdRequest(identityPoolId: pool, logins: logins.isEmpty ? nil : logins)
        let answer = try await call(endpoint, "GetId", request, CognitoIdentity.GetIdResponse.self)
        guard let id = answer.identityId, !id.isEmpty else {
            throw SyncClientError.server(status: 200, type: "InvalidResponse", message: "GetId answered no IdentityId")
        }
        return id
    }

    private func credentialsForIdentity(_ endpoint: HTTPEndpoint, identity: String, logins: [String: String]) async throws -> (String, AWSCredentials) {
        let request = CognitoIdentity.GetCredentialsForIdentityRequest(identityId: identity, logins: logins.isEmpty ? nil : logins)
        let answer = try await call(endpoint, "GetCredentialsForIdentity", request, CognitoIdentity.GetCredentialsForIdentityResponse.self)
        guard let body = answer.credentials, let key = body.accessKeyId, let secret = body.secretKey, !key.isEmpty, !secret.isEmpty else {
            throw SyncClientError.server(status: 200, type: "InvalidResponse", message: "GetCredentialsForIdentity answered no Credentials")
        }
        let answered = answer.identityId.flatMap { $0.isEmpty ? nil : $0 } ?? identity
        return (answered, AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: body.sessionToken, expiration: body.expiration?.date))
    }

    /// `POST /` with `X-Amz-Target: AWSCognitoIdentityService.<operation>`, unsigned.
    private func call<Answer: Decodable>(_ endpoint: HTTPEndpoint, _ operation: String, _ request: some Encodable, _ answer: Answer.Type) async throws -> Answer {
        let answer = try await HTTPExchange.send(
            client, endpoint: endpoint, method: .POST, path: "/",
            headers: [("content-type", CognitoIdentity.contentType), ("x-amz-target", CognitoIdentity.target(operation))],
            body: try WireJSON.encode(request), timeout: timeout)
        guard (200..<300).contains(answer.status) else {
            throw AWSErrorBody(answer).clientError(status: answer.status)
        }
        return try decodeAnswer(Answer.self, answer, operation: operation)
    }
}
