// Provider tokens (ES256 JWTs, verified once and cached) and the background payload.
import Crypto
import Foundation
import Synchronization

// MARK: - Provider tokens (JWT)

/// Strict unpadded base64url (RFC 7515 §2), as tokens.py `b64url_decode`.
func base64URLDecode(_ text: Substring) -> [UInt8]? {
    let utf8 = text.utf8
    if utf8.count % 4 == 1 { return nil }
    var out = [UInt8]()
    out.reserveCapacity(utf8.count * 3 / 4)
    var accumulator: UInt32 = 0
    var bits = 0
    for c in utf8 {
        let v: UInt32
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = UInt32(c - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): v = UInt32(c - UInt8(ascii: "a")) + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): v = UInt32(c - UInt8(ascii: "0")) + 52
        case UInt8(ascii: "-"): v = 62
        case UInt8(ascii: "_"): v = 63
        default: return nil
        }
        accumulator = (accumulator << 6) | v
        bits += 6
        if bits >= 8 {
            bits -= 8
            out.append(UInt8((accumulator >> UInt32(bits)) & 0xFF))
        }
    }
    return out
}

struct JWTHeader: Decodable {
    let alg: String?
    let kid: String?
}

struct JWTClaims: Decodable {
    let iss: String?
    let iat: Int?
}

/// Verifies provider tokens and remembers the ones that verified (token → iat), so a token the
/// sender reuses (APNs wants it reused for 20–60 minutes) costs one dictionary look-up.
final class ProviderTokens: Sendable {
    let teamID: String
    let keyID: String
    let publicKey: P256.Signing.PublicKey
    static let maxAge: Int64 = 3600
    static let clockSkew: Int64 = 10
    private let verified = Mutex<[String: Int64]>([:])

    init(teamID: String, keyID: String, publicKey: P256.Signing.PublicKey) {
        self.teamID = teamID
        self.keyID = keyID
        self.publicKey = publicKey
    }

    var distinctCount: Int { verified.withLock { $0.count } }

    /// Checks `authorization` (the whole header value); throws the refusal APNs would answer.
    func check(_ authorization: String?, now: Int64) throws(Refusal) {
        guard let authorization, !authorization.isEmpty else { throw Refusal(403, "MissingProviderToken") }
        guard let space = authorization.firstIndex(of: " ") else { throw Refusal(403, "InvalidProviderToken") }
        let scheme = authorization[..<space]
        let jwt = authorization[authorization.index(after: space)...]
        guard scheme.utf8.count == 6, scheme.lowercased() == "bearer", !jwt.isEmpty,
              !jwt.utf8.contains(UInt8(ascii: " "))
        else {
            throw Refusal(403, "InvalidProviderToken")
        }
        let token = String(jwt)
        let cached = verified.withLock { $0[token] }
        let iat: Int64
        if let cached { iat = cached } else { iat = try verify(token) }
        if iat > now + Self.clockSkew { throw Refusal(403, "InvalidProviderToken") }
        if now - iat > Self.maxAge { throw Refusal(403, "ExpiredProviderToken") }
        if cached == nil { verified.withLock { $0[token] = iat } }
    }

    /// Full ES256 verification of a token not seen before; returns its iat.
    private func verify(_ token: String) throws(Refusal) -> Int64 {
        let invalid = Refusal(403, "InvalidProviderToken")
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = base64URLDecode(parts[0]),
              let claimsBytes = base64URLDecode(parts[1]),
              let signatureBytes = base64URLDecode(parts[2])
        else { throw invalid }
        let decoder = JSONDecoder()
        guard let header = try? decoder.decode(JWTHeader.self, from: Data(headerBytes)),
              let claims = try? decoder.decode(JWTClaims.self, from: Data(claimsBytes))
        else { throw invalid }
        guard header.alg == "ES256", header.kid == keyID else { throw invalid }
        // Raw r||s, 64 bytes; a DER signature is refused, as APNs refuses it.
        guard signatureBytes.count == 64,
              let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { throw invalid }
        let signingInput = Data(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard publicKey.isValidSignature(signature, for: signingInput) else { throw invalid }
        guard claims.iss == teamID, let iat = claims.iat else { throw invalid }
        return Int64(iat)
    }
}

// MARK: - Payload

/// A coding key for any name.
struct AnyKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { return nil }
}

/// The body of a background push: `aps` with content-available 1 and nothing user-visible,
/// and `data` an object of string values (what SyncLedger's APNsSender sends).
struct BackgroundPayload: Decodable {
    let data: [String: String]

    struct APS: Decodable {
        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: AnyKey.self)
            guard try container.decode(Int.self, forKey: AnyKey(stringValue: "content-available")) == 1 else {
                throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "content-available is not 1"))
            }
            for key in ["alert", "badge", "sound"] where container.contains(AnyKey(stringValue: key)) {
                throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "user-visible \(key)"))
            }
        }
    }

    enum CodingKeys: String, CodingKey { case aps, data }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        _ = try container.decode(APS.self, forKey: .aps)
        data = try container.decode([String: String].self, forKey: .data)
    }
}
