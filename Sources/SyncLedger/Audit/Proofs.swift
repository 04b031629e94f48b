import Foundation
import LedgerStorage

/// A log entry as an inclusion proof carries it: the leaf's fields, and — unless left out, so
/// that a third party can check the entry hash itself — the entry's body and the hash it chains
/// to.
public struct ProvenEntry: Sendable, Equatable {
    /// Its commit sequence (leaf index + 1).
    public var sequence: UInt64
    /// Its stream.
    public var stream: StreamName
    /// Its offset in the stream.
    public var offset: UInt64
    /// The entry hash stored in its log row.
    public var entryHash: [UInt8]
    /// The hash of the stream's previous entry (32 zero bytes at offset 1); nil when the proof
    /// leaves the body out.
    public var previousHash: [UInt8]?
    /// The entry body as stored (docs/storage-format.md); nil when left out (the entry hash is
    /// then taken as given).
    public var body: [UInt8]?

    /// The Merkle leaf hash of this entry.
    public var leafHash: [UInt8] {
        MerkleTree.leafHash(sequence: sequence, streamKey: stream.key, offset: offset, entryHash: entryHash)
    }

    /// Whether ``entryHash`` is the chain hash of ``previousHash`` and ``body`` (true when the
    /// body is left out: there is nothing to check).
    public var chainsToBody: Bool {
        guard let body, let previousHash else { return body == nil && previousHash == nil }
        return LogEntry.chainHash(previous: previousHash, stream: stream, body: body) == entryHash
    }

    struct Wire: Codable {
        var sequence: UInt64
        var pool: String
        var identity: String
        var dataset: String
        var offset: UInt64
        var entryHash: String
        var previousHash: String?
        var body: String?
    }
}

/// Proof that one entry is in the tree a ``SignedDigest`` signs (RFC 6962 §2.1.1).
public struct InclusionProof: Sendable, Equatable {
    /// The JSON `format`.
    public static let format = "syncledger-inclusion-proof-v1"
    /// The digest the path leads to.
    public var digest: SignedDigest
    /// The entry.
    public var entry: ProvenEntry
    /// The audit path, leaf end first.
    public var path: [[UInt8]]

    /// What is wrong with this proof checked against `key`, or nil when it holds: the digest's
    /// signature, the entry hash against body and previous hash, the path against the root.
    public func problem(key: DigestPublicKey) -> String? {
        guard digest.isSigned(by: key) else { return "the digest's signature does not verify with key \(key.keyID)" }
        guard entry.sequence >= 1, entry.sequence <= digest.treeSize else {
            return "sequence \(entry.sequence) is outside the digest's tree of \(digest.treeSize) entries"
        }
        guard entry.chainsToBody else { return "the entry hash is not the hash of the previous hash and the body" }
        guard MerkleTree.root(fromInclusion: path, leaf: entry.leafHash, index: entry.sequence - 1, size: digest.treeSize) == digest.rootHash else {
            return "the inclusion path does not lead to the digest's root"
        }
        return nil
    }

    struct Wire: Codable {
        var format: String
        var digest: SignedDigest.Wire
        var leafIndex: UInt64
        var entry: ProvenEntry.Wire
        var path: [String]
    }

    /// One line of JSON, keys sorted (docs/proofs.md).
    public var json: String {
        let e = entry
        return encodeJSON(Wire(format: Self.format, digest: digest.wire, leafIndex: e.sequence - 1,
                               entry: .init(sequence: e.sequence, pool: e.stream.pool.rawValue, identity: e.stream.identity.rawValue,
                                            dataset: e.stream.dataset.rawValue, offset: e.offset, entryHash: SigV4.hex(e.entryHash),
                                            previousHash: e.previousHash.map { SigV4.hex($0) }, body: e.body.map { Data($0).base64EncodedString() }),
                               path: path.map { SigV4.hex($0) }))
    }
}

/// Proof that a later digest's tree extends an earlier one's: no entry changed or was removed
/// in between (RFC 6962 §2.1.2).
public struct ConsistencyProof: Sendable, Equatable {
    /// The JSON `format`.
    public static let format = "syncledger-consistency-proof-v1"
    /// The earlier digest.
    public var from: SignedDigest
    /// The later digest.
    public var to: SignedDigest
    /// The proof's hashes, in RFC 6962 order.
    public var path: [[UInt8]]

    /// What is wrong with this proof checked against `key`, or nil when it holds.
    public func problem(key: DigestPublicKey) -> String? {
        guard from.isSigned(by: key) else { return "the earlier digest's signature does not verify with key \(key.keyID)" }
        guard to.isSigned(by: key) else { return "the later digest's signature does not verify with key \(key.keyID)" }
        guard from.ledgerID == to.ledgerID else { return "the digests are of different ledgers (\(from.ledgerID), \(to.ledgerID))" }
        guard MerkleTree.verifyConsistency(old: from.treeSize, oldRoot: from.rootHash, new: to.treeSize, newRoot: to.rootHash, path: path) else {
            return "the proof does not show that the tree of \(to.treeSize) entries extends the tree of \(from.treeSize)"
        }
        return nil
    }

    struct Wire: Codable {
        var format: String
        var from: SignedDigest.Wire
        var to: SignedDigest.Wire
        var path: [String]
    }

    /// One line of JSON, keys sorted (docs/proofs.md).
    public var json: String {
        encodeJSON(Wire(format: Self.format, from: from.wire, to: to.wire, path: path.map { SigV4.hex($0) }))
    }
}

extension Ledger {
    /// Proof that the entry at commit sequence `sequence` is in the tree `digest` signs.
    ///
    /// The proof is made from this ledger as it is now; it verifies only if the ledger still
    /// holds the history the digest signed (check it with ``InclusionProof/problem(key:)``).
    /// - Throws: ``LedgerError`` `.invalidParameter` when `sequence` is not in 1…treeSize or the
    ///   tree is beyond the log; `.wrongLedger` when the digest is another ledger's.
    /// - Parameter withBody: `false` leaves the entry's body and previous hash out (a proof of
    ///   a large entry stays small; the verifier then takes the entry hash as given).
    public func inclusionProof(sequence: UInt64, digest: SignedDigest, withBody: Bool = true) throws -> InclusionProof {
        guard digest.ledgerID == id else {
            throw LedgerError(.wrongLedger, "the digest is of ledger \(digest.ledgerID.prefix(64)), this is \(id)")
        }
        guard sequence >= 1, sequence <= digest.treeSize else {
            throw LedgerError(.invalidParameter, "sequence \(sequence) is not in the digest's tree (sequences 1 to \(digest.treeSize))")
        }
        return try withMerkleTree(size: digest.treeSize) { txn, node in
            guard let stored = try txn.get(schema.log, key: .bigEndian(sequence)) else {
                throw LedgerError(.corruptData, "the log lacks sequence \(sequence)")
            }
            let (entry, streamID) = try decodeEntry(stored, sequence: sequence, stream: nil, txn: txn)
            let previous = withBody ? try storedHash(txn, streamID: streamID, stream: entry.stream, offset: entry.offset - 1) : nil
            let proven = ProvenEntry(sequence: sequence, stream: entry.stream, offset: entry.offset, entryHash: entry.hash,
                                     previousHash: previous, body: withBody ? Array(stored[40...]) : nil)
            let path = try MerkleTree.inclusionPath(index: sequence - 1, size: digest.treeSize, node: node)
            return InclusionProof(digest: digest, entry: proven, path: path)
        }
    }

    /// The commit sequence of the entry at `offset` of `stream`.
    /// - Throws: `.notFound` when the stream has no such entry.
    public func sequence(of stream: StreamName, offset: UInt64) throws -> UInt64 {
        try read { txn in
            guard let head = try head(txn, stream),
                  let value = try txn.get(schema.index, key: Schema.indexKey(stream: head.id, offset: offset)) else {
                throw LedgerError(.notFound, "the stream has no entry at offset \(offset)", stream: stream, offset: offset)
            }
            return value.bigEndianUInt64()
        }
    }

    /// Proof that the tree `to` signs extends the tree `from` signs.
    /// - Throws: ``LedgerError`` `.invalidParameter` when `from` is the larger tree or `to` is
    ///   beyond the log; `.wrongLedger` when a digest is another ledger's.
    public func consistencyProof(from: SignedDigest, to: SignedDigest) throws -> ConsistencyProof {
        for digest in [from, to] where digest.ledgerID != id {
            throw LedgerError(.wrongLedger, "the digest is of ledger \(digest.ledgerID.prefix(64)), this is \(id)")
        }
        guard from.treeSize <= to.treeSize else {
            throw LedgerError(.invalidParameter, "the earlier digest covers \(from.treeSize) entries, more than the later one's \(to.treeSize)")
        }
        return try withMerkleTree(size: to.treeSize) { _, node in
            ConsistencyProof(from: from, to: to, path: try MerkleTree.consistencyPath(old: from.treeSize, new: to.treeSize, node: node))
        }
    }
}

extension InclusionProof {
    /// Reads a proof from its JSON.
    /// - Throws: `.invalidParameter` saying which field is wrong (nothing is verified: see
    ///   ``problem(key:)``).
    public init(json: some Collection<UInt8>) throws(LedgerError) {
        let what = "the inclusion proof"
        let wire = try decodeJSON(Wire.self, json, what: what, limit: maxInclusionProofJSONBytes)
        guard wire.format == Self.format else { throw LedgerError(.invalidParameter, "\(what): format \(quoted(wire.format)) is not \(Self.format)") }
        let e = wire.entry
        guard let hash = hexBytes(e.entryHash), hash.count == 32 else {
            throw LedgerError(.invalidParameter, "\(what): entry.entryHash is not 64 lowercase hex digits")
        }
        guard (e.previousHash == nil) == (e.body == nil) else {
            throw LedgerError(.invalidParameter, "\(what): entry.previousHash and entry.body come together or not at all")
        }
        var previous: [UInt8]?
        if let text = e.previousHash {
            guard let bytes = hexBytes(text), bytes.count == 32 else { throw LedgerError(.invalidParameter, "\(what): entry.previousHash is not 64 lowercase hex digits") }
            previous = bytes
        }
        var body: [UInt8]?
        if let text = e.body {
            guard let bytes = Data(base64Encoded: text) else { throw LedgerError(.invalidParameter, "\(what): entry.body is not base64") }
            body = Array(bytes)
        }
        self.init(digest: try SignedDigest(wire: wire.digest, what: what + " (its digest)"),
                  entry: ProvenEntry(sequence: e.sequence, stream: try StreamName(pool: e.pool, identity: e.identity, dataset: e.dataset),
                                     offset: e.offset, entryHash: hash, previousHash: previous, body: body),
                  path: try proofPath(wire.path, what: what))
    }
}

extension ConsistencyProof {
    /// Reads a proof from its JSON.
    /// - Throws: `.invalidParameter` saying which field is wrong (nothing is verified: see
    ///   ``problem(key:)``).
    public init(json: some Collection<UInt8>) throws(LedgerError) {
        let what = "the consistency proof"
        let wire = try decodeJSON(Wire.self, json, what: what)
        guard wire.format == Self.format else { throw LedgerError(.invalidParameter, "\(what): format \(quoted(wire.format)) is not \(Self.format)") }
        self.init(from: try SignedDigest(wire: wire.from, what: what + " (from)"), to: try SignedDigest(wire: wire.to, what: what + " (to)"),
                  path: try proofPath(wire.path, what: what))
    }
}

/// A proof's hashes from hex; at most 128 (a tree of 2^64 leaves needs 64 for inclusion, 128
/// for consistency).
private func proofPath(_ hexes: [String], what: String) throws(LedgerError) -> [[UInt8]] {
    guard hexes.count <= 128 else { throw LedgerError(.invalidParameter, "\(what): path has \(hexes.count) hashes; at most 128") }
    var path: [[UInt8]] = []
    for (i, text) in hexes.enumerated() {
        guard let hash = hexBytes(text), hash.count == 32 else { throw LedgerError(.invalidParameter, "\(what): path[\(i)] is not 64 lowercase hex digits") }
        path.append(hash)
    }
    return path
}
