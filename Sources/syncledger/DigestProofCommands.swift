import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger digest`: a signed Merkle root of the log, or the key that signs them.
struct DigestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "digest",
        abstract: "Print a signed digest of the ledger (the Merkle root of its log at a commit position), or the key that signs them.",
        discussion: """
        A digest signs (Ed25519) the root of an RFC 6962 Merkle tree over the log's entries 1…N. \
        Anyone holding the public key (--public-key) checks it, and the proofs of `syncledger proof`, \
        without SyncLedger: see docs/proofs.md and tools/verify-proof. The signing key stays in the \
        secrets folder.
        """)
    @OptionGroup var data: DataDirectory
    @Option(help: "The tree size (commit sequence) to sign; repeat for several digests, one JSON line each. Default: the latest.")
    var at: [UInt64] = []
    @Flag(help: "Print each digest as one line of JSON (what `proof` and tools/verify-proof read).") var json = false
    @Flag(name: .customLong("public-key"), help: "Print the public key that signs the digests, as PEM (with --json: key id, raw base64 and PEM).")
    var publicKey = false
    @Option(help: .hidden) var progressAfter = 1.0

    func validate() throws {
        if publicKey, !at.isEmpty { throw ValidationError("--public-key takes no --at") }
        guard at.count <= 100_000 else { throw ValidationError("at most 100000 --at values") }
    }

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        if publicKey {
            let key = try ledger.digestPublicKey
            if json {
                printLine(["algorithm": .string(SignedDigest.algorithm), "keyId": .string(key.keyID),
                           "publicKey": .string(Data(key.raw).base64EncodedString()), "pem": .string(key.pem)])
            } else {
                print(key.pem, terminator: "")
            }
            return
        }
        let sizes = at.isEmpty ? [try ledger.lastSequence] : at
        let top = sizes.max() ?? 0
        let digests = try await withElapsedProgress("hashing \(top) entries", after: progressAfter) {
            try sizes.map { try ledger.signedDigest(size: $0) }
        }
        for digest in digests {
            if json {
                print(digest.json)
            } else {
                print("ledger \(digest.ledgerID) tree size \(digest.treeSize) root \(hex(digest.rootHash)) signed by \(SignedDigest.algorithm) key \(digest.keyID)")
            }
        }
    }
}

/// `syncledger proof`: inclusion and consistency proofs against signed digests.
struct ProofCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proof",
        abstract: "Prove an entry is in a signed digest, or that a later digest extends an earlier one.",
        discussion: "Proofs are JSON (docs/proofs.md); tools/verify-proof checks them with only the public key.",
        subcommands: [ProofInclusion.self, ProofConsistency.self])
}

/// `syncledger proof inclusion`.
struct ProofInclusion: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inclusion",
        abstract: "Prove that one entry (by --sequence, or by stream and --offset) is in the tree a digest signs; prints JSON.")
    @OptionGroup var data: DataDirectory
    @Option(help: "The entry's commit sequence.") var sequence: UInt64?
    @Option(help: "With --offset: the entry's identity pool id.") var pool: String?
    @Option(help: "With --offset: the entry's identity id.") var identity: String?
    @Option(help: "With --offset: the entry's dataset name.") var dataset: String?
    @Option(help: "The entry's offset in its stream (with --pool, --identity, --dataset).") var offset: UInt64?
    @Option(help: "A file holding the digest (JSON, as `digest --json` prints; - for standard input). Default: a new digest of the whole ledger.")
    var digest: String?
    @Flag(help: "Leave the entry's body and previous hash out: a smaller proof, whose verifier takes the entry hash as given.")
    var noBody = false

    func validate() throws {
        let byStream = [pool, identity, dataset].allSatisfy { $0 != nil } && offset != nil
        let anyStream = pool != nil || identity != nil || dataset != nil || offset != nil
        guard (sequence != nil) != anyStream, sequence != nil || byStream else {
            throw ValidationError("name the entry by --sequence, or by --pool, --identity, --dataset and --offset")
        }
    }

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let sequence = try self.sequence ?? ledger.sequence(of: StreamName(pool: pool!, identity: identity!, dataset: dataset!), offset: offset!)
        let given = try digest.map { try SignedDigest(json: readInput($0, what: "the digest"), what: "the digest in \($0)") }
        // The first digest or proof of a large ledger builds its stored tree: show that on a terminal.
        let proof = try await withElapsedProgress("hashing the log", after: 1.0) {
            try ledger.inclusionProof(sequence: sequence, digest: given ?? ledger.signedDigest(), withBody: !noBody)
        }
        print(proof.json)
        if let problem = proof.problem(key: try ledger.digestPublicKey) {
            throw CLIError("the proof printed does not verify: \(problem) — this ledger no longer holds the history the digest signed")
        }
    }
}

/// `syncledger proof consistency`.
struct ProofConsistency: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consistency",
        abstract: "Prove that the tree a later digest signs extends an earlier digest's (nothing changed or removed); prints JSON.")
    @OptionGroup var data: DataDirectory
    @Option(help: "A file holding the earlier digest (JSON; - for standard input).") var from: String?
    @Option(help: "A file holding the later digest. Default: a new digest of the whole ledger.") var to: String?
    @Option(help: "A file of digests, one JSON line each, in growing tree size: prints a proof for each consecutive pair, one JSON line each.")
    var chain: String?

    func validate() throws {
        guard (from != nil) != (chain != nil) else { throw ValidationError("give --from (and optionally --to), or --chain") }
        if chain != nil, to != nil { throw ValidationError("--chain takes no --to") }
    }

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let key = try ledger.digestPublicKey
        var pairs: [(SignedDigest, SignedDigest)] = []
        if let chain {
            let lines = try readInput(chain, what: "the digests", limit: 1 << 30).split(separator: UInt8(ascii: "\n"))
            var digests: [SignedDigest] = []
            for (i, line) in lines.enumerated() where !line.allSatisfy({ $0 == 32 || $0 == 13 }) {
                digests.append(try SignedDigest(json: line, what: "the digest on line \(i + 1) of \(chain)"))
            }
            pairs = Array(zip(digests, digests.dropFirst()))
        } else if let from {
            let earlier = try SignedDigest(json: readInput(from, what: "the earlier digest"), what: "the earlier digest in \(from)")
            let given = try to.map { try SignedDigest(json: readInput($0, what: "the later digest"), what: "the later digest in \($0)") }
            let later = try await withElapsedProgress("hashing the log", after: 1.0) { try given ?? ledger.signedDigest() }
            pairs = [(earlier, later)]
        }
        var failures: [String] = []
        for (earlier, later) in pairs {
            let proof = try ledger.consistencyProof(from: earlier, to: later)
            print(proof.json)
            if let problem = proof.problem(key: key) { failures.append("\(earlier.treeSize) → \(later.treeSize): \(problem)") }
        }
        if let first = failures.first {
            throw CLIError("\(failures.count) proof(s) printed do not verify, the first \(first) — this ledger no longer holds the history the digests signed")
        }
    }
}

/// Lowercase hex.
private func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

/// The bytes of file `path`, or of standard input for `-`; at most `limit` bytes.
private func readInput(_ path: String, what: String, limit: Int = 1 << 20) throws -> [UInt8] {
    let data: Data
    if path == "-" {
        data = FileHandle.standardInput.readDataToEndOfFile()
    } else {
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch { throw CLIError.file("cannot read \(what)", path, error) }
    }
    guard data.count <= limit else { throw CLIError("\(what) in \(path) is \(data.count) bytes; at most \(limit) are read") }
    return Array(data)
}
