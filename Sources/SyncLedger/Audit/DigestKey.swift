import Foundation
import Crypto
import LedgerStorage

/// The public half of the Ed25519 key a ledger signs its digests with (see ``SignedDigest``):
/// what a third party or a follower is given to check them. Exported as PEM
/// (SubjectPublicKeyInfo, RFC 8410) or as the raw 32 bytes in base64.
public struct DigestPublicKey: Sendable, Equatable {
    /// The 32-byte Ed25519 public key.
    public let raw: [UInt8]

    /// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): SEQUENCE { SEQUENCE {
    /// OID 1.3.101.112 }, BIT STRING (33 bytes) }; the 32 key bytes follow.
    static let spkiPrefix: [UInt8] = [0x30, 0x2A, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x03, 0x21, 0x00]

    /// A key from its 32 raw bytes.
    /// - Throws: `.invalidParameter` when it is not 32 bytes.
    public init(raw: [UInt8]) throws(LedgerError) {
        guard raw.count == 32 else { throw LedgerError(.invalidParameter, "an Ed25519 public key is 32 bytes, not \(raw.count)") }
        self.raw = raw
    }

    /// A key from PEM (`-----BEGIN PUBLIC KEY-----`, an Ed25519 SubjectPublicKeyInfo) or from
    /// its 32 raw bytes in base64 — the two forms `syncledger digest --public-key` prints.
    /// - Throws: `.invalidParameter` saying which form was expected.
    public init(text: String) throws(LedgerError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("-----BEGIN PUBLIC KEY-----") {
            let body = trimmed.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.hasPrefix("-----") }.joined()
            guard let der = Data(base64Encoded: body).map(Array.init), der.count == 44, Array(der.prefix(12)) == Self.spkiPrefix else {
                throw LedgerError(.invalidParameter, "the PEM public key is not an Ed25519 SubjectPublicKeyInfo (44 bytes of DER)")
            }
            try self.init(raw: Array(der.dropFirst(12)))
        } else if let raw = Data(base64Encoded: trimmed), raw.count == 32 {
            try self.init(raw: Array(raw))
        } else {
            throw LedgerError(.invalidParameter, "a digest public key is PEM (-----BEGIN PUBLIC KEY-----) or 32 bytes in base64")
        }
    }

    /// PEM: `-----BEGIN PUBLIC KEY-----`, the base64 of the SubjectPublicKeyInfo, `-----END
    /// PUBLIC KEY-----`, each line ending in a line feed.
    public var pem: String {
        "-----BEGIN PUBLIC KEY-----\n" + Data(Self.spkiPrefix + raw).base64EncodedString() + "\n-----END PUBLIC KEY-----\n"
    }

    /// The key id a digest names: the first 16 hex digits of SHA-256 of the raw key.
    public var keyID: String { String(SigV4.hex(SHA256.hash(data: raw)).prefix(16)) }

    /// Whether `signature` is this key's Ed25519 signature of `message`.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

extension SecretStore {
    private static let digestKeyName = Array("digest-signing-key".utf8)

    /// The Ed25519 key (raw 32 bytes) that signs this ledger's digests, made on first use. It
    /// stays in this store: never logged, exported or replicated — a follower has its own.
    func digestSigningKey() throws -> Curve25519.Signing.PrivateKey {
        let name = Self.digestKeyName
        var stored = try read { try $0.get(keys, key: name) }
        if stored == nil {
            stored = try write { txn -> [UInt8] in
                if let stored = try txn.get(keys, key: name) { return stored }
                let fresh = Array(Curve25519.Signing.PrivateKey().rawRepresentation)
                try txn.put(keys, key: name, value: fresh)
                return fresh
            }
        }
        guard let stored else { throw LedgerError(.storage, "the digest signing key could not be made in \(directory)") }
        do { return try Curve25519.Signing.PrivateKey(rawRepresentation: stored) } catch {
            throw LedgerError(.corruptData, "the stored digest signing key in \(directory) is not an Ed25519 key (\(stored.count) bytes)")
        }
    }
}

extension Ledger {
    /// The public key this ledger's digests are signed with (the key is made on first use).
    public var digestPublicKey: DigestPublicKey {
        get throws { try DigestPublicKey(raw: Array(secrets.digestSigningKey().publicKey.rawRepresentation)) }
    }
}
