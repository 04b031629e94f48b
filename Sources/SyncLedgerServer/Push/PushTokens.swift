import Foundation
import JWTKit
import SyncLedger

/// The push services' authentication tokens, made by jwt-kit (`JWTKeyCollection.sign`): the
/// APNs provider token (ES256, header `kid`, claims `iss` and `iat`) and the RS256 assertion of
/// Google's OAuth service-account grant (`iss`, `scope`, `aud`, `iat`, `exp`). The senders
/// cache what these make (APNsSender.swift, FCMSender.swift). NumericDates are whole seconds
/// (``JWTFormat/serializer``): APNs and Google refuse fractions.
enum PushTokens {
    /// An APNs provider token's claims.
    struct APNsClaims: JWTPayload {
        /// The team id.
        var iss: IssuerClaim
        /// When it was made.
        var iat: IssuedAtClaim
        func verify(using _: some JWTAlgorithm) {}
    }

    /// The claims of a service account's JWT-bearer grant (RFC 7523).
    struct GrantClaims: JWTPayload {
        /// The service account's `client_email`.
        var iss: IssuerClaim
        /// The OAuth scope asked for.
        var scope: String
        /// The token endpoint.
        var aud: AudienceClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim
        func verify(using _: some JWTAlgorithm) {}
    }

    /// An APNs provider token: header `{"alg":"ES256","kid":keyID,"typ":"JWT"}`, claims `iss`
    /// the team id and `iat` `now` in whole seconds.
    static func apns(key: ES256PrivateKey, keyID: String, teamID: String, now: Date = Date()) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: key, serializer: JWTFormat.serializer)
        let claims = APNsClaims(iss: IssuerClaim(value: teamID), iat: IssuedAtClaim(value: wholeSeconds(now)))
        return try await keys.sign(claims, header: ["alg": "ES256", "kid": .string(keyID)])
    }

    /// The assertion of a service account's grant for `scope` at `tokenURI`, valid for an hour
    /// from `now`; the header names the key as `kid` when the key file gives its id.
    static func googleGrant(key: Insecure.RSA.PrivateKey, keyID: String?, clientEmail: String, scope: String, tokenURI: String,
                            now: Date = Date()) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(rsa: key, digestAlgorithm: .sha256, serializer: JWTFormat.serializer)
        let iat = wholeSeconds(now)
        let claims = GrantClaims(iss: IssuerClaim(value: clientEmail), scope: scope, aud: AudienceClaim(value: tokenURI),
                                 iat: IssuedAtClaim(value: iat), exp: ExpirationClaim(value: iat.addingTimeInterval(3600)))
        var header: JWTHeader = ["alg": "RS256", "typ": "JWT"]
        if let keyID { header.kid = keyID }
        return try await keys.sign(claims, header: header)
    }

    private static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }
}
