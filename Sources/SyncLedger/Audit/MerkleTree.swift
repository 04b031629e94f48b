import LedgerStorage

/// The Merkle tree over a ledger's log, as RFC 6962 (Certificate Transparency) §2.1 defines
/// it: leaves in commit-sequence order, `leaf = SHA-256(0x00 ‖ leaf input)`,
/// `node = SHA-256(0x01 ‖ left ‖ right)`, the left subtree of a tree of `n` leaves holding the
/// largest power of two below `n`. Inclusion paths (§2.1.1) and consistency proofs (§2.1.2)
/// are the RFC's, so any RFC 6962 verifier checks them; see docs/proofs.md.
///
/// Everything here is arithmetic over a `node(start, end)` function that gives the hash of the
/// leaves `[start, end)`: where the hashes come from (the `merkle` database, the log) is
/// ``Ledger``'s business.
public enum MerkleTree {
    /// The root of the empty tree: SHA-256 of nothing.
    public static let emptyRoot: [UInt8] = ConcatenatingSHA256.digest([][...])

    /// The leaf hash of one log entry: `SHA-256(0x00 ‖ sequence (8 B BE) ‖ varint(len(stream
    /// key)) ‖ stream key ‖ offset (8 B BE) ‖ entry hash (32 B))`. The stream key is
    /// `pool ␀ identity ␀ dataset` in UTF-8; the entry hash is the one stored in the log row.
    public static func leafHash(sequence: UInt64, streamKey: [UInt8], offset: UInt64, entryHash: some Collection<UInt8>) -> [UInt8] {
        var w = ByteWriter(capacity: 1 + 8 + 2 + streamKey.count + 8 + 32)
        w.byte(0)
        w.fixed64(sequence)
        w.varint(UInt64(streamKey.count))
        w.raw(streamKey)
        w.fixed64(offset)
        w.raw(entryHash)
        return ConcatenatingSHA256.digest(w.bytes[...])
    }

    /// An interior node: `SHA-256(0x01 ‖ left ‖ right)`.
    public static func nodeHash(_ left: [UInt8], _ right: [UInt8]) -> [UInt8] {
        var bytes = [UInt8]()
        bytes.reserveCapacity(65)
        bytes.append(1)
        bytes.append(contentsOf: left)
        bytes.append(contentsOf: right)
        return ConcatenatingSHA256.digest(bytes[...])
    }

    /// The largest power of two strictly below `n` (`n` ≥ 2).
    static func split(_ n: UInt64) -> UInt64 {
        precondition(n >= 2)
        return 1 << (63 - UInt64((n - 1).leadingZeroBitCount))
    }

    /// Whether `[start, end)` is a complete subtree: its size a power of two and `start` a
    /// multiple of it. Only such subtrees are stored; every other node of a tree lies on its
    /// right edge and is made from them.
    static func isComplete(_ start: UInt64, _ end: UInt64) -> Bool {
        let size = end - start
        return size > 0 && size & (size - 1) == 0 && start % size == 0
    }

    /// MTH(D[start:end]) from the hashes of complete subtrees (`complete(start, size)`).
    static func hash(_ start: UInt64, _ end: UInt64, complete: (UInt64, UInt64) throws -> [UInt8]) rethrows -> [UInt8] {
        if start == end { return emptyRoot }
        if isComplete(start, end) { return try complete(start, end - start) }
        let k = split(end - start)
        return nodeHash(try hash(start, start + k, complete: complete), try hash(start + k, end, complete: complete))
    }

    /// RFC 6962 PATH(m, D[n]): the audit path of leaf `index` in the tree of the first `size`
    /// leaves, leaf end first. `node(start, end)` is MTH(D[start:end]).
    static func inclusionPath(index: UInt64, size: UInt64, node: (UInt64, UInt64) throws -> [UInt8]) rethrows -> [[UInt8]] {
        precondition(index < size)
        var path: [[UInt8]] = []
        // Walk down from the root, collecting siblings; the RFC lists them bottom-up.
        var start: UInt64 = 0, end = size, m = index
        while end - start > 1 {
            let k = split(end - start)
            if m < k {
                path.append(try node(start + k, end))
                end = start + k
            } else {
                path.append(try node(start, start + k))
                start += k
                m -= k
            }
        }
        return path.reversed()
    }

    /// RFC 6962 PROOF(m, D[n]): the consistency proof from the tree of the first `old` leaves to
    /// the tree of the first `new` leaves (0 < old < new; empty otherwise).
    static func consistencyPath(old: UInt64, new: UInt64, node: (UInt64, UInt64) throws -> [UInt8]) rethrows -> [[UInt8]] {
        guard old > 0, old < new else { return [] }
        var path: [[UInt8]] = []
        // SUBPROOF(m, D[start:end], b), iteratively from the top; entries collected top-down.
        var start: UInt64 = 0, end = new, m = old, complete = true
        while true {
            if m == end - start {
                if !complete { path.append(try node(start, end)) }
                break
            }
            let k = split(end - start)
            if m <= k {
                path.append(try node(start + k, end))
                end = start + k
            } else {
                path.append(try node(start, start + k))
                start += k
                m -= k
                complete = false
            }
        }
        return path.reversed()
    }

    // MARK: Verification (RFC 9162 §2.1.3.2 and §2.1.4.2, the iterative forms of RFC 6962's)

    /// The root an inclusion path leads to from `leaf` at `index` of a tree of `size` leaves,
    /// or nil when the path has the wrong length for that position.
    public static func root(fromInclusion path: [[UInt8]], leaf: [UInt8], index: UInt64, size: UInt64) -> [UInt8]? {
        guard index < size else { return nil }
        var fn = index, sn = size - 1, r = leaf
        for p in path {
            guard sn > 0 else { return nil }
            if fn & 1 == 1 || fn == sn {
                r = nodeHash(p, r)
                if fn & 1 == 0 {
                    while fn & 1 == 0, fn != 0 { fn >>= 1; sn >>= 1 }
                }
            } else {
                r = nodeHash(r, p)
            }
            fn >>= 1; sn >>= 1
        }
        return sn == 0 ? r : nil
    }

    /// Whether `path` proves that the tree of `new` leaves with root `newRoot` extends the tree
    /// of `old` leaves with root `oldRoot`. Equal sizes need an empty path and equal roots; the
    /// empty tree is extended by every tree.
    public static func verifyConsistency(old: UInt64, oldRoot: [UInt8], new: UInt64, newRoot: [UInt8], path: [[UInt8]]) -> Bool {
        if old == 0 { return path.isEmpty && oldRoot == emptyRoot }
        guard old <= new else { return false }
        if old == new { return path.isEmpty && oldRoot == newRoot }
        guard !path.isEmpty else { return false }
        var proof = path
        if old & (old - 1) == 0 { proof.insert(oldRoot, at: 0) }
        var fn = old - 1, sn = new - 1
        while fn & 1 == 1 { fn >>= 1; sn >>= 1 }
        var fr = proof[0], sr = proof[0]
        for c in proof.dropFirst() {
            guard sn > 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                fr = nodeHash(c, fr)
                sr = nodeHash(c, sr)
                if fn & 1 == 0 {
                    while fn & 1 == 0, fn != 0 { fn >>= 1; sn >>= 1 }
                }
            } else {
                sr = nodeHash(sr, c)
            }
            fn >>= 1; sn >>= 1
        }
        return fr == oldRoot && sr == newRoot && sn == 0
    }
}
