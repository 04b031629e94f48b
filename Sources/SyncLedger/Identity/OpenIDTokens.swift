import Foundation
import Crypto
import _CryptoExtras

/// A JSON value as a JWT or JWKS holds it (JSONDecoder keeps booleans and numbers apart,
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
    var number: Double? { if case .number(let n) = self { n } else { nil } }
}

/// The signing keys of a JWKS document, parsed and checked: RSA keys (`kty` RSA, `n`, `e`, a
/// modulus of 2048-8192 bits) and EC P-256 keys (`kty` EC, `crv` P-256, `x`, `y`). Keys whose
/// `use` is not `sig` are kept out of verification (a JWKS may list encryption keys).
struct OpenIDKeys: Sendable {
    enum Key: Sendable {
        case rsa(_RSA.Signing.PublicKey)
        case p256(P256.Signing.PublicKey)
        var alg: String { switch self { case .rsa: "RS256"; case .p256: "ES256" } }
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
                do { key = .rsa(try _RSA.Signing.PublicKey(n: n, e: e)) } catch {
                    throw bad("\(named) is not a valid RSA public key of at least 2048 bits")
                }
            case "EC":
                guard jwk["crv"]?.string == "P-256" else { throw bad("\(named) is an EC key on \(quoted(jwk["crv"]?.string ?? "no curve")); only P-256 is accepted") }
                let x = try field("x"), y = try field("y")
                guard x.count == 32, y.count == 32, let p = try? P256.Signing.PublicKey(rawRepresentation: x + y) else {
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

extension Ledger {
    /// The most bytes of an OpenID token (16 KiB).
    public static let maxOpenIDTokenBytes = 16 * 1024

    /// Verifies an ID token of the configured OpenID Connect provider `name` and returns its
    /// subject (`sub`). The token must be a compact JWS signed RS256 or ES256 by a key of the
    /// provider's JWKS (chosen by `kid`, or the only key of its type), with `iss` the issuer,
    /// `aud` one of the provider's client ids or `extra`, `exp` in the future, and `nbf` and
    /// `iat` (if present) at most five minutes ahead. The token is never logged or echoed.
    /// - Throws: `.notAuthorized` "`<provider>`: `<the check that failed>`".
    public func verifyOpenIDToken(provider name: String, token: String, audiences extra: Set<String> = []) throws -> String {
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
        guard let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]), let signature = Base64URL.decode(parts[2]) else {
            throw refuse("the token is not a JWT (a part is not base64url)")
        }
        guard let header = JWTJSON.object(headerBytes) else { throw refuse("the token's header is not a JSON object") }
        guard let alg = header["alg"]?.string else { throw refuse("the token's header has no alg") }
        guard alg == "RS256" || alg == "ES256" else { throw refuse("the token's alg \(shown(alg)) is not accepted (only RS256 and ES256)") }
        if header["crit"] != nil { throw refuse("the token's header has crit extensions, which are not supported") }
        var kid: String?
        if let value = header["kid"] {
            guard let text = value.string else { throw refuse("the token's kid is not a string") }
            kid = text
        }
        let keys = try Self.openIDKeyCache.keys(ledger: id, provider)
        guard let key = keys.key(kid: kid, alg: alg) else {
            throw refuse(kid.map { "the provider's JWKS has no \(alg) key with the token's kid \(shown($0))" }
                         ?? "the token has no kid and the provider's JWKS has not exactly one \(alg) key")
        }
        let signed = bytes[..<(parts[0].count + 1 + parts[1].count)]
        let valid: Bool
        switch key {
        case .rsa(let k):
            valid = k.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: signed), padding: .insecurePKCS1v1_5)
        case .p256(let k):
            if let s = try? P256.Signing.ECDSASignature(rawRepresentation: signature) { valid = k.isValidSignature(s, for: SHA256.hash(data: signed)) } else { valid = false }
        }
        guard valid else { throw refuse("the token's signature is not valid") }

        guard let claims = JWTJSON.object(claimBytes) else { throw refuse("the token's claims are not a JSON object") }
        guard claims["iss"]?.string == provider.issuer else { throw refuse("the token's issuer (iss) is not \(provider.issuer)") }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let a)?: audiences = [a]
        case .array(let list)?: audiences = list.compactMap(\.string)
        default: throw refuse("the token has no audience (aud)")
        }
        let accepted = Set(provider.clientIDs).union(extra)
        guard audiences.contains(where: accepted.contains) else { throw refuse("the token's audience (aud) is none of the provider's client ids") }
        let now = Double(options.clock().milliseconds)
        guard let exp = claims["exp"]?.number, exp.isFinite else { throw refuse("the token has no numeric expiry (exp)") }
        guard exp * 1000 > now else { throw refuse("the token has expired") }
        for claim in ["nbf", "iat"] {
            guard let value = claims[claim] else { continue }
            guard let t = value.number, t.isFinite else { throw refuse("the token's \(claim) is not a number") }
            guard t * 1000 <= now + 300_000 else { throw refuse("the token's \(claim) is more than 5 minutes in the future") }
        }
        guard let sub = claims["sub"]?.string, (1...255).contains(sub.utf8.count) else {
            throw refuse("the token has no subject (sub) of 1-255 bytes")
        }
        verifiedTokens.insert(digest, .init(provider: provider.name, configured: provider.configured, audiences: extra, subject: sub,
                                            expires: Timestamp(milliseconds: Int64(min(exp * 1000, 9e15)))))
        return sub
    }
}
