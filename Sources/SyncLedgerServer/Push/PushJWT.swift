import Crypto
import Foundation
import _CryptoExtras
import SyncLedger

/// Compact JSON Web Tokens for the push services' authentication: ES256 for APNs provider
/// tokens, RS256 for Google's OAuth service-account grant.
enum PushJWT {
    /// Base64url without padding (RFC 7515 §2).
    static func base64URL(_ bytes: some Sequence<UInt8>) -> String { Base64URL.string(Array(bytes)) }

    /// The signing input `base64url(header).base64url(claims)` (keys sorted, so tests can
    /// compare tokens).
    static func signingInput(header: [String: Any], claims: [String: Any]) throws -> String {
        let h = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes])
        let c = try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys, .withoutEscapingSlashes])
        return base64URL(h) + "." + base64URL(c)
    }

    /// An ES256 token: the signature is the raw `r ‖ s` (64 bytes), as JWS requires.
    static func es256(header: [String: Any], claims: [String: Any], key: P256.Signing.PrivateKey) throws -> String {
        let input = try signingInput(header: header, claims: claims)
        let signature = try key.signature(for: Array(input.utf8))
        return input + "." + base64URL(signature.rawRepresentation)
    }

    /// An RS256 token (RSASSA-PKCS1-v1_5 with SHA-256).
    static func rs256(header: [String: Any], claims: [String: Any], key: _RSA.Signing.PrivateKey) throws -> String {
        let input = try signingInput(header: header, claims: claims)
        let signature = try key.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + base64URL(signature.rawRepresentation)
    }
}
