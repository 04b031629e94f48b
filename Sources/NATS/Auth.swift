import Crypto
import Foundation

/// How a ``NATSClient`` authenticates in CONNECT. Every form keeps its secret out of
/// `description` (and so out of logs and error messages).
public enum NATSAuth: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// No credentials (the server's `no_auth_user`, or a server without authorization).
    case none
    /// `user` / `pass` (a server's `authorization { user password }` or an account's `users`).
    case userPassword(user: String, password: String)
    /// `auth_token` (a server's `authorization { token }`).
    case token(String)
    /// An NKey user: CONNECT carries the public key (`U…`) and the ed25519 signature of the
    /// server's INFO `nonce`, made with this seed (`SU…`). Parse it with ``NKeyPair/init(seed:)``.
    case nkey(NKeyPair)

    public var description: String {
        switch self {
        case .none: "none"
        case .userPassword(let user, _): "user \(user.debugDescription) with a password"
        case .token: "a token"
        case .nkey(let pair): "nkey \(pair.publicKey)"
        }
    }

    public var debugDescription: String { description }
    /// No children: `dump` and interpolation of a containing value show only ``description``.
    public var customMirror: Mirror { Mirror(self, children: [:]) }

    /// The CONNECT fields for this form; `nonce` is INFO's (nkey needs it).
    func connectFields(nonce: String?) throws(NATSError) -> [String] {
        switch self {
        case .none:
            return []
        case .userPassword(let user, let password):
            return [#""user":"# + jsonString(user), #""pass":"# + jsonString(password)]
        case .token(let token):
            return [#""auth_token":"# + jsonString(token)]
        case .nkey(let pair):
            guard let nonce else {
                throw .authenticationFailed("the server sent no nonce to sign with the nkey (is it configured for nkey users?)")
            }
            return [#""nkey":"# + jsonString(pair.publicKey), #""sig":"# + jsonString(pair.signNonce(nonce))]
        }
    }
}

/// An NKey user key pair from its seed (`SU…`: base32 of a prefix, the 32-byte ed25519 seed and
/// a CRC-16), as `nsc` or `nk -gen user` make them.
public struct NKeyPair: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The user's public key, `U…` (what the server's config names in `users: [{nkey: …}]`).
    public let publicKey: String
    private let seed: [UInt8]

    /// Parses a user seed. Throws ``NATSError/invalidCredentials(_:)`` (without echoing the seed)
    /// when it is not base32, its checksum is wrong, or it is not a user (`SU`) seed.
    public init(seed text: String) throws(NATSError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let raw = Base32.decode(trimmed), raw.count == 36 else {
            throw .invalidCredentials("the nkey seed is not a base32 NKey seed (it starts with SU and has 58 characters)")
        }
        let body = Array(raw[0..<34])
        let crc = UInt16(raw[34]) | UInt16(raw[35]) << 8
        guard CRC16.xmodem(body) == crc else { throw .invalidCredentials("the nkey seed's checksum is wrong") }
        guard raw[0] & 0xF8 == NKeyPrefix.seed else {
            throw .invalidCredentials("the nkey is not a seed (a seed starts with S; a public key cannot sign)")
        }
        let kind = (raw[0] & 0x07) << 5 | (raw[1] & 0xF8) >> 3
        guard kind == NKeyPrefix.user else {
            throw .invalidCredentials("the nkey seed is not a user seed (SU…): clients sign in with user nkeys")
        }
        seed = Array(raw[2..<34])
        guard let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: seed) else {
            throw .invalidCredentials("the nkey seed is not a valid ed25519 seed")
        }
        publicKey = NKeyPrefix.encode(prefix: NKeyPrefix.user, Array(key.publicKey.rawRepresentation))
    }

    /// A new random user key pair.
    public static func generateUser() -> NKeyPair {
        let key = Curve25519.Signing.PrivateKey()
        // Encoding a fresh seed and parsing it back cannot fail.
        return try! NKeyPair(seed: encodeSeed(Array(key.rawRepresentation)))
    }

    /// The seed text (`SU…`), for writing to a seed file. A secret.
    public var seedText: String { Self.encodeSeed(seed) }

    /// The base64url (unpadded) ed25519 signature of `nonce`, as CONNECT's `sig`.
    func signNonce(_ nonce: String) -> String {
        // The seed was validated in init.
        let key = try! Curve25519.Signing.PrivateKey(rawRepresentation: seed)
        let signature = (try? key.signature(for: Data(nonce.utf8))) ?? Data()
        return signature.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func encodeSeed(_ seed: [UInt8]) -> String {
        let b0 = NKeyPrefix.seed | NKeyPrefix.user >> 5
        let b1 = (NKeyPrefix.user & 0x1F) << 3
        var body = [b0, b1] + seed
        let crc = CRC16.xmodem(body)
        body += [UInt8(crc & 0xFF), UInt8(crc >> 8)]
        return Base32.encode(body)
    }

    public static func == (a: NKeyPair, b: NKeyPair) -> Bool { a.publicKey == b.publicKey }

    /// The public key only.
    public var description: String { "NKeyPair(\(publicKey))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["publicKey": publicKey]) }
}

/// NKey prefix bytes (nats-io/nkeys).
enum NKeyPrefix {
    static let seed: UInt8 = 18 << 3
    static let user: UInt8 = 20 << 3

    static func encode(prefix: UInt8, _ key: [UInt8]) -> String {
        var body = [prefix] + key
        let crc = CRC16.xmodem(body)
        body += [UInt8(crc & 0xFF), UInt8(crc >> 8)]
        return Base32.encode(body)
    }
}

/// RFC 4648 base32 without padding (the NKey alphabet).
enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for b in bytes {
            buffer = buffer << 8 | UInt32(b)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int(buffer >> UInt32(bits - 5) & 0x1F)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 0x1F)]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for c in text.utf8 {
            guard let v = alphabet.firstIndex(of: c) else { return nil }
            buffer = buffer << 5 | UInt32(v)
            bits += 5
            if bits >= 8 {
                out.append(UInt8(buffer >> UInt32(bits - 8) & 0xFF))
                bits -= 8
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        return out
    }
}

/// CRC-16/XMODEM (polynomial 0x1021, initial 0), the NKey checksum.
enum CRC16 {
    static func xmodem(_ bytes: [UInt8]) -> UInt16 {
        var crc: UInt16 = 0
        for b in bytes {
            crc ^= UInt16(b) << 8
            for _ in 0..<8 {
                crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
            }
        }
        return crc
    }
}
