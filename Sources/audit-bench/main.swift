// audit-bench: blame and diff of one stream ÷ a raw scan of that stream, in a large ledger and in
// a small one (issue 14), through the library.
//
//   audit-bench --data DIR [--ledger-entries 1000000] [--small-entries 40000]
//               [--stream-entries 20000] [--keys 100] [--callers 64] [--rounds 5]
//
// DIR must not exist (it is made, and left for a look; the tool prints its size). Two ledgers are
// built in fast mode (no fsync) by `updateRecords` from `--callers` concurrent callers, each on
// streams of its own: in each, one audited stream of --stream-entries entries (one record each,
// over --keys keys) is interleaved with the other streams' entries all through the ledger, so its
// entries lie scattered over the whole log, as a long-lived user's do. The large ledger holds
// --ledger-entries entries in all, the small one --small-entries.
//
// In each ledger, every round times, on the audited stream:
// - raw scan: `forEachEntry` over the whole stream (each entry read through the index and
//   decoded), the baseline;
// - blame: `blame` of now (the view, one lookup of the entry that set each record);
// - blame at the head by replay: `blame(at: .syncCount(head))` (one replay of the stream);
// - diff: `diff(from: .syncCount(head / 2))` to now (one replay of the stream);
// - diff from 0: `diff(from: .syncCount(0))` to now.
// Ratios are the raw scan's median seconds ÷ the query's median seconds in the same ledger and
// run (goal ≥ 0.3), and the large ledger's ratio beside the small one's shows whether the
// cost follows the stream or the ledger. `statistics` of the whole ledger is timed once, for
// information.
import Foundation
import SyncLedger
import Synchronization

struct Options {
    var data = ""
    var ledgerEntries = 1_000_000
    var smallEntries = 40_000
    var streamEntries = 20_000
    var keys = 100
    var callers = 64
    var rounds = 5

    init(_ args: [String]) {
        var i = 1
        func next() -> String {
            i += 1
            guard i < args.count else { fail("missing value for \(args[i - 1])") }
            return args[i]
        }
        func number() -> Int {
            let text = next()
            guard let n = Int(text), n > 0 else { fail("\(args[i - 1]) needs a positive number, not \(text)") }
            return n
        }
        while i < args.count {
            switch args[i] {
            case "--data": data = next()
            case "--ledger-entries": ledgerEntries = number()
            case "--small-entries": smallEntries = number()
            case "--stream-entries": streamEntries = number()
            case "--keys": keys = number()
            case "--callers": callers = number()
            case "--rounds": rounds = number()
            default: fail("unknown option \(args[i])")
            }
            i += 1
        }
        guard !data.isEmpty else { fail("give --data DIR (a directory that does not exist yet)") }
        guard !FileManager.default.fileExists(atPath: data) else { fail("\(data) exists; give a new directory") }
        guard streamEntries < smallEntries, smallEntries <= ledgerEntries else {
            fail("need --stream-entries < --small-entries <= --ledger-entries")
        }
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("audit-bench: \(message)\n".utf8))
    exit(64)
}

func note(_ message: String) {
    FileHandle.standardError.write(Data("audit-bench: \(message)\n".utf8))
}

/// Hands out work items 0, 1, 2, … to concurrent callers.
final class WorkCounter: Sendable {
    let total: Int
    private let next = Atomic<Int>(0)
    init(_ total: Int) { self.total = total }
    func claim() -> Int? {
        let n = next.add(1, ordering: .relaxed).oldValue
        return n < total ? n : nil
    }
}

/// The audited stream of a ledger.
let audited = try! StreamName(pool: "us-east-1:a0d17000-0000-4000-8000-000000000014", identity: "us-east-1:a0d17000-0000-4000-8000-0000000000aa", dataset: "audited")

/// Builds a ledger of `entries` entries of which `options.streamEntries` are the audited
/// stream's, spread evenly through the log.
func build(_ directory: String, entries: Int, options: Options) async throws -> Ledger {
    var ledgerOptions = LedgerOptions()
    ledgerOptions.durable = false
    ledgerOptions.initialMapSize = 2 << 30
    ledgerOptions.sessionLifetime = .seconds(6 * 3600)
    let ledger = try Ledger(directory: directory, options: ledgerOptions)
    let work = WorkCounter(entries)
    let every = entries / options.streamEntries
    let auditedToken = try ledger.listRecords(audited).syncSessionToken
    let started = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for caller in 0..<options.callers {
            // Each caller owns 8 other streams and the audited stream's keys k with k % callers == caller
            // (record sync counts are checked per key, so callers never conflict).
            let streams = try (0..<8).map { i in
                try StreamName(pool: "us-east-1:a0d17000-0000-4000-8000-000000000014",
                               identity: String(format: "us-east-1:a0d17000-0000-4000-8000-%012d", caller * 8 + i), dataset: "other")
            }
            let tokens = try streams.map { try ledger.listRecords($0).syncSessionToken }
            let owned = Array(stride(from: caller, to: options.keys, by: options.callers))
            group.addTask {
                var otherCounts = [[UInt64]](repeating: [UInt64](repeating: 0, count: 16), count: streams.count)
                var auditedCounts = [Int: UInt64]()
                var turn = 0
                while let item = work.claim() {
                    turn += 1
                    if item % every == 0, item / every < options.streamEntries, !owned.isEmpty {
                        let key = owned[turn % owned.count]
                        let patch = RecordPatch(op: .replace, key: "key-\(key)", value: "value \(item) of key \(key) " + String(repeating: "x", count: 40),
                                                syncCount: auditedCounts[key] ?? 0)
                        auditedCounts[key] = try await ledger.updateRecords(audited, patches: [patch], deviceID: "device-\(caller)",
                                                                            sessionToken: auditedToken).syncCount
                    } else {
                        let s = turn % streams.count, key = turn % 16
                        let patch = RecordPatch(op: .replace, key: "key-\(key)", value: "value \(item) " + String(repeating: "y", count: 40),
                                                syncCount: otherCounts[s][key])
                        otherCounts[s][key] = try await ledger.updateRecords(streams[s], patches: [patch], deviceID: "device-\(caller)",
                                                                             sessionToken: tokens[s]).syncCount
                    }
                    if item % 100_000 == 0, item > 0 { note("  \(item) entries written") }
                }
            }
        }
        try await group.waitForAll()
    }
    let head = try ledger.streams(pool: audited.pool).first { $0.stream == audited }?.syncCount ?? 0
    note(String(format: "built %@: %d entries (the audited stream %llu) in %.1f s", directory, entries, head, seconds(ContinuousClock.now - started)))
    return ledger
}

func seconds(_ d: Duration) -> Double {
    d.inSeconds
}

/// The median of `rounds` timings of `body`.
func median(_ rounds: Int, _ body: () throws -> Void) rethrows -> Double {
    var times: [Double] = []
    for _ in 0..<rounds {
        let start = ContinuousClock.now
        try body()
        times.append(seconds(ContinuousClock.now - start))
    }
    return times.sorted()[times.count / 2]
}

struct Row {
    let name: String
    let seconds: Double
    let lines: Int
}

/// Times the queries on the audited stream of `ledger`.
func measure(_ ledger: Ledger, rounds: Int) throws -> (scan: Double, entries: Int, rows: [Row]) {
    var entries = 0
    let scan = try median(rounds) {
        entries = 0
        try ledger.forEachEntry(in: audited) { _ in entries += 1; return true }
    }
    let head = UInt64(entries)
    var rows: [Row] = []
    func time(_ name: String, _ body: () throws -> Int) throws {
        var lines = 0
        let t = try median(rounds) { lines = try body() }
        rows.append(Row(name: name, seconds: t, lines: lines))
    }
    try time("blame (now, from the view)") { try ledger.blame(audited) { _ in true }.lines }
    try time("blame --sync-count head (replay)") { try ledger.blame(audited, at: .syncCount(head)) { _ in true }.lines }
    try time("diff --from-sync-count head/2 (replay)") { try ledger.diff(audited, from: .syncCount(head / 2)) { _ in true }.lines }
    try time("diff --from-sync-count 0 (replay)") { try ledger.diff(audited, from: .syncCount(0)) { _ in true }.lines }
    return (scan, entries, rows)
}

let options = Options(CommandLine.arguments)
try FileManager.default.createDirectory(atPath: options.data, withIntermediateDirectories: true)
var results: [(entries: Int, scan: Double, streamEntries: Int, rows: [Row], stats: Double)] = []
for (name, entries) in [("small", options.smallEntries), ("large", options.ledgerEntries)] {
    let ledger = try await build(options.data + "/" + name, entries: entries, options: options)
    note("measuring the \(name) ledger (\(options.rounds) rounds)")
    let (scan, streamEntries, rows) = try measure(ledger, rounds: options.rounds)
    let statsStart = ContinuousClock.now
    let total = try ledger.statistics(by: .identity) { _ in true }
    let stats = seconds(ContinuousClock.now - statsStart)
    note("statistics of \(total.entries) entries, \(total.streams) streams, \(total.bytes) bytes: \(String(format: "%.2f", stats)) s")
    results.append((entries, scan, streamEntries, rows, stats))
    ledger.close()
}
let small = results[0], large = results[1]
print("audited stream: \(large.streamEntries) entries; median of \(options.rounds) rounds; ratio = raw scan ÷ query (goal ≥ 0.3)\n")
print("| query on the audited stream | ledger of \(large.entries) entries | ratio | ledger of \(small.entries) entries | ratio | large ÷ small ratio |")
print("|---|---:|---:|---:|---:|---:|")
print(String(format: "| raw scan (forEachEntry, decoded) | %.1f ms | 1 | %.1f ms | 1 | |", large.scan * 1000, small.scan * 1000))
for (l, s) in zip(large.rows, small.rows) {
    let lr = large.scan / l.seconds, sr = small.scan / s.seconds
    print(String(format: "| %@ (%d lines) | %.2f ms | **%.2f %@** | %.2f ms | %.2f | %.2f |", l.name, l.lines, l.seconds * 1000, lr,
                 lr >= 0.3 ? "PASS" : "MISS", s.seconds * 1000, sr, lr / sr))
}
print(String(format: "| statistics of the whole ledger, by identity (once) | %.2f s | | %.3f s | | |", large.stats, small.stats))
