import Foundation
public import JWTKit

/// How this project writes and reads JSON Web Tokens with jwt-kit: the serializer every token
/// it signs goes through (the push services' provider tokens and this server's OpenID tokens),
/// and the header checks that come before jwt-kit verifies a token (jwt-kit 5 falls back to
/// its default key for an unknown `kid` and does not compare the header's `alg` with the key's,
/// so the callers pin both from the header first).
public enum JWTFormat {
    /// jwt-kit's serializer with NumericDate claims written as whole seconds (APNs, Google and
    /// Cognito's clients expect integers) and the keys sorted.
    public static let serializer: DefaultJWTSerializer = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .integerSecondsSince1970
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return DefaultJWTSerializer(jsonEncoder: encoder)
    }()

    /// The header of a compact JWS from its first part (base64url JSON), nil when it is not
    /// base64url of a JSON object.
    static func header(_ part: some Collection<UInt8>) -> JWTHeader? {
        guard let bytes = Base64URL.decode(ArraySlice(part)) else { return nil }
        return try? JSONDecoder().decode(JWTHeader.self, from: Data(bytes))
    }

    /// A key collection holding only `key`, as its default: it checks every token's signature
    /// against that key, whatever the token's `kid` (the caller chose the key by it).
    static func verifier(ecdsa key: ES256PublicKey) async -> JWTKeyCollection {
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: key)
        return keys
    }

    /// A key collection holding only the RS256 key `key`, as its default.
    static func verifier(rsa key: Insecure.RSA.PublicKey) async -> JWTKeyCollection {
        let keys = JWTKeyCollection()
        await keys.add(rsa: key, digestAlgorithm: .sha256)
        return keys
    }
}
