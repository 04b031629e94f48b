import Foundation

/// What the tokens of a `Logins` map proved.
public struct VerifiedLogins: Sendable, Hashable {
    /// The identity this server's own OpenID token (`cognito-identity.amazonaws.com`) proved.
    public var proven: String?
    /// The logins OpenID Connect tokens proved, sorted.
    public var logins: [Login]
}

extension Ledger {
    /// The provider names under which this server's own OpenID tokens come back (Cognito's,
    /// and its China region's, which the Android SDK uses there).
    public static let ownProviderNames: Set<String> = [openIdProvider, "cognito-identity.cn-north-1.amazonaws.com.cn"]

    /// Verifies every token of a `Logins` map (provider → token) for identity pool `pool`.
    ///
    /// - `cognito-identity.amazonaws.com`: an OpenID token this server signed for an identity
    ///   of this pool (GetOpenIdToken, GetOpenIdTokenForDeveloperIdentity).
    /// - A provider of the pool's `OpenIdConnectProviderARNs` or `SupportedLoginProviders` that
    ///   is configured as an OpenID Connect provider: its token's signature, issuer, audience
    ///   and expiry (``verifyOpenIDToken(provider:token:audiences:)``).
    ///
    /// Async because the tokens are verified by jwt-kit, whose key collection is an actor; it
    /// runs in the API layer before the sign-in's write, never inside a transaction.
    ///
    /// - Throws: `.notAuthorized` naming the provider for the first token that does not
    ///   verify, a provider the pool does not have, or the developer provider (whose users
    ///   prove themselves with this server's token).
    public func verifyLogins(pool: IdentityPoolID, _ logins: [String: String]) async throws -> VerifiedLogins {
        let definition = try requireIdentityPool(pool)
        var result = VerifiedLogins(proven: nil, logins: [])
        for (provider, token) in logins.sorted(by: { $0.key < $1.key }) {
            if Self.ownProviderNames.contains(provider) {
                guard let vouched = try await verifyOpenIdToken(token), vouched.pool == pool else {
                    throw LedgerError(.notAuthorized, "Logins[\(provider)]: not an OpenID token of this server for identity pool \(pool) (forged, expired, or for another pool)")
                }
                if let proven = result.proven, proven != vouched.identity {
                    throw LedgerError(.notAuthorized, "Logins holds OpenID tokens of two identities")
                }
                result.proven = vouched.identity
            } else if provider == definition.developerProviderName {
                throw LedgerError(.notAuthorized, "Logins[\(provider)]: developer users sign in with the token of GetOpenIdTokenForDeveloperIdentity, sent as Logins[\(Self.openIdProvider)]")
            } else {
                guard definition.allowsLogin(provider) else {
                    throw LedgerError(.notAuthorized, "Logins[\(String(provider.prefix(128)))]: not a login provider of identity pool \(pool) (its OpenIdConnectProviderARNs and SupportedLoginProviders)")
                }
                let audiences = definition.supportedLoginProviders[provider].map { Set([$0]) } ?? []
                let subject = try await verifyOpenIDToken(provider: provider, token: token, audiences: audiences)
                result.logins.append(Login(provider: provider, subject: subject))
            }
        }
        result.logins.sort()
        return result
    }
}
