import LedgerStorage

/// The Merkle tree of the log, kept in the `merkle` database.
///
/// Leaf `i` is the log entry at commit sequence `i + 1` (the log is numbered from 1 without
/// gaps). The database holds the hash of every complete subtree of 2^``merkleStoredLevel``
/// leaves or more — key level (1 B) ‖ index (8 B BE) — up to `meta` `merkle-leaves` leaves (a
/// multiple of 16). Smaller subtrees and the right edge of a tree are recomputed from the log
/// rows (at most 15 rows per tree size). So a root or a proof at any tree size up to the
/// log's reads O(log n) stored hashes and at most 15 rows, whatever the size of the ledger.
///
/// The database is derived: nothing on the write path touches it. It is extended on demand, by
/// whoever asks for a digest or a proof, in write transactions of at most
/// ``merkleBuildBlocks`` blocks through the group-commit writer — so the server and a
/// `syncledger` command on the same directory both may extend it (LMDB serializes their write
/// transactions, and each reads `merkle-leaves` again inside its own), and a large first build
/// never holds the writer for long. Stored hashes never change: the log is append-only.
extension Ledger {
    /// Complete subtrees of 2^4 = 16 leaves and more are stored: the database holds about
    /// 2 hashes per 16 entries (≈ 6 bytes per entry), and a proof recomputes at most 15 leaves.
    static let merkleStoredLevel: UInt64 = 4
    /// Leaves of one stored block (2^``merkleStoredLevel``).
    static let merkleBlock: UInt64 = 1 << merkleStoredLevel
    /// Blocks hashed in one write transaction while extending (16,384 entries).
    static let merkleBuildBlocks: UInt64 = 1024
    /// `meta` key: how many leaves the stored subtrees cover (8 B BE).
    static let merkleLeavesKey = Array("merkle-leaves".utf8)

    static func merkleKey(level: UInt64, index: UInt64) -> [UInt8] {
        var w = ByteWriter(capacity: 9)
        w.byte(UInt8(level))
        w.fixed64(index)
        return w.bytes
    }

    /// How many leaves the stored subtrees cover.
    func merkleLeaves(_ txn: Transaction) throws -> UInt64 {
        try txn.get(schema.meta, key: Self.merkleLeavesKey)?.bigEndianUInt64() ?? 0
    }

    /// Makes the stored subtrees cover the first `size` leaves (down to a multiple of 16),
    /// hashing what is missing in write transactions of ``merkleBuildBlocks`` blocks.
    ///
    /// - Warning: Blocks the calling thread on the writer: never call it from a write job.
    func extendMerkle(to size: UInt64) throws {
        let target = size / Self.merkleBlock * Self.merkleBlock
        while try read({ try merkleLeaves($0) }) < target {
            try writer.performBlocking { [self] txn in try self.extendMerkle(txn, to: target) }
        }
    }

    /// One step of ``extendMerkle(to:)``: up to ``merkleBuildBlocks`` blocks toward `target`.
    private func extendMerkle(_ txn: Transaction, to target: UInt64) throws {
        let built = try merkleLeaves(txn)
        guard built < target else { return }
        let end = min(target, built + Self.merkleBuildBlocks * Self.merkleBlock)
        // Read the leaves first, then write: no cursor stays open across the puts.
        var leaves: [[UInt8]] = []
        leaves.reserveCapacity(Int(end - built))
        var names: [UInt64: [UInt8]] = [:]
        try txn.withCursor(schema.log) { cursor in
            var pair = try cursor.seek(atLeast: .bigEndian(built + 1))
            while let current = pair, UInt64(leaves.count) < end - built {
                let sequence = current.key.bigEndianUInt64()
                let expected = built + UInt64(leaves.count) + 1
                guard sequence == expected else {
                    throw LedgerError(.corruptData, "the log lacks sequence \(expected) (the next is \(sequence)): it cannot be a Merkle tree's leaves")
                }
                leaves.append(try merkleLeaf(txn, sequence: sequence, stored: current.value, names: &names))
                pair = try cursor.next()
            }
        }
        guard UInt64(leaves.count) == end - built else {
            throw LedgerError(.corruptData, "the log ends at sequence \(built + UInt64(leaves.count)), before \(end)")
        }
        var block = built / Self.merkleBlock
        for start in stride(from: 0, to: leaves.count, by: Int(Self.merkleBlock)) {
            var level = Self.merkleStoredLevel, index = block
            var hash = Self.completeHash(leaves[start..<start + Int(Self.merkleBlock)])
            try txn.put(schema.merkle, key: Self.merkleKey(level: level, index: index), value: hash)
            // A right child completes its parent: carry up like a binary counter.
            while index & 1 == 1 {
                guard let left = try txn.get(schema.merkle, key: Self.merkleKey(level: level, index: index - 1)), left.count == 32 else {
                    throw LedgerError(.corruptData, "the merkle database lacks the subtree at level \(level) index \(index - 1)")
                }
                hash = MerkleTree.nodeHash(left, hash)
                level += 1
                index >>= 1
                try txn.put(schema.merkle, key: Self.merkleKey(level: level, index: index), value: hash)
            }
            block += 1
        }
        try txn.put(schema.meta, key: Self.merkleLeavesKey, value: .bigEndian(end))
    }

    /// The hash of a complete subtree from its leaves (a power of two of them).
    static func completeHash(_ leaves: ArraySlice<[UInt8]>) -> [UInt8] {
        var level = Array(leaves)
        while level.count > 1 {
            level = stride(from: 0, to: level.count, by: 2).map { MerkleTree.nodeHash(level[$0], level[$0 + 1]) }
        }
        return level[0]
    }

    /// The leaf hash of a stored log row (`stream id ‖ entry hash ‖ body`) at `sequence`.
    func merkleLeaf(_ txn: Transaction, sequence: UInt64, stored: [UInt8], names: inout [UInt64: [UInt8]]) throws -> [UInt8] {
        guard stored.count > 40 else { throw LedgerError(.corruptData, "log entry at sequence \(sequence) is too short (\(stored.count) bytes)") }
        let id = stored.bigEndianUInt64()
        let key: [UInt8]
        if let known = names[id] {
            key = known
        } else {
            guard let found = try txn.get(schema.streamNames, key: .bigEndian(id)) else {
                throw LedgerError(.corruptData, "log entry at sequence \(sequence) names stream id \(id), which has no name")
            }
            if names.count > 100_000 { names.removeAll() }  // bounded, whatever the number of streams
            names[id] = found
            key = found
        }
        var reader = ByteReader(stored, position: 40)
        let offset: UInt64
        do { offset = try LogEntry.peekOffset(&reader) } catch {
            throw LedgerError(.corruptData, "log entry at sequence \(sequence) does not decode: \(error)")
        }
        return MerkleTree.leafHash(sequence: sequence, streamKey: key, offset: offset, entryHash: stored[8..<40])
    }

    /// MTH(D[start:end]) in a read transaction: stored subtrees where there are some, the log
    /// rows elsewhere.
    func merkleNode(_ txn: Transaction, _ start: UInt64, _ end: UInt64, built: UInt64, names: inout [UInt64: [UInt8]]) throws -> [UInt8] {
        try MerkleTree.hash(start, end) { s, size in try completeNode(txn, s, size, built: built, names: &names) }
    }

    private func completeNode(_ txn: Transaction, _ start: UInt64, _ size: UInt64, built: UInt64, names: inout [UInt64: [UInt8]]) throws -> [UInt8] {
        let level = UInt64(size.trailingZeroBitCount)
        if level >= Self.merkleStoredLevel, start + size <= built {
            guard let hash = try txn.get(schema.merkle, key: Self.merkleKey(level: level, index: start >> level)), hash.count == 32 else {
                throw LedgerError(.corruptData, "the merkle database lacks the subtree at level \(level) index \(start >> level)")
            }
            return hash
        }
        if size == 1 {
            guard let stored = try txn.get(schema.log, key: .bigEndian(start + 1)) else {
                throw LedgerError(.corruptData, "the log lacks sequence \(start + 1)")
            }
            return try merkleLeaf(txn, sequence: start + 1, stored: stored, names: &names)
        }
        let half = size / 2
        return MerkleTree.nodeHash(try completeNode(txn, start, half, built: built, names: &names),
                                   try completeNode(txn, start + half, half, built: built, names: &names))
    }

    /// Extends the stored subtrees to `size`, then runs `body` with a function giving
    /// MTH(D[start:end]) for ranges within `size`, in one read transaction.
    ///
    /// - Throws: `.invalidParameter` when `size` is beyond the log's last sequence.
    func withMerkleTree<T>(size: UInt64, _ body: (Transaction, (UInt64, UInt64) throws -> [UInt8]) throws -> T) throws -> T {
        let last = try lastSequence
        guard size <= last else {
            throw LedgerError(.invalidParameter, "tree size \(size) is beyond the log, whose last commit sequence is \(last)")
        }
        try extendMerkle(to: size)
        return try read { txn in
            let built = try merkleLeaves(txn)
            var names: [UInt64: [UInt8]] = [:]
            return try body(txn) { start, end in try merkleNode(txn, start, end, built: built, names: &names) }
        }
    }

    /// The root of the Merkle tree over the first `size` entries of the log (commit sequences
    /// 1…`size`); ``MerkleTree/emptyRoot`` for 0. Extends the `merkle` database as needed.
    ///
    /// - Throws: ``LedgerError`` `.invalidParameter` when `size` is beyond the log;
    ///   `.corruptData` when the log has a gap or a row that does not decode.
    public func merkleRoot(size: UInt64) throws -> [UInt8] {
        try withMerkleTree(size: size) { _, node in try node(0, size) }
    }

    /// Recomputes every stored subtree from the log and compares: nil when all match, else
    /// the first that differs. Reads in batches of ``merkleBuildBlocks`` blocks; memory stays
    /// bounded (one hash per level).
    public func checkMerkleTree() throws -> String? {
        let built = try read { try merkleLeaves($0) }
        var carry: [UInt64: [UInt8]] = [:]  // level → the left child waiting for its right sibling
        var block: UInt64 = 0
        while block * Self.merkleBlock < built {
            let end = min(built / Self.merkleBlock, block + Self.merkleBuildBlocks)
            let problem = try read { txn -> String? in
                var names: [UInt64: [UInt8]] = [:]
                func stored(_ level: UInt64, _ index: UInt64) throws -> [UInt8]? {
                    try txn.get(schema.merkle, key: Self.merkleKey(level: level, index: index))
                }
                for j in block..<end {
                    var leaves: [[UInt8]] = []
                    for sequence in j * Self.merkleBlock + 1...(j + 1) * Self.merkleBlock {
                        guard let row = try txn.get(schema.log, key: .bigEndian(sequence)) else { return "the log lacks sequence \(sequence)" }
                        leaves.append(try merkleLeaf(txn, sequence: sequence, stored: row, names: &names))
                    }
                    var level = Self.merkleStoredLevel, index = j
                    var hash = Self.completeHash(leaves[...])
                    while true {
                        guard try stored(level, index) == hash else {
                            return "the stored Merkle subtree at level \(level) index \(index) (entries \(index << level + 1) to \((index + 1) << level)) differs from the log"
                        }
                        guard index & 1 == 1, let left = carry.removeValue(forKey: level) else { break }
                        hash = MerkleTree.nodeHash(left, hash)
                        level += 1
                        index >>= 1
                    }
                    carry[level] = hash
                }
                return nil
            }
            if let problem { return problem }
            block = end
        }
        return nil
    }

    /// Empties the `merkle` database (it is rebuilt on demand): for a directory whose log was
    /// restored or repaired.
    public func resetMerkleTree() async throws {
        let schema = self.schema
        try await write { txn in
            try txn.removeAll(schema.merkle)
            _ = try txn.delete(schema.meta, key: Self.merkleLeavesKey)
        }
    }
}
