import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

/// RFC 6962 MTH, PATH and PROOF written out as the RFC states them (recursive, on arrays): the
/// reference the stored, iterative tree is checked against.
private enum Naive {
    static func k(_ n: Int) -> Int { var p = 1; while p * 2 < n { p *= 2 }; return p }
    static func mth(_ d: ArraySlice<[UInt8]>) -> [UInt8] {
        if d.isEmpty { return MerkleTree.emptyRoot }
        if d.count == 1 { return d.first! }
        let k = k(d.count)
        return MerkleTree.nodeHash(mth(d.prefix(k)), mth(d.dropFirst(k)))
    }
    static func path(_ m: Int, _ d: ArraySlice<[UInt8]>) -> [[UInt8]] {
        guard d.count > 1 else { return [] }
        let k = k(d.count)
        return m < k ? path(m, d.prefix(k)) + [mth(d.dropFirst(k))] : path(m - k, d.dropFirst(k)) + [mth(d.prefix(k))]
    }
    static func subproof(_ m: Int, _ d: ArraySlice<[UInt8]>, _ b: Bool) -> [[UInt8]] {
        if m == d.count { return b ? [] : [mth(d)] }
        let k = k(d.count)
        return m <= k ? subproof(m, d.prefix(k), b) + [mth(d.dropFirst(k))] : subproof(m - k, d.dropFirst(k), false) + [mth(d.prefix(k))]
    }
}

@Suite struct MerkleTests {
    /// The iterative paths equal the RFC's recursive definitions, and the verifiers accept them
    /// and refuse any one changed hash, for every size up to 70 and every position.
    @Test func treeMathMatchesTheRFC() {
        let leaves = (0..<70).map { ConcatenatingSHA256.digest([UInt8(truncatingIfNeeded: $0), UInt8($0 >> 8)][...]) }
        for n in 1...leaves.count {
            let d = leaves[..<n]
            let node: (UInt64, UInt64) -> [UInt8] = { Naive.mth(leaves[Int($0)..<Int($1)]) }
            let root = Naive.mth(d)
            #expect(MerkleTree.hash(0, UInt64(n)) { s, size in Naive.mth(leaves[Int(s)..<Int(s + size)]) } == root)
            for m in 0..<n {
                let path = MerkleTree.inclusionPath(index: UInt64(m), size: UInt64(n), node: node)
                #expect(path == Naive.path(m, d), "PATH(\(m), \(n))")
                #expect(MerkleTree.root(fromInclusion: path, leaf: d[m], index: UInt64(m), size: UInt64(n)) == root)
                if !path.isEmpty {
                    var bad = path
                    bad[bad.count / 2][0] ^= 1
                    #expect(MerkleTree.root(fromInclusion: bad, leaf: d[m], index: UInt64(m), size: UInt64(n)) != root)
                }
                #expect(MerkleTree.root(fromInclusion: path + [root], leaf: d[m], index: UInt64(m), size: UInt64(n)) != root)
            }
            for m in 1...n {
                let proof = MerkleTree.consistencyPath(old: UInt64(m), new: UInt64(n), node: node)
                #expect(proof == (m < n ? Naive.subproof(m, d, true) : []), "PROOF(\(m), \(n))")
                #expect(MerkleTree.verifyConsistency(old: UInt64(m), oldRoot: Naive.mth(leaves[..<m]), new: UInt64(n), newRoot: root, path: proof))
                if !proof.isEmpty {
                    var bad = proof
                    bad[0][31] ^= 1
                    #expect(!MerkleTree.verifyConsistency(old: UInt64(m), oldRoot: Naive.mth(leaves[..<m]), new: UInt64(n), newRoot: root, path: bad))
                }
            }
        }
    }

    /// Writes `count` entries over a few streams in one transaction (fast, for sizes past the
    /// stored level), with the hashes the log stores.
    private func fill(_ ledger: Ledger, count: Int, from start: Int = 0) async throws {
        try await ledger.write { txn in
            for i in start..<start + count {
                try ledger.forgeEntry(txn, to: stream("d\(i % 5)", identity: "\(i % 3)"), author: "test",
                                      events: [.put(key: "k\(i % 7)", value: "v\(i)", deviceModified: nil)])
            }
        }
    }

    /// The leaves recomputed from the entries' public fields, in commit order.
    private func leaves(_ ledger: Ledger) throws -> [[UInt8]] {
        var entries: [LogEntry] = []
        for i in 0..<15 {
            try ledger.forEachEntry(in: stream("d\(i % 5)", identity: "\(i % 3)")) { entries.append($0); return true }
        }
        return entries.sorted { $0.sequence < $1.sequence }.map {
            MerkleTree.leafHash(sequence: $0.sequence, streamKey: $0.stream.key, offset: $0.offset, entryHash: $0.hash)
        }
    }

    /// Roots and proofs from the stored tree, at random sizes and as the log grows past what was
    /// stored, equal the RFC's recomputation from the entries.
    @Test func storedTreeMatchesNaiveRecomputation() async throws {
        try await withLedger { ledger in
            var rng = SystemRandomNumberGenerator()
            try await fill(ledger, count: 300)
            var all = try leaves(ledger)
            #expect(all.count == 300)
            #expect(try ledger.merkleRoot(size: 0) == MerkleTree.emptyRoot)
            for size in [1, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 300] + (0..<20).map({ _ in Int.random(in: 1...300, using: &rng) }) {
                #expect(try ledger.merkleRoot(size: UInt64(size)) == Naive.mth(all[..<size]), "root at \(size)")
            }
            try await fill(ledger, count: 77, from: 300)  // past the stored blocks
            all = try leaves(ledger)
            let later = try ledger.signedDigest()
            #expect(later.treeSize == 377 && later.rootHash == Naive.mth(all[...]))
            let key = try ledger.digestPublicKey
            for _ in 0..<40 {
                let size = UInt64.random(in: 1...377, using: &rng)
                let digest = try ledger.signedDigest(size: size)
                #expect(digest.isSigned(by: key))
                let sequence = UInt64.random(in: 1...size, using: &rng)
                let proof = try ledger.inclusionProof(sequence: sequence, digest: digest)
                #expect(proof.path == Naive.path(Int(sequence - 1), all[..<Int(size)]))
                #expect(proof.problem(key: key) == nil)
                #expect(try InclusionProof(json: Array(proof.json.utf8)) == proof)
                let consistency = try ledger.consistencyProof(from: digest, to: later)
                #expect(consistency.problem(key: key) == nil)
                #expect(try ConsistencyProof(json: Array(consistency.json.utf8)) == consistency)
            }
            #expect(throws: LedgerError.self) { try ledger.merkleRoot(size: 378) }
        }
    }

    /// A changed digest, entry body or path is refused; a digest of another key is refused.
    @Test func tamperingIsRefused() async throws {
        try await withLedger { ledger in
            try await fill(ledger, count: 40)
            let key = try ledger.digestPublicKey
            let digest = try ledger.signedDigest()
            var proof = try ledger.inclusionProof(sequence: 20, digest: digest)
            #expect(proof.problem(key: key) == nil)
            var changed = proof
            changed.entry.body![changed.entry.body!.count - 1] ^= 1
            #expect(changed.problem(key: key) != nil)
            // Without the body: smaller, still verified up to the entry hash, which is taken as given.
            let bare = try ledger.inclusionProof(sequence: 20, digest: digest, withBody: false)
            #expect(bare.entry.body == nil && bare.entry.previousHash == nil && bare.path == proof.path)
            #expect(bare.problem(key: key) == nil)
            #expect(try InclusionProof(json: Array(bare.json.utf8)) == bare)
            var halfBare = proof
            halfBare.entry.body = nil
            #expect(halfBare.problem(key: key) != nil)
            changed = proof
            changed.path[1][5] ^= 1
            #expect(changed.problem(key: key) != nil)
            changed = proof
            changed.digest.treeSize += 1
            #expect(changed.problem(key: key)?.contains("signature") == true)
            let stranger = try DigestPublicKey(raw: Array(repeating: 7, count: 32))
            #expect(proof.problem(key: stranger) != nil)
            proof.entry.sequence = 21
            #expect(proof.problem(key: key) != nil)
            #expect(try DigestPublicKey(text: key.pem) == key)
            #expect(try SignedDigest(json: Array(digest.json.utf8)) == digest)
            #expect(throws: LedgerError.self) { try SignedDigest(json: Array(#"{"format":"syncledger-digest-v1"}"#.utf8)) }
        }
    }

    /// `verify` recomputes the stored tree: a changed stored hash is reported, and a reset
    /// tree is rebuilt to the same root.
    @Test func verifyFindsAChangedStoredSubtree() async throws {
        try await withLedger { ledger in
            try await fill(ledger, count: 100)
            let root = try ledger.merkleRoot(size: 100)
            #expect(try ledger.verify().isValid)
            #expect(try ledger.checkMerkleTree() == nil)
            let schema = ledger.schema
            try await ledger.write { txn in
                try txn.put(schema.merkle, key: Ledger.merkleKey(level: 6, index: 0), value: [UInt8](repeating: 9, count: 32))
            }
            #expect(try ledger.merkleRoot(size: 100) != root)
            let report = try ledger.verify()
            #expect(report.problem?.message.contains("level 6 index 0 (entries 1 to 64)") == true, "\(report)")
            try await ledger.resetMerkleTree()
            #expect(try ledger.merkleRoot(size: 100) == root)
            #expect(try ledger.verify().isValid)
        }
    }
}
