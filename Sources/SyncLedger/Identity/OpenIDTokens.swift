import Foundation
import Crypto
import JWTKit
import _CryptoExtras

/// A JSON value as a JWKS holds it (JSONDecoder keeps booleans and numbers apart,
/// which JSONSerialization's NSNumber does not).
enum JWTJSON: Decodable, Sendable {
    case string(String), number(Double), bool(Bool), null, array([JWTJSON]), object([String: JWTJSON])

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let n = try? c.decode(Double.self) { self = .number(n) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JWTJSON].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JWTJSON].self)) }
    }

    /// `bytes` as a JSON object, nil for anything else.
    static func object(_ bytes: some Collection<UInt8>) -> [String: JWTJSON]? {
        guard case .object(let o)? = try? JSONDecoder().decode(JWTJSON.self, from: Data(bytes)) else { return nil }
        return o
    }

    var string: String? { if case .string(let s) = self { s } else { nil } }
}

/// The signing keys of a JWKS document, parsed and checked: RSA keys (`kty` RSA, `n`, `e`, a
/// modulus of 2048-8192 bits) and EC P-256 keys (`kty` EC, `crv` P-256, `x`, `y`). Keys whose
/// `use` is not `sig` are kept out of verification (a JWKS may list encryption keys).
struct OpenIDKeys: Sendable {
    /// A key as jwt-kit holds it.
    enum Key: Sendable {
        case rsa(JWTKit.Insecure.RSA.PublicKey)
        case p256(ES256PublicKey)
        var alg: String { switch self { case .rsa: "RS256"; case .p256: "ES256" } }

        /// jwt-kit's verifier of this key's signatures (RS256 or ES256 only).
        func verifier() async -> JWTKeyCollection {
            switch self {
            case .rsa(let key): await JWTFormat.verifier(rsa: key)
            case .p256(let key): await JWTFormat.verifier(ecdsa: key)
            }
        }
    }
    struct Entry: Sendable { let kid: String?; let key: Key }
    let keys: [Entry]

    /// Parses `jwks`.
    /// - Throws: `.invalidParameter` saying what is wrong.
    init(jwks: String) throws(LedgerError) {
        func bad(_ what: String) -> LedgerError { LedgerError(.invalidParameter, "the JWKS \(what)") }
        guard jwks.utf8.count <= OpenIDProvider.maxJWKSBytes else { throw bad("is \(jwks.utf8.count) bytes; at most \(OpenIDProvider.maxJWKSBytes) (256 KiB) are allowed") }
        guard let document = JWTJSON.object(jwks.utf8) else { throw bad("is not a JSON object") }
        guard case .array(let list)? = document["keys"] else { throw bad("has no \"keys\" array") }
        guard !list.isEmpty else { throw bad("has no keys") }
        guard list.count <= OpenIDProvider.maxKeys else { throw bad("has \(list.count) keys; at most \(OpenIDProvider.maxKeys) are allowed") }
        var keys: [Entry] = []
        for (i, item) in list.enumerated() {
            guard case .object(let jwk) = item else { throw bad("key \(i) is not a JSON object") }
            let kid = jwk["kid"]?.string
            let named = "key \(i)" + (kid.map { " (kid \(quoted($0)))" } ?? "")
            func field(_ name: String) throws(LedgerError) -> [UInt8] {
                guard let text = jwk[name]?.string, let bytes = Base64URL.decode(Array(text.utf8)[...]), !bytes.isEmpty else {
                    throw bad("\(named) has no base64url \"\(name)\"")
                }
                return bytes
            }
            let key: Key
            switch jwk["kty"]?.string {
            case "RSA":
                let n = try field("n"), e = try field("e")
                let modulus = n.drop { $0 == 0 }
                let bits = modulus.first.map { (modulus.count - 1) * 8 + (8 - $0.leadingZeroBitCount) } ?? 0
                guard (2048...8192).contains(bits) else { throw bad("\(named) is a \(bits)-bit RSA key; 2048 to 8192 bits are accepted") }
                guard e.drop(while: { $0 == 0 }).count <= 4 else { throw bad("\(named) has an RSA exponent over 32 bits") }
                do { key = .rsa(try JWTKit.Insecure.RSA.PublicKey(backing: _RSA.Signing.PublicKey(n: n, e: e))) } catch {
                    throw bad("\(named) is not a valid RSA public key of at least 2048 bits")
                }
            case "EC":
                guard jwk["crv"]?.string == "P-256" else { throw bad("\(named) is an EC key on \(quoted(jwk["crv"]?.string ?? "no curve")); only P-256 is accepted") }
                let x = try field("x"), y = try field("y")
                guard x.count == 32, y.count == 32, let p = try? ES256PublicKey(backing: P256.Signing.PublicKey(rawRepresentation: x + y)) else {
                    throw bad("\(named) is not a valid P-256 public key (x and y must be 32 bytes of a point on the curve)")
                }
                key = .p256(p)
            default:
                throw bad("\(named) is neither an RSA key nor an EC P-256 key (kty \(quoted(jwk["kty"]?.string ?? "missing")))")
            }
            if let use = jwk["use"]?.string, use != "sig" { continue }
            if let alg = jwk["alg"]?.string, alg != key.alg { continue }
            keys.append(Entry(kid: kid, key: key))
        }
        self.keys = keys
    }

    /// The key a token's header names: the `alg` key with `kid`, or, without a kid, the only
    /// key for `alg`; nil when there is none (or, without a kid, more than one).
    func key(kid: String?, alg: String) -> Key? {
        let usable = keys.filter { $0.key.alg == alg }
        if let kid { return usable.first { $0.kid == kid }?.key }
        return usable.count == 1 ? usable[0].key : nil
    }
}

/// A header value of a token for an error message: quoted (and cut), or a placeholder when it
/// is not printable ASCII, so that a message never carries control characters from a token.
private func shown(_ value: String) -> String {
    value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7f } ? quoted(value) : "(not printable ASCII)"
}

/// A provider's ID token claims as this module checks them: each one absent, present but not of
/// its type, or a value (so that a malformed `nbf` is refused, not skipped). jwt-kit decodes
/// them once the signature holds; ``Ledger/verifyOpenIDToken(provider:token:audiences:)``
/// checks them against the ledger's clock.
struct ProviderTokenClaims: JWTPayload {
    /// One claim as the token holds it.
    enum Claim<Value: Codable & Sendable>: Sendable {
        case absent, invalid, value(Value)
        var value: Value? { if case .value(let v) = self { v } else { nil } }
    }
    enum CodingKeys: String, CodingKey { case iss, sub, aud, exp, nbf, iat }
    var iss: Claim<String>
    var sub: Claim<String>
    var aud: Claim<AudienceClaim>
    var exp: Claim<ExpirationClaim>
    var nbf: Claim<NotBeforeClaim>
    var iat: Claim<IssuedAtClaim>

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func claim<T: Codable & Sendable>(_ key: CodingKeys) -> Claim<T> {
            guard c.contains(key) else { return .absent }
            return (try? c.decode(T.self, forKey: key)).map { .value($0) } ?? .invalid
        }
        iss = claim(.iss)
        sub = claim(.sub)
        aud = claim(.aud)
        exp = claim(.exp)
        nbf = claim(.nbf)
        iat = claim(.iat)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(iss.value, forKey: .iss)
        try c.encodeIfPresent(sub.value, forKey: .sub)
        try c.encodeIfPresent(aud.value, forKey: .aud)
        try c.encodeIfPresent(exp.value, forKey: .exp)
        try c.encodeIfPresent(nbf.value, forKey: .nbf)
        try c.encodeIfPresent(iat.value, forKey: .iat)
    }

    /// Nothing here: the claims are checked against the ledger's clock, not jwt-kit's.
    func verify(using _: some JWTAlgorithm) {}
}

extension Ledger {
    /// The most bytes of an OpenID token (16 KiB).
    public static let maxOpenIDTokenBytes = 16 * 1024

    /// Verifies an ID token of the configured OpenID Connect provider `name` and returns its
    /// subject (`sub`). The token must be a compact JWS signed RS256 or ES256 by a key of the
    /// provider's JWKS (chosen by `kid`, or the only key of its type), with `iss` the issuer,
    /// `aud` one of the provider's client ids or `extra`, `exp` in the future, and `nbf` and
    /// `iat` (if present) at most five minutes ahead. The token is never logged or echoed.
    ///
    /// The header (`alg` pinned to RS256 or ES256, no `crit`, the key by `kid`) is checked
    /// here; jwt-kit then checks the signature with that one key and decodes the claims, which
    /// are checked here against the ledger's clock. Async because jwt-kit's key collection is
    /// an actor; every caller is in the API layer, before any write.
    /// - Throws: `.notAuthorized` "`<provider>`: `<the check that failed>`".
    public func verifyOpenIDToken(provider name: String, token: String, audiences extra: Set<String> = []) async throws -> String {
        guard let provider = try openIDProvider(named: name) else {
            throw LedgerError(.notAuthorized, "no OpenID Connect provider named \(quoted(name)) is configured")
        }
        func refuse(_ why: String) -> LedgerError { LedgerError(.notAuthorized, "\(provider.name): \(why)") }
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxOpenIDTokenBytes else { throw refuse("the token is \(bytes.count) bytes; at most \(Self.maxOpenIDTokenBytes) are accepted") }
        // A sign-in sends the same token to GetId and GetCredentialsForIdentity: verified once.
        let digest = VerifiedTokenCache.digest(bytes)
        if let subject = verifiedTokens.subject(digest, provider: provider, audiences: extra, now: options.clock()) { return subject }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw refuse("the token is not a JWT (three base64url parts separated by dots)") }
        guard parts.allSatisfy({ Base64URL.decode($0) != nil }) else { throw refuse("the token is not a JWT (a part is not base64url)") }
        guard let header = JWTFormat.header(parts[0]) else { throw refuse("the token's header is not a JSON object") }
        guard let alg = header.alg else { throw refuse("the token's header has no alg") }
        guard alg == "RS256" || alg == "ES256" else { throw refuse("the token's alg \(shown(alg)) is not accepted (only RS256 and ES256)") }
        if header.fields["crit"] != nil { throw refuse("the token's header has crit extensions, which are not supported") }
        var kid: String?
        if let value = header.fields["kid"] {
            guard let text = value.asString else { throw refuse("the token's kid is not a string") }
            kid = text
        }
        let keys = try Self.openIDKeyCache.keys(ledger: id, provider)
        guard let key = keys.key(kid: kid, alg: alg) else {
            throw refuse(kid.map { "the provider's JWKS has no \(alg) key with the token's kid \(shown($0))" }
                         ?? "the token has no kid and the provider's JWKS has not exactly one \(alg) key")
        }
        let claims: ProviderTokenClaims
        do { claims = try await key.verifier().verify(bytes, as: ProviderTokenClaims.self) } catch let error as JWTError where error.errorType == .malformedToken {
            throw refuse("the token's claims are not a JSON object")
        } catch {
            throw refuse("the token's signature is not valid")
        }

        guard claims.iss.value == provider.issuer else { throw refuse("the token's issuer (iss) is not \(provider.issuer)") }
        guard let audiences = claims.aud.value?.value else { throw refuse("the token has no audience (aud)") }
        let accepted = Set(provider.clientIDs).union(extra)
        guard audiences.contains(where: accepted.contains) else { throw refuse("the token's audience (aud) is none of the provider's client ids") }
        let now = Date(timeIntervalSince1970: Double(options.clock().milliseconds) / 1000)
        guard let exp = claims.exp.value else { throw refuse("the token has no numeric expiry (exp)") }
        do { try exp.verifyNotExpired(currentDate: now) } catch { throw refuse("the token has expired") }
        let allowance = now.addingTimeInterval(300)
        switch claims.nbf {
        case .absent: break
        case .invalid: throw refuse("the token's nbf is not a number")
        case .value(let nbf):
            // Compared here: jwt-kit's verifyNotBefore refuses nbf equal to its date, and the
            // allowance includes its end.
            guard nbf.value <= allowance else { throw refuse("the token's nbf is more than 5 minutes in the future") }
        }
        switch claims.iat {
        case .absent: break
        case .invalid: throw refuse("the token's iat is not a number")
        case .value(let iat): guard iat.value <= allowance else { throw refuse("the token's iat is more than 5 minutes in the future") }
        }
        guard let sub = claims.sub.value, (1...255).contains(sub.utf8.count) else {
            throw refuse("the token has no subject (sub) of 1-255 bytes")
        }
        let expires = Timestamp(milliseconds: Int64(min(exp.value.timeIntervalSince1970 * 1000, 9e15)))
        verifiedTokens.insert(digest, .init(provider: provider.name, configured: provider.configured, audiences: extra, subject: sub, expires: expires))
        return sub
    }
}
