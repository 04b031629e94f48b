import Foundation
import Crypto
import LedgerStorage

/// A signed statement of a ledger's whole history at one commit position: the root of the
/// Merkle tree (``MerkleTree``) over its first ``treeSize`` log entries, signed with the
/// ledger's Ed25519 key (``DigestPublicKey``). Anyone with the public key checks it without
/// SyncLedger (docs/proofs.md; `tools/verify-proof`).
///
/// The signature covers, in UTF-8, with a line feed (0x0A) between the fields:
///
/// ```
/// syncledger-digest-v1 LF ledgerId LF treeSize LF rootHash LF time
/// ```
///
/// `treeSize` and `time` (milliseconds since 1970) in decimal, `rootHash` in lowercase hex.
public struct SignedDigest: Sendable, Equatable {
    /// The format name, first line of the signed message and `format` of the JSON.
    public static let format = "syncledger-digest-v1"
    /// The only signature algorithm: Ed25519 (RFC 8032).
    public static let algorithm = "Ed25519"

    /// The ledger's id (``Ledger/id``).
    public var ledgerID: String
    /// Entries covered: the log's commit sequences 1…treeSize.
    public var treeSize: UInt64
    /// The Merkle root of those entries (32 bytes).
    public var rootHash: [UInt8]
    /// When it was signed.
    public var time: Timestamp
    /// The id of the key that signed (``DigestPublicKey/keyID``).
    public var keyID: String
    /// The Ed25519 signature of ``signedMessage`` (64 bytes).
    public var signature: [UInt8]

    /// A digest from its parts (``signature`` as given: see ``isSigned(by:)``).
    public init(ledgerID: String, treeSize: UInt64, rootHash: [UInt8], time: Timestamp, keyID: String, signature: [UInt8]) {
        self.ledgerID = ledgerID
        self.treeSize = treeSize
        self.rootHash = rootHash
        self.time = time
        self.keyID = keyID
        self.signature = signature
    }

    /// The bytes the signature covers.
    public var signedMessage: [UInt8] {
        Array("\(Self.format)\n\(ledgerID)\n\(treeSize)\n\(SigV4.hex(rootHash))\n\(time.milliseconds)".utf8)
    }

    /// Whether `key` signed this digest.
    public func isSigned(by key: DigestPublicKey) -> Bool {
        keyID == key.keyID && key.isValidSignature(signature, for: signedMessage)
    }

    // MARK: JSON

    /// The JSON shape (docs/proofs.md).
    struct Wire: Codable {
        var format: String
        var ledgerId: String
        var treeSize: UInt64
        var rootHash: String
        var time: Int64
        var algorithm: String
        var keyId: String
        var signature: String
    }

    var wire: Wire {
        Wire(format: Self.format, ledgerId: ledgerID, treeSize: treeSize, rootHash: SigV4.hex(rootHash), time: time.milliseconds,
             algorithm: Self.algorithm, keyId: keyID, signature: Data(signature).base64EncodedString())
    }

    init(wire: Wire, what: String) throws(LedgerError) {
        guard wire.format == Self.format else {
            throw LedgerError(.invalidParameter, "\(what): format \(quoted(wire.format)) is not \(Self.format)")
        }
        guard wire.algorithm == Self.algorithm else {
            throw LedgerError(.invalidParameter, "\(what): algorithm \(quoted(wire.algorithm)) is not \(Self.algorithm)")
        }
        guard let root = hexBytes(wire.rootHash), root.count == 32 else {
            throw LedgerError(.invalidParameter, "\(what): rootHash is not 64 lowercase hex digits")
        }
        guard let signature = Data(base64Encoded: wire.signature), signature.count == 64 else {
            throw LedgerError(.invalidParameter, "\(what): signature is not 64 bytes in base64")
        }
        self.init(ledgerID: wire.ledgerId, treeSize: wire.treeSize, rootHash: root, time: Timestamp(milliseconds: wire.time),
                  keyID: wire.keyId, signature: Array(signature))
    }

    /// One line of JSON, keys sorted.
    public var json: String { encodeJSON(wire) }

    /// Reads a digest from its JSON.
    /// - Throws: `.invalidParameter` saying which field is wrong (the signature is not checked:
    ///   see ``isSigned(by:)``).
    public init(json: some Collection<UInt8>, what: String = "the digest") throws(LedgerError) {
        try self.init(wire: decodeJSON(Wire.self, json, what: what), what: what)
    }
}

extension Ledger {
    /// A signed digest of the first `size` log entries (default: all of them now), signed
    /// with this ledger's digest key. Extends the `merkle` database as needed (see
    /// ``merkleRoot(size:)``).
    ///
    /// - Throws: ``LedgerError`` `.invalidParameter` when `size` is beyond the log.
    public func signedDigest(size: UInt64? = nil) throws -> SignedDigest {
        let size = try size ?? lastSequence
        let root = try merkleRoot(size: size)
        let key = try secrets.digestSigningKey()
        let publicKey = try DigestPublicKey(raw: Array(key.publicKey.rawRepresentation))
        var digest = SignedDigest(ledgerID: id, treeSize: size, rootHash: root, time: options.clock(), keyID: publicKey.keyID, signature: [])
        do { digest.signature = Array(try key.signature(for: digest.signedMessage)) } catch {
            throw LedgerError(.storage, "cannot sign the digest: \(error)")
        }
        return digest
    }

    /// Checks a digest against this ledger: the root of its first `treeSize` entries must be
    /// the digest's. Returns nil when it matches, else what differs (the signature is not
    /// checked here: see ``SignedDigest/isSigned(by:)``).
    ///
    /// - Throws: ``LedgerError`` `.invalidParameter` when the ledger has fewer entries.
    public func mismatch(with digest: SignedDigest) throws -> String? {
        let root = try merkleRoot(size: digest.treeSize)
        guard root != digest.rootHash else { return nil }
        return "the Merkle root of this ledger's first \(digest.treeSize) entries is \(SigV4.hex(root)), the digest's \(SigV4.hex(digest.rootHash))"
    }
}

// MARK: - Shared JSON helpers

/// Lowercase hex to bytes; nil for anything else.
func hexBytes(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    func value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: nil
        }
    }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(digits.count / 2)
    for i in stride(from: 0, to: digits.count, by: 2) {
        guard let hi = value(digits[i]), let lo = value(digits[i + 1]) else { return nil }
        bytes.append(hi << 4 | lo)
    }
    return bytes
}

func encodeJSON(_ value: some Encodable) -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try! encoder.encode(value), as: UTF8.self)
}

/// Largest JSON document read as a digest or consistency proof (a proof of a 2^64-entry log
/// is ~9 KB).
let maxProofJSONBytes = 1 << 20
/// Largest inclusion proof read: it may carry an entry's body (base64).
let maxInclusionProofJSONBytes = 64 << 20

func decodeJSON<T: Decodable>(_ type: T.Type, _ bytes: some Collection<UInt8>, what: String, limit: Int = maxProofJSONBytes) throws(LedgerError) -> T {
    guard bytes.count <= limit else {
        throw LedgerError(.invalidParameter, "\(what) is \(bytes.count) bytes; at most \(limit) are read")
    }
    do { return try JSONDecoder().decode(type, from: Data(bytes)) } catch let DecodingError.keyNotFound(key, context) {
        throw LedgerError(.invalidParameter, "\(what) lacks \(path(context.codingPath + [key]))")
    } catch let DecodingError.typeMismatch(_, context) {
        throw LedgerError(.invalidParameter, "\(what): \(path(context.codingPath)) has the wrong type")
    } catch let DecodingError.valueNotFound(_, context) {
        throw LedgerError(.invalidParameter, "\(what): \(path(context.codingPath)) is null")
    } catch {
        throw LedgerError(.invalidParameter, "\(what) is not valid JSON")
    }
}

private func path(_ keys: [any CodingKey]) -> String {
    keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
}
