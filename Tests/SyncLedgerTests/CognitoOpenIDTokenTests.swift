import Crypto
import Foundation
import Testing
@testable import SyncLedger
import SyncLedgerTestSupport

/// This server's own OpenID tokens, signed and verified through jwt-kit: what they hold, and the
/// forgeries the checks before and inside jwt-kit refuse (alg none, HMAC with the public key,
/// another key under our kid, an unknown kid, expiry, another issuer).
@Suite struct CognitoOpenIDTokenTests {
    let clock = TestClock()
    let pool = try! IdentityPoolID("us-east-1:00000000-0000-0000-0000-000000000001")

    func options(keyring: Bool) -> LedgerOptions {
        var options = LedgerOptions()
        options.clock = clock.read
        if keyring { options.identityKeyring = IdentityKeyring(seed: ClusterKeys(secret: "cluster-secret-0123456789").identitySeed) }
        return options
    }

    static func b64(_ bytes: some Collection<UInt8>) -> String { Base64URL.string(bytes) }
    static func json(_ object: Any) -> [UInt8] { Array(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) }
    static func object(_ part: Substring) -> [String: Any] {
        try! JSONSerialization.jsonObject(with: Data(Base64URL.decode(Array(part.utf8)[...])!)) as! [String: Any]
    }

    /// `header.claims` signed with `sign` (nil: an empty signature).
    static func token(header: [String: Any], claims: [String: Any], sign: (([UInt8]) -> [UInt8])?) -> String {
        let input = b64(json(header)) + "." + b64(json(claims))
        return input + "." + b64(sign?(Array(input.utf8)) ?? [])
    }

    @Test(arguments: [false, true]) func tokensHoldTheirClaimsAndForgeriesAreRefused(keyring: Bool) async throws {
        try await withLedger(options(keyring: keyring)) { ledger in
            let token = try await ledger.openIdToken(pool: pool, identity: "us-east-1:x", logins: ["accounts.example.com"], duration: .seconds(600))
            let parts = token.split(separator: ".")
            let header = Self.object(parts[0]), claims = Self.object(parts[1])
            let (kid, key) = try ledger.openIdSigningKey()
            #expect(header["alg"] as? String == "ES256" && header["typ"] as? String == "JWT" && header["kid"] as? String == kid)
            #expect(claims["iss"] as? String == Ledger.openIdIssuer && claims["sub"] as? String == "us-east-1:x" && claims["aud"] as? String == pool.rawValue)
            #expect(claims["amr"] as? [String] == ["authenticated", "accounts.example.com"])
            // NumericDates in whole seconds, as integers in the JSON text.
            let text = String(decoding: Base64URL.decode(Array(parts[1].utf8)[...])!, as: UTF8.self)
            #expect(text.contains("\"iat\":1800000000") && text.contains("\"exp\":1800000600"), "\(text)")
            #expect(try await ledger.verifyOpenIdToken(token)?.identity == "us-east-1:x")

            let ownHeader: [String: Any] = ["alg": "ES256", "typ": "JWT", "kid": kid]
            let es256 = { (input: [UInt8]) in Array(try! key.signature(for: input).rawRepresentation) }
            // Re-signed by us with the same claims: accepted (the forgeries below differ only in what they change).
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: ownHeader, claims: claims, sign: es256))?.identity == "us-east-1:x")
            // alg none, with and without a signature.
            var none = ownHeader
            none["alg"] = "none"
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: none, claims: claims, sign: nil)) == nil)
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: none, claims: claims, sign: es256)) == nil)
            // HS256 keyed with the public key (the JWKS's x ‖ y): algorithm confusion.
            var hs = ownHeader
            hs["alg"] = "HS256"
            let publicKey = SymmetricKey(data: key.publicKey.rawRepresentation)
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: hs, claims: claims, sign: { Array(HMAC<SHA256>.authenticationCode(for: $0, using: publicKey)) })) == nil)
            // Signed by another P-256 key under our kid.
            let other = P256.Signing.PrivateKey()
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: ownHeader, claims: claims, sign: { Array(try! other.signature(for: $0).rawRepresentation) })) == nil)
            // Another issuer; a changed audience (the signature no longer holds); an expired token.
            var changed = claims
            changed["iss"] = "https://evil.example.com"
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: ownHeader, claims: changed, sign: es256)) == nil)
            #expect(try await ledger.verifyOpenIdToken(String(parts[0]) + "." + Self.b64(Self.json(claims.merging(["aud": "us-east-1:other"]) { $1 })) + "." + parts[2]) == nil)
            clock.advance(seconds: 600)
            #expect(try await ledger.verifyOpenIdToken(token) == nil, "expired at exp")
        }
    }

    @Test func onAClusterTheKidMustNameAnAcceptedGeneration() async throws {
        try await withLedger(options(keyring: true)) { ledger in
            let token = try await ledger.openIdToken(pool: pool, identity: "us-east-1:x", logins: [], duration: .seconds(600))
            let parts = token.split(separator: ".")
            let claims = Self.object(parts[1])
            let key = try ledger.openIdSigningKey().key
            let es256 = { (input: [UInt8]) in Array(try! key.signature(for: input).rawRepresentation) }
            // The right key under no kid, a made-up kid, or a kid that is not a string.
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: ["alg": "ES256"], claims: claims, sign: es256)) == nil)
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: ["alg": "ES256", "kid": "g1-0000000000000000"], claims: claims, sign: es256)) == nil)
            #expect(try await ledger.verifyOpenIdToken(Self.token(header: ["alg": "ES256", "kid": 1], claims: claims, sign: es256)) == nil)
        }
    }
}
