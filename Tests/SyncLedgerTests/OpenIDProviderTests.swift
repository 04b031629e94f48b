import Foundation
import Testing
import Crypto
import _CryptoExtras
import SyncLedgerTestSupport
@testable import SyncLedger

/// Keys and JWTs made in the test: a provider's RSA and P-256 signing keys, and its JWKS.
private enum Keys {
    static let rsa = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let otherRSA = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let ec = P256.Signing.PrivateKey()
    static let otherEC = P256.Signing.PrivateKey()

    static func b64(_ bytes: some Collection<UInt8>) -> String { Base64URL.string(bytes) }

    static func rsaJWK(_ key: _RSA.Signing.PrivateKey, kid: String?) -> [String: Any] {
        let p = try! key.publicKey.getKeyPrimitives()
        var jwk: [String: Any] = ["kty": "RSA", "n": b64(p.modulus), "e": b64(p.publicExponent), "use": "sig", "alg": "RS256"]
        jwk["kid"] = kid
        return jwk
    }

    static func ecJWK(_ key: P256.Signing.PrivateKey, kid: String?) -> [String: Any] {
        let raw = Array(key.publicKey.rawRepresentation)
        var jwk: [String: Any] = ["kty": "EC", "crv": "P-256", "x": b64(raw[0..<32]), "y": b64(raw[32..<64])]
        jwk["kid"] = kid
        return jwk
    }

    static func json(_ object: Any) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    /// The provider's JWKS: rsa-1, ec-1, and other-rsa (a key of the provider the tokens in
    /// "wrong key" tests claim but were not signed with).
    static var jwks: String {
        json(["keys": [rsaJWK(rsa, kid: "rsa-1"), ecJWK(ec, kid: "ec-1"), rsaJWK(otherRSA, kid: "rsa-2")]])
    }

    /// A JWT signed with `alg` by `key` (an RSA or P-256 private key); `signature` replaces it.
    static func jwt(header: [String: Any], claims: [String: Any], rsaKey: _RSA.Signing.PrivateKey? = nil,
                    ecKey: P256.Signing.PrivateKey? = nil, signature: [UInt8]? = nil) -> String {
        let input = b64(Array(json(header).utf8)) + "." + b64(Array(json(claims).utf8))
        let sig: [UInt8]
        if let signature { sig = signature } else if let rsaKey {
            sig = Array(try! rsaKey.signature(for: SHA256.hash(data: Array(input.utf8)), padding: .insecurePKCS1v1_5).rawRepresentation)
        } else if let ecKey {
            sig = Array(try! ecKey.signature(for: Array(input.utf8)).rawRepresentation)
        } else { sig = [] }
        return input + "." + b64(sig)
    }
}

@Suite struct OpenIDProviderTests {
    static let issuer = "https://login.example.com/realms/x"
    static let name = "login.example.com/realms/x"
    /// The clock's time in seconds (TestClock starts at 1,800,000,000,000 ms).
    static let now: Int64 = 1_800_000_000

    static func claims(_ changes: [String: Any?] = [:]) -> [String: Any] {
        var c: [String: Any] = ["iss": issuer, "aud": "app-1", "sub": "user-42", "exp": now + 600, "iat": now - 10]
        for (k, v) in changes { c[k] = v }
        return c
    }

    static func rs256(_ claims: [String: Any] = claims(), kid: String? = "rsa-1", key: _RSA.Signing.PrivateKey = Keys.rsa) -> String {
        var header: [String: Any] = ["alg": "RS256", "typ": "JWT"]
        header["kid"] = kid
        return Keys.jwt(header: header, claims: claims, rsaKey: key)
    }

    static func es256(_ claims: [String: Any] = claims(), kid: String? = "ec-1", key: P256.Signing.PrivateKey = Keys.ec) -> String {
        var header: [String: Any] = ["alg": "ES256"]
        header["kid"] = kid
        return Keys.jwt(header: header, claims: claims, ecKey: key)
    }

    /// A ledger on the test clock with the provider configured.
    func withProvider(jwks: String = Keys.jwks, _ body: (Ledger) async throws -> Void) async throws {
        var options = LedgerOptions()
        options.clock = TestClock().read
        try await withLedger(options) { ledger async throws in
            try await ledger.configureOpenIDProvider(OpenIDProvider(issuer: Self.issuer, clientIDs: ["app-1", "app-2"], jwks: jwks), caller: "admin")
            try await body(ledger)
        }
    }

    /// Expects `.notAuthorized` with a message containing `reason`.
    func refused(_ ledger: Ledger, _ token: String, _ reason: String, provider: String = name, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            let sub = try await ledger.verifyOpenIDToken(provider: provider, token: token)
            Issue.record("accepted (sub \(sub)); expected a refusal: \(reason)", sourceLocation: sourceLocation)
        } catch let error as LedgerError {
            #expect(error.code == .notAuthorized, "\(error)", sourceLocation: sourceLocation)
            #expect(error.message.contains(reason), "\(error.message)", sourceLocation: sourceLocation)
            #expect(!error.message.contains(token), "the message echoes the token", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected .notAuthorized, got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func validTokensGiveTheirSubject() async throws {
        try await withProvider { ledger async throws in
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.rs256()) == "user-42")
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.es256(Self.claims(["sub": "ec-user"]))) == "ec-user")
            // aud as an array naming one client id; the second client id; an extra audience.
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.rs256(Self.claims(["aud": ["other", "app-2"]]))) == "user-42")
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.es256(Self.claims(["aud": "pool-aud"])), audiences: ["pool-aud"]) == "user-42")
            // Without a kid: the only ES256 key; nbf now is fine.
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.es256(Self.claims(["nbf": Self.now]), kid: nil)) == "user-42")
        }
    }

    @Test func signaturesAndKeysAreChecked() async throws {
        try await withProvider { ledger async throws in
            let good = Self.rs256()
            // A flipped bit in the claims keeps the signature of the original.
            let parts = good.split(separator: ".").map(String.init)
            let forged = Keys.b64(Array(Keys.json(Self.claims(["sub": "admin"])).utf8))
            await refused(ledger, parts[0] + "." + forged + "." + parts[2], "signature is not valid")
            await refused(ledger, Self.es256(Self.claims(), kid: "ec-1", key: Keys.otherEC), "signature is not valid")
            // Signed by one key, claiming another of the JWKS.
            await refused(ledger, Self.rs256(kid: "rsa-2", key: Keys.rsa), "signature is not valid")
            await refused(ledger, Self.rs256(kid: "rsa-9"), "no RS256 key with the token's kid \"rsa-9\"")
            await refused(ledger, Self.rs256(kid: "a\nb"), "no RS256 key with the token's kid (not printable ASCII)")
            await refused(ledger, Self.es256(kid: "rsa-1"), "no ES256 key with the token's kid")
            // Two RSA keys: without a kid, none is chosen.
            await refused(ledger, Self.rs256(kid: nil), "has no kid")
            await refused(ledger, Keys.jwt(header: ["alg": "none"], claims: Self.claims()), "alg \"none\" is not accepted")
            let hmac = HMAC<SHA256>.authenticationCode(for: Array("x".utf8), using: SymmetricKey(size: .bits256))
            await refused(ledger, Keys.jwt(header: ["alg": "HS256", "kid": "rsa-1"], claims: Self.claims(), signature: Array(hmac)), "alg \"HS256\" is not accepted")
            await refused(ledger, Keys.jwt(header: ["alg": "RS512", "kid": "rsa-1"], claims: Self.claims(), rsaKey: Keys.rsa), "alg \"RS512\" is not accepted")
            await refused(ledger, Keys.jwt(header: ["kid": "rsa-1"], claims: Self.claims(), rsaKey: Keys.rsa), "has no alg")
        }
    }

    @Test func claimsAreChecked() async throws {
        try await withProvider { ledger async throws in
            await refused(ledger, Self.rs256(Self.claims(["iss": "https://login.example.com/realms/y"])), "issuer (iss)")
            await refused(ledger, Self.rs256(Self.claims(["iss": Self.issuer + "/"])), "issuer (iss)")
            await refused(ledger, Self.rs256(Self.claims(["aud": "app-3"])), "audience (aud) is none")
            await refused(ledger, Self.rs256(Self.claims(["aud": ["app-3", "app-4"]])), "audience (aud) is none")
            await refused(ledger, Self.rs256(Self.claims(["aud": nil])), "no audience")
            await refused(ledger, Self.es256(Self.claims(["exp": Self.now])), "expired")
            await refused(ledger, Self.es256(Self.claims(["exp": Self.now - 3600])), "expired")
            await refused(ledger, Self.es256(Self.claims(["exp": nil])), "no numeric expiry")
            await refused(ledger, Self.es256(Self.claims(["exp": "\(Self.now + 600)"])), "no numeric expiry")
            await refused(ledger, Self.es256(Self.claims(["nbf": Self.now + 301])), "nbf is more than 5 minutes in the future")
            await refused(ledger, Self.es256(Self.claims(["iat": Self.now + 3600])), "iat is more than 5 minutes in the future")
            await refused(ledger, Self.es256(Self.claims(["sub": nil])), "no subject (sub)")
            await refused(ledger, Self.es256(Self.claims(["sub": ""])), "no subject (sub)")
            await refused(ledger, Self.es256(Self.claims(["sub": String(repeating: "s", count: 256)])), "no subject (sub)")
            // Within the allowance: nbf 5 minutes ahead.
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.es256(Self.claims(["nbf": Self.now + 300]))) == "user-42")
        }
    }

    @Test func malformedTokensAndUnknownProvidersAreRefused() async throws {
        try await withProvider { ledger async throws in
            let good = Self.es256()
            let parts = good.split(separator: ".").map(String.init)
            await refused(ledger, parts[0] + "." + parts[1], "not a JWT (three base64url parts")
            await refused(ledger, good + ".x", "not a JWT (three base64url parts")
            await refused(ledger, parts[0] + ".!!!." + parts[2], "a part is not base64url")
            await refused(ledger, parts[0] + "." + parts[1] + "." + parts[2] + "=", "a part is not base64url")
            await refused(ledger, Keys.b64(Array("[1]".utf8)) + "." + parts[1] + "." + parts[2], "header is not a JSON object")
            let big = Self.es256(Self.claims(["pad": String(repeating: "p", count: 20 * 1024)]))
            await refused(ledger, big, "at most 16384 are accepted")
            await refused(ledger, "", "not a JWT")
            do {
                _ = try await ledger.verifyOpenIDToken(provider: "other.example.com", token: good)
                Issue.record("an unknown provider was accepted")
            } catch let error as LedgerError {
                #expect(error.code == .notAuthorized && error.message.contains("no OpenID Connect provider named \"other.example.com\" is configured"))
            }
            // The provider's name, not its issuer URL, is the key.
            await refused(ledger, good, "no OpenID Connect provider", provider: Self.issuer)
        }
    }

    @Test func providersAddReplaceListRemove() async throws {
        var options = LedgerOptions()
        options.clock = TestClock().read  // a fixed clock: replacing must still move `configured`
        try await withLedger(options) { ledger async throws in
            #expect(try ledger.openIDProviders().isEmpty)
            let onlyRSA = Keys.json(["keys": [Keys.rsaJWK(Keys.rsa, kid: "rsa-1")]])
            let first = try await ledger.configureOpenIDProvider(OpenIDProvider(issuer: Self.issuer + "/", clientIDs: ["app-1"], jwks: onlyRSA), caller: "admin")
            #expect(first.name == Self.name)
            try await ledger.configureOpenIDProvider(OpenIDProvider(name: "b.example", issuer: "https://b.example", clientIDs: ["c"], jwks: onlyRSA), caller: "admin")
            #expect(try ledger.openIDProviders().map(\.name) == ["b.example", Self.name])
            #expect(try ledger.openIDProvider(named: Self.name) == first)
            // Signs in with the RSA key; then the provider is replaced by one with only the EC key.
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.rs256(Self.claims(["iss": Self.issuer + "/"]))) == "user-42")
            let replaced = try await ledger.configureOpenIDProvider(
                OpenIDProvider(issuer: Self.issuer + "/", clientIDs: ["app-1", "app-9"], jwks: Keys.json(["keys": [Keys.ecJWK(Keys.ec, kid: "ec-1")]])), caller: "admin")
            #expect(replaced.configured > first.configured)
            #expect(try ledger.openIDProvider(named: Self.name)?.clientIDs == ["app-1", "app-9"])
            #expect(try ledger.openIDProviders().count == 2)
            await refused(ledger, Self.rs256(Self.claims(["iss": Self.issuer + "/"])), "no RS256 key")  // the cache did not keep the old JWKS
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.es256(Self.claims(["iss": Self.issuer + "/", "aud": "app-9"]))) == "user-42")
            // Remove; again is .notFound; its tokens are refused.
            try await ledger.removeOpenIDProvider(named: Self.name, caller: "admin")
            #expect(try ledger.openIDProvider(named: Self.name) == nil)
            #expect(try ledger.openIDProviders().map(\.name) == ["b.example"])
            await expectLedgerError(.notFound) { try await ledger.removeOpenIDProvider(named: Self.name, caller: "admin") }
            await expectLedgerError(.notAuthorized) { _ = try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.es256()) }
            // Every change is a log entry of the system stream, and the ledger verifies.
            #expect(try ledger.entries(in: Ledger.openIDProvidersStream).count == 4)
            #expect(try ledger.verify().isValid)
        }
    }

    @Test(arguments: [
        ("not json", "is not a JSON object"),
        ("[]", "is not a JSON object"),
        (#"{"kids": []}"#, "has no \"keys\" array"),
        (#"{"keys": []}"#, "has no keys"),
        (#"{"keys": [{"kty": "oct", "k": "AAAA"}]}"#, "neither an RSA key nor an EC P-256 key"),
        (#"{"keys": [{"kty": "EC", "crv": "P-384", "x": "AAAA", "y": "AAAA"}]}"#, "only P-256"),
        (#"{"keys": [{"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"}]}"#, "not a valid P-256 public key"),
        (#"{"keys": [{"kty": "RSA", "e": "AQAB"}]}"#, "has no base64url \"n\""),
        (#"{"keys": [{"kty": "RSA", "n": "\#(Keys.b64([UInt8](repeating: 0xC5, count: 128)))", "e": "AQAB"}]}"#, "1024-bit RSA key"),
    ])
    func badJWKSIsRefusedAtConfigureTime(jwks: String, reason: String) async throws {
        try await withLedger { ledger async throws in
            let error = await expectLedgerError(.invalidParameter) {
                try await ledger.configureOpenIDProvider(OpenIDProvider(issuer: Self.issuer, clientIDs: ["app-1"], jwks: jwks), caller: "admin")
            }
            #expect(error?.message.contains(reason) == true, "\(error?.message ?? "")")
            #expect(try ledger.openIDProviders().isEmpty)
        }
    }

    @Test func jwksBoundsAndProviderFieldsAreChecked() async throws {
        let ec = Keys.ecJWK(Keys.ec, kid: nil)
        let tooMany = Keys.json(["keys": Array(repeating: ec, count: 101)])
        let tooBig = Keys.json(["keys": [ec], "pad": String(repeating: "x", count: 256 * 1024)])
        let cases: [(OpenIDProvider, String)] = [
            (OpenIDProvider(issuer: Self.issuer, clientIDs: ["a"], jwks: tooMany), "has 101 keys"),
            (OpenIDProvider(issuer: Self.issuer, clientIDs: ["a"], jwks: tooBig), "256 KiB"),
            (OpenIDProvider(issuer: "http://login.example.com", clientIDs: ["a"], jwks: Keys.jwks), "https URL"),
            (OpenIDProvider(name: "a|b", issuer: Self.issuer, clientIDs: ["a"], jwks: Keys.jwks), "provider name"),
            (OpenIDProvider(name: "a b", issuer: Self.issuer, clientIDs: ["a"], jwks: Keys.jwks), "provider name"),
            (OpenIDProvider(name: String(repeating: "a", count: 129), issuer: Self.issuer, clientIDs: ["a"], jwks: Keys.jwks), "provider name"),
            (OpenIDProvider(name: "cognito-identity.amazonaws.com", issuer: Self.issuer, clientIDs: ["a"], jwks: Keys.jwks), "this server's own"),
            (OpenIDProvider(issuer: Self.issuer, clientIDs: [], jwks: Keys.jwks), "1-100 client ids"),
            (OpenIDProvider(issuer: Self.issuer, clientIDs: Array(repeating: "a", count: 101), jwks: Keys.jwks), "1-100 client ids"),
            (OpenIDProvider(issuer: Self.issuer, clientIDs: [""], jwks: Keys.jwks), "client id must be 1-255 bytes"),
            (OpenIDProvider(issuer: Self.issuer, clientIDs: [String(repeating: "c", count: 256)], jwks: Keys.jwks), "client id must be 1-255 bytes"),
        ]
        for (provider, reason) in cases {
            do {
                try provider.validate()
                Issue.record("accepted; expected \(reason)")
            } catch {
                #expect(error.code == .invalidParameter && error.message.contains(reason), "\(error.message)")
            }
        }
        // The bounds themselves are accepted; so are encryption keys beside the signing ones.
        try OpenIDProvider(issuer: Self.issuer, clientIDs: ["a"], jwks: Keys.json(["keys": Array(repeating: ec, count: 100)])).validate()
        try OpenIDProvider(name: String(repeating: "a", count: 128), issuer: Self.issuer, clientIDs: ["a"], jwks: Keys.jwks).validate()
        #expect(OpenIDProvider.defaultName(issuer: "https://accounts.example.com/") == "accounts.example.com")
    }

    @Test func encryptionKeysDoNotVerify() async throws {
        var enc = Keys.ecJWK(Keys.ec, kid: "ec-1")
        enc["use"] = "enc"
        try await withProvider(jwks: Keys.json(["keys": [enc, Keys.rsaJWK(Keys.rsa, kid: "rsa-1")]])) { ledger async throws in
            await refused(ledger, Self.es256(), "no ES256 key with the token's kid")
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: Self.rs256(kid: nil)) == "user-42")
        }
        // A key whose alg is another algorithm's does not verify this one's tokens.
        var ecdh = Keys.ecJWK(Keys.ec, kid: "ec-1")
        ecdh["alg"] = "ECDH-ES"
        try await withProvider(jwks: Keys.json(["keys": [ecdh]])) { ledger async throws in
            await refused(ledger, Self.es256(), "no ES256 key with the token's kid")
        }
    }

    @Test func theKeyCacheIsBounded() throws {
        let cache = OpenIDKeyCache()
        let onlyEC = Keys.json(["keys": [Keys.ecJWK(Keys.ec, kid: nil)]])
        for i in 0..<(OpenIDKeyCache.limit + 10) {
            _ = try cache.keys(ledger: "l", OpenIDProvider(name: "p\(i)", issuer: Self.issuer, clientIDs: ["a"], jwks: onlyEC))
        }
        #expect(cache.count <= OpenIDKeyCache.limit)
        // A hit with other JWKS text (same name and time) parses again, not serves the old keys.
        let p = OpenIDProvider(name: "x", issuer: Self.issuer, clientIDs: ["a"], jwks: onlyEC)
        #expect(try cache.keys(ledger: "l", p).keys.count == 1)
        var q = p
        q.jwks = Keys.json(["keys": [Keys.ecJWK(Keys.ec, kid: nil), Keys.ecJWK(Keys.otherEC, kid: nil)]])
        #expect(try cache.keys(ledger: "l", q).keys.count == 2)
    }
}

extension OpenIDProviderTests {
    /// A token that verified is remembered (a sign-in sends it twice), but never past its
    /// expiry, its provider's new keys, or other audiences.
    @Test func verifiedTokensAreRememberedOnlyWhileTheyHold() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger async throws in
            let provider = OpenIDProvider(issuer: Self.issuer, clientIDs: ["app-1"], jwks: Keys.jwks)
            try await ledger.configureOpenIDProvider(provider, caller: "admin")
            let token = Self.rs256()
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: token) == "user-42")
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: token) == "user-42")
            // New keys (same kid, another key): the remembered token no longer signs in.
            let rotated = Keys.json(["keys": [Keys.rsaJWK(Keys.otherRSA, kid: "rsa-1")]])
            try await ledger.configureOpenIDProvider(OpenIDProvider(issuer: Self.issuer, clientIDs: ["app-1"], jwks: rotated), caller: "admin")
            await refused(ledger, token, "signature")
            try await ledger.configureOpenIDProvider(provider, caller: "admin")
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: token) == "user-42")
            // Checked with an extra audience, the token is not remembered for another check.
            let pooled = Self.es256(Self.claims(["aud": "pool-aud"]))
            #expect(try await ledger.verifyOpenIDToken(provider: Self.name, token: pooled, audiences: ["pool-aud"]) == "user-42")
            await refused(ledger, pooled, "audience")
            // Removed, or expired: refused though it verified before.
            clock.advance(seconds: 601)
            await refused(ledger, token, "expired")
            try await ledger.removeOpenIDProvider(named: Self.name, caller: "admin")
            await refused(ledger, Self.rs256(Self.claims(["exp": Self.now + 6000])), "no OpenID Connect provider")
        }
    }
}
