// proof-bench: the size and cost of signed digests and proofs against the size of the ledger
// (issue 14). Writes a ledger of --entries entries through the library (UpdateRecords, one
// record each, over --streams streams, fsync off), then for each tree size of --sizes signs a
// digest and makes --proofs inclusion proofs (random entries) and --proofs consistency proofs
// (from a random smaller tree), writing them as JSON lines to --out for tools/proof-bench's
// independent verifier to time.
//
//   proof-bench --data DIR --out DIR [--entries 1000000] [--sizes 10000,100000,1000000]
//               [--proofs 1000] [--streams 64]
//
// A DIR that already holds enough entries is reused as it is (its Merkle tree too). Every tree
// size is measured on the same ledger: a proof depends on the tree size only, and the stored
// tree of a smaller ledger is a prefix of it. Prints one line per size to stdout:
// `size N inclusion_hashes A/M inclusion_bytes B gen_us G consistency_hashes A/M consistency_bytes B gen_us G`.
import Foundation
import SyncLedger
import Synchronization

struct Options: Sendable {
    var data = ""
    var out = ""
    var entries = 1_000_000
    var sizes = [10_000, 100_000, 1_000_000]
    var proofs = 1000
    var streams = 64

    init(_ args: [String]) {
        var i = 1
        func next() -> String {
            i += 1
            guard i < args.count else { fail("missing value for \(args[i - 1])") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--data": data = next()
            case "--out": out = next()
            case "--entries": entries = Int(next()) ?? 0
            case "--sizes": sizes = next().split(separator: ",").map { Int($0) ?? 0 }
            case "--proofs": proofs = Int(next()) ?? 0
            case "--streams": streams = Int(next()) ?? 0
            default: fail("unknown option \(args[i])")
            }
            i += 1
        }
        guard !data.isEmpty, !out.isEmpty else { fail("--data DIR and --out DIR are required") }
        guard entries > 0, proofs > 0, streams > 0, sizes.allSatisfy({ (1...entries).contains($0) }) else {
            fail("--sizes must be from 1 to --entries; --entries, --proofs and --streams positive")
        }
    }
}

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("proof-bench: \(text)\n".utf8))
    exit(2)
}

func say(_ text: String) {
    FileHandle.standardError.write(Data("proof-bench: \(text)\n".utf8))
}

func seconds(_ d: Duration) -> Double { d.inSeconds }

/// Writes entries until the ledger holds `target`: each of `streams` tasks owns one dataset and
/// replaces one record in it, one entry per call.
final class Remaining: Sendable {
    let value: Atomic<Int>
    init(_ n: Int) { value = Atomic(n) }
    /// Takes one; false when none was left.
    func take() -> Bool { value.subtract(1, ordering: .relaxed).newValue >= 0 }
    func giveBack() { value.add(1, ordering: .relaxed) }
}

func fill(_ ledger: Ledger, to target: Int, streams: Int) async throws {
    let start = try Int(ledger.lastSequence)
    guard start < target else { return }
    let remaining = Remaining(target - start)
    let clock = ContinuousClock()
    let began = clock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for s in 0..<streams {
            group.addTask {
                let stream = try StreamName(pool: "us-east-1:00000000-0000-0000-0000-00000000beef", identity: "us-east-1:\(String(format: "%08x", s))-0000-0000-0000-000000000000", dataset: "proofs")
                var page = try ledger.listRecords(stream)
                var count = page.records.first(where: { $0.key == "k" })?.syncCount ?? 0
                while remaining.take() {
                    let patch = RecordPatch(op: .replace, key: "k", value: "value \(count) of stream \(s)", syncCount: count)
                    do {
                        count = try await ledger.updateRecords(stream, patches: [patch], sessionToken: page.syncSessionToken).syncCount
                    } catch let error as LedgerError where error.code == .invalidSessionToken {
                        page = try ledger.listRecords(stream)
                        remaining.giveBack()
                    }
                }
            }
        }
        try await group.waitForAll()
    }
    let took = seconds(clock.now - began)
    say("wrote \(target - start) entries in \(String(format: "%.1f", took)) s (\(Int(Double(target - start) / took))/s)")
}

let options = Options(CommandLine.arguments)
var ledgerOptions = LedgerOptions()
ledgerOptions.durable = false
ledgerOptions.sessionLifetime = .seconds(86_400)
let ledger: Ledger
do { ledger = try Ledger(directory: options.data, options: ledgerOptions) } catch { fail("\(error)") }
do {
    try FileManager.default.createDirectory(atPath: options.out, withIntermediateDirectories: true)
    try await fill(ledger, to: options.entries, streams: options.streams)
    let clock = ContinuousClock()
    let before = ledger.diskBytes
    var began = clock.now
    let top = try ledger.signedDigest(size: UInt64(options.entries))
    say("first digest of \(top.treeSize) entries (builds the stored tree as needed): \(String(format: "%.2f", seconds(clock.now - began))) s, data file +\(ledger.diskBytes - before) bytes")
    try top.json.write(toFile: options.out + "/digest-\(top.treeSize).json", atomically: true, encoding: .utf8)
    try ledger.digestPublicKey.pem.write(toFile: options.out + "/key.pem", atomically: true, encoding: .utf8)
    var rng = SystemRandomNumberGenerator()
    for size in options.sizes {
        let n = UInt64(size)
        began = clock.now
        let digest = try ledger.signedDigest(size: n)
        let digestSeconds = seconds(clock.now - began)
        var inclusion: [String] = [], consistency: [String] = []
        var inclusionHashes: [Int] = [], consistencyHashes: [Int] = []
        began = clock.now
        for _ in 0..<options.proofs {
            let proof = try ledger.inclusionProof(sequence: UInt64.random(in: 1...n, using: &rng), digest: digest)
            inclusionHashes.append(proof.path.count)
            inclusion.append(proof.json)
        }
        let inclusionSeconds = seconds(clock.now - began)
        var olds: [SignedDigest] = []
        for _ in 0..<options.proofs { olds.append(try ledger.signedDigest(size: UInt64.random(in: 1...n, using: &rng))) }
        began = clock.now
        for old in olds {
            let proof = try ledger.consistencyProof(from: old, to: digest)
            consistencyHashes.append(proof.path.count)
            consistency.append(proof.json)
        }
        let consistencySeconds = seconds(clock.now - began)
        try (inclusion.joined(separator: "\n") + "\n").write(toFile: options.out + "/inclusion-\(size).jsonl", atomically: true, encoding: .utf8)
        try (consistency.joined(separator: "\n") + "\n").write(toFile: options.out + "/consistency-\(size).jsonl", atomically: true, encoding: .utf8)
        func mean(_ xs: [Int]) -> String { String(format: "%.1f", Double(xs.reduce(0, +)) / Double(xs.count)) }
        func bytes(_ xs: [String]) -> Int { xs.reduce(0) { $0 + $1.utf8.count } / xs.count }
        print("size \(size) digest_ms \(String(format: "%.2f", digestSeconds * 1000))"
              + " inclusion_hashes \(mean(inclusionHashes))/\(inclusionHashes.max()!) inclusion_bytes \(bytes(inclusion))"
              + " inclusion_gen_us \(Int(inclusionSeconds * 1e6) / options.proofs)"
              + " consistency_hashes \(mean(consistencyHashes))/\(consistencyHashes.max()!) consistency_bytes \(bytes(consistency))"
              + " consistency_gen_us \(Int(consistencySeconds * 1e6) / options.proofs)")
    }
    ledger.close()
} catch {
    fail("\(error)")
}
