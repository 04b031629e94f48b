import Crypto
import Foundation
import JWTKit

/// The claims of this server's own OpenID tokens (as Cognito Identity's): `iss` Cognito's
/// issuer, `sub` the identity, `aud` the identity pool, `amr` how it signed in, `iat` and `exp`.
struct CognitoOpenIDClaims: JWTPayload {
    var iss: IssuerClaim
    var sub: SubjectClaim
    /// The identity pool id (one string, as Cognito writes it).
    var aud: String
    var amr: [String]?
    var iat: IssuedAtClaim?
    var exp: ExpirationClaim

    /// Nothing here: `exp` is checked against the ledger's clock, not jwt-kit's.
    func verify(using _: some JWTAlgorithm) {}
}

/// This server's OpenID tokens (GetOpenIdToken, GetOpenIdTokenForDeveloperIdentity), signed and
/// verified by jwt-kit with the key of ``Ledger/openIdSigningKey()`` (the cluster's keyring or
/// this node's key); the JWKS at `/.well-known/jwks.json` is ``Ledger/openIdKeys()``.
extension Ledger {
    /// An OpenID token for `identity` of `pool`, valid for `duration` (ES256, this server's key):
    /// `iss` Cognito's issuer, `sub` the identity, `aud` the pool, `amr` how it signed in.
    public func openIdToken(pool: IdentityPoolID, identity: String, logins: [String], duration: Duration) async throws -> String {
        let (kid, key) = try openIdSigningKey()
        let now = options.clock()
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PrivateKey(backing: key), serializer: JWTFormat.serializer)
        func seconds(_ t: Timestamp) -> Date { Date(timeIntervalSince1970: Double(t.milliseconds / 1000)) }
        let claims = CognitoOpenIDClaims(iss: IssuerClaim(value: Self.openIdIssuer), sub: SubjectClaim(value: identity), aud: pool.rawValue,
                                         amr: logins.isEmpty ? ["unauthenticated"] : ["authenticated"] + logins,
                                         iat: IssuedAtClaim(value: seconds(now)), exp: ExpirationClaim(value: seconds(now.adding(duration))))
        return try await keys.sign(claims, header: ["alg": "ES256", "typ": "JWT", "kid": .string(kid)])
    }

    /// The key that verifies a token whose header names `kid`: on a cluster, the generation it
    /// names when that generation is accepted now; else this node's own key.
    private func openIdVerifyingKey(kid: String?) throws -> P256.Signing.PublicKey? {
        guard let keyring = options.identityKeyring else { return try identitySigningKey().publicKey }
        guard let kid else { return nil }
        return keyring.verifying(kid: kid, at: options.clock())
    }

    /// The pool and identity of an OpenID token this server signed and that has not expired;
    /// nil for anything else. The header's `alg` must be ES256 and its `kid` name an accepted
    /// key (checked here: jwt-kit would try its default key for an unknown kid); jwt-kit checks
    /// the signature and decodes the claims. Async because jwt-kit's key collection is an
    /// actor; its callers (``verifyLogins(pool:_:)``, ``credentialsForIdentity(pool:id:lifetime:openIdToken:signedIn:)``)
    /// run in the API layer before any write.
    func verifyOpenIdToken(_ token: String) async throws -> (pool: IdentityPoolID, identity: String)? {
        let bytes = Array(token.utf8)
        guard bytes.count <= 8192, let dot = bytes.firstIndex(of: UInt8(ascii: ".")),
              let header = JWTFormat.header(bytes[..<dot]), header.alg == "ES256" else { return nil }
        if let kid = header.fields["kid"], kid.asString == nil { return nil }
        guard let key = try openIdVerifyingKey(kid: header.kid) else { return nil }
        let verifier = await JWTFormat.verifier(ecdsa: try ES256PublicKey(backing: key))
        guard let claims = try? await verifier.verify(bytes, as: CognitoOpenIDClaims.self),
              claims.iss.value == Self.openIdIssuer, (try? claims.exp.verifyNotExpired(currentDate: Date(timeIntervalSince1970: Double(options.clock().milliseconds) / 1000))) != nil,
              let pool = try? IdentityPoolID(claims.aud) else { return nil }
        return (pool, claims.sub.value)
    }
}
