// message-footprint: memory and disk held by the idempotency keys of device messages, after
// N messages and after their purge, written through the library (Ledger.postMessage) with a
// clock the tool moves.
//
//   message-footprint --data DIR [--messages 1000000] [--identities 10000] [--bytes 64]
//                     [--concurrency 128] [--rounds 2] [--durable] [--purge-batch N]
//
// DIR must not exist (it is made). Each of the identities owns one device (syncDevice); the
// messages go round-robin to them, each with a random UUID as MessageId (as apps make them),
// Data {"payload": B bytes} and a time to live of 4 weeks. A round is: write N messages, look,
// move the clock 29 days on, purge (Ledger.purgeIdempotencyKeys with the 4-week retention),
// look. Looking reports:
//
// - entries and B-tree pages (× the page size) of `message-ids` (the keys) and `messages` (the
//   consumers' index, purged with them), and bytes per key;
// - the data file's size, its high-water mark (last page used), and — read with LMDB's own
//   freelist, the ledger closed for that moment — the pages in use and the free pages that
//   later writes reuse (LMDB never shrinks its file);
// - this process's resident memory (VmRSS, split into anonymous memory and mapped file pages)
//   right after the writes or the purge.
//
// Without --durable the ledger skips fsync (LedgerOptions.durable = false): the bytes are the
// same and the tool takes a minute rather than an hour; with it, every group commit syncs.
import Foundation
import LedgerStorage
import SyncLedger
import Synchronization

struct Options: Sendable {
    var data = ""
    var messages = 1_000_000
    var identities = 10_000
    var bytes = 64
    var concurrency = 128
    var rounds = 2
    var durable = false
    /// Keys per purge transaction (nil: the library's default).
    var purgeBatch: Int?

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
            case "--messages": messages = Int(next()) ?? 0
            case "--identities": identities = Int(next()) ?? 0
            case "--bytes": bytes = Int(next()) ?? 0
            case "--concurrency": concurrency = Int(next()) ?? 0
            case "--rounds": rounds = Int(next()) ?? 0
            case "--durable": durable = true
            case "--purge-batch": purgeBatch = Int(next())
            default: fail("unknown option \(args[i])")
            }
            i += 1
        }
        guard !data.isEmpty else { fail("--data DIR is required (a directory that does not exist yet)") }
        guard messages > 0, identities > 0, concurrency > 0, rounds > 0, (1...4000).contains(bytes) else { fail("bad numbers") }
    }
}

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("message-footprint: \(text)\n".utf8))
    exit(2)
}

func say(_ text: String) {
    FileHandle.standardError.write(Data("message-footprint: \(text)\n".utf8))
}

/// The ledger's clock: the real time plus an offset the tool moves.
let clockOffset = Atomic<Int64>(0)
let day: Int64 = 86_400_000

func seconds(_ d: Duration) -> Double { d.inSeconds }

/// Resident memory from /proc/self/status, in bytes: (VmRSS, RssAnon, RssFile, VmHWM).
func residentMemory() -> (rss: Int, anon: Int, file: Int, peak: Int) {
    var values: [String: Int] = [:]
    let text = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in text.split(separator: "\n") {
        let parts = line.split(whereSeparator: { $0 == ":" || $0 == " " || $0 == "\t" })
        if parts.count >= 2, let kb = Int(parts[1]) { values[String(parts[0])] = kb * 1024 }
    }
    return (values["VmRSS"] ?? 0, values["RssAnon"] ?? 0, values["RssFile"] ?? 0, values["VmHWM"] ?? 0)
}

/// What LMDB itself says of the file (read by LedgerStorage, which owns every C call).
typealias FileStatistics = EnvironmentStatistics

func fileStatistics(_ directory: String) -> FileStatistics {
    do { return try EnvironmentStatistics.read(directory: directory) } catch { fail("\(error)") }
}

/// One look at the ledger.
struct Snapshot {
    let label: String
    let keys: Int
    let keyPages: Int
    let indexEntries: Int
    let indexPages: Int
    let memory: (rss: Int, anon: Int, file: Int, peak: Int)
    var file = FileStatistics()
    let seconds: Double
    let rate: Double?
}

/// A counter the writer tasks share.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
    func next() -> Int { value.add(1, ordering: .relaxed).oldValue }
}

/// What the writing tasks share.
struct Run: Sendable {
    let options: Options
    let pool: IdentityPoolID
    let identities: [IdentityID]
    let filler: String
    let ledgerOptions: LedgerOptions

    func open() throws -> Ledger { try Ledger(directory: options.data, options: ledgerOptions) }

    /// Makes one device per identity; returns the codes, in identity order.
    func makeDevices(_ ledger: Ledger) async throws -> [String] {
        let start = ContinuousClock.now
        let counter = Counter()
        let made = try await withThrowingTaskGroup(of: [(Int, String)].self) { tasks in
            for _ in 0..<options.concurrency {
                tasks.addTask {
                    var made: [(Int, String)] = []
                    while true {
                        let n = counter.next()
                        guard n < identities.count else { return made }
                        let info = DeviceInfo(platform: .apns, osVersion: "17.4", appVersion: "2.3.1", model: "iPhone15,2", locale: "en_US")
                        made.append((n, try await ledger.syncDevice(pool: pool, caller: .identity(identities[n]), code: nil, info: info)))
                    }
                }
            }
            return try await tasks.reduce(into: [(Int, String)]()) { $0 += $1 }
        }
        say(String(format: "%d devices made in %.1f s", identities.count, seconds(ContinuousClock.now - start)))
        return made.sorted { $0.0 < $1.0 }.map(\.1)
    }

    /// Writes `count` messages, round-robin over the identities; returns messages per second.
    func writeMessages(_ ledger: Ledger, devices: [String], count: Int, round: Int) async throws -> Double {
        let start = ContinuousClock.now
        let counter = Counter()
        let step = max(count / 10, 1)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for _ in 0..<options.concurrency {
                tasks.addTask {
                    while true {
                        let n = counter.next()
                        guard n < count else { return }
                        let who = n % identities.count
                        let head = "\(round)-\(n)-"
                        // With SentAt, as docs/devices.md recommends: a message without it keeps its key.
                        let message = DeviceMessage(messageId: UUID().uuidString.lowercased(), timeToLive: DeviceMessage.maxTimeToLive,
                                                    sentAt: Timestamp(milliseconds: Timestamp.now.milliseconds + clockOffset.load(ordering: .relaxed)),
                                                    data: ["payload": head + filler.prefix(max(options.bytes - head.count, 0))])
                        _ = try await ledger.postMessage(pool: pool, identity: identities[who], deviceCode: devices[who], message: message)
                        if (n + 1) % step == 0 {
                            let elapsed = seconds(ContinuousClock.now - start)
                            say(String(format: "round %d: %d of %d messages, %.0f/s", round, n + 1, count, Double(n + 1) / elapsed))
                        }
                    }
                }
            }
            try await tasks.waitForAll()
        }
        return Double(count) / seconds(ContinuousClock.now - start)
    }
}

let options = Options(CommandLine.arguments)
guard !FileManager.default.fileExists(atPath: options.data) else { fail("\(options.data) exists; give a fresh directory") }
let run = Run(
    options: options,
    pool: try IdentityPoolID("us-east-1:0f00ba11-0000-4000-8000-00000000f00d"),
    identities: try (0..<options.identities).map { _ in try IdentityID("us-east-1:" + UUID().uuidString.lowercased()) },
    filler: String(repeating: "x", count: options.bytes),
    ledgerOptions: {
        var o = LedgerOptions()
        o.durable = options.durable
        o.clock = { Timestamp(milliseconds: Timestamp.now.milliseconds + clockOffset.load(ordering: .relaxed)) }
        return o
    }())

func look(_ ledger: Ledger, _ label: String, seconds: Double, rate: Double?) throws -> Snapshot {
    let footprint = try ledger.idempotencyFootprint()
    let ids = footprint.first { $0.name == "message-ids" }!, index = footprint.first { $0.name == "messages" }!
    return Snapshot(label: label, keys: ids.entries, keyPages: ids.pages, indexEntries: index.entries, indexPages: index.pages,
                    memory: residentMemory(), seconds: seconds, rate: rate)
}

say("writing to \(options.data) (\(options.durable ? "durable" : "no fsync"), \(options.concurrency) callers): \(options.identities) identities with one device each, \(options.rounds) rounds of \(options.messages) messages of \(options.bytes) B")
var snapshots: [Snapshot] = []
var devices: [String] = []
do {
    let ledger = try run.open()
    devices = try await run.makeDevices(ledger)
    ledger.close()
}
var fileBefore = fileStatistics(options.data)
for round in 1...options.rounds {
    var snapshot: Snapshot
    do {
        let ledger = try run.open()
        let start = ContinuousClock.now
        let rate = try await run.writeMessages(ledger, devices: devices, count: options.messages, round: round)
        snapshot = try look(ledger, "after \(round == 1 ? "" : "another ")\(options.messages.formatted()) messages", seconds: seconds(ContinuousClock.now - start), rate: rate)
        ledger.close()
    }
    snapshot.file = fileStatistics(options.data)
    snapshots.append(snapshot)
    clockOffset.add(29 * day, ordering: .relaxed)
    do {
        let ledger = try run.open()
        say("round \(round): the clock moves 29 days on; purging")
        let start = ContinuousClock.now
        let purged = if let batch = options.purgeBatch {
            try await ledger.purgeIdempotencyKeys(batch: batch)
        } else {
            try await ledger.purgeIdempotencyKeys()
        }
        let elapsed = seconds(ContinuousClock.now - start)
        say(String(format: "round %d: purged %d message keys in %.1f s", round, purged.messageKeys, elapsed))
        snapshot = try look(ledger, "29 days later, after the purge", seconds: elapsed, rate: Double(purged.messageKeys) / elapsed)
        ledger.close()
    }
    snapshot.file = fileStatistics(options.data)
    snapshots.append(snapshot)
}

// The table.
let page = snapshots[0].file.pageSize
func mb(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1e6) }
func mbPages(_ pages: Int) -> String { mb(pages * page) }
print("| idempotency keys of device messages (\(options.identities.formatted()) identities × 1 device, UUID message ids, \(options.bytes)-byte Data, page \(page) B\(options.durable ? "" : ", written without fsync")) | message-ids: keys, size | messages index: rows, size | bytes per key (both) | data file | high-water mark | pages in use / free | log + index | RSS (anon + file-mapped) | time |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
func logPages(_ f: FileStatistics) -> Int { (f.databases["log"]?.pages ?? 0) + (f.databases["index"]?.pages ?? 0) }
print("| before the messages (\(options.identities.formatted()) devices) | 0 | 0 | - | \(mb(fileBefore.fileBytes)) | \(mbPages(fileBefore.highWater)) | \(fileBefore.highWater - fileBefore.freePages) / \(fileBefore.freePages) | \(mbPages(logPages(fileBefore))) | - | - |")
for s in snapshots {
    let perKey = s.keys > 0 ? String(format: "%.0f", Double((s.keyPages + s.indexPages) * page) / Double(s.keys)) : "-"
    let time = s.rate.map { String(format: "%.1f s (%.0f/s)", s.seconds, $0) } ?? String(format: "%.1f s", s.seconds)
    print("| \(s.label) | \(s.keys.formatted()), \(mbPages(s.keyPages)) | \(s.indexEntries.formatted()), \(mbPages(s.indexPages)) | \(perKey) | \(mb(s.file.fileBytes)) | \(mbPages(s.file.highWater)) | \(s.file.highWater - s.file.freePages) / \(s.file.freePages) | \(mbPages(logPages(s.file))) | \(mb(s.memory.rss)) (\(mb(s.memory.anon)) + \(mb(s.memory.file))) | \(time) |")
}
// Growth of the file per round of writes: the second round reuses the pages the first purge freed.
var growth: [String] = []
var previous = fileBefore.fileBytes
for (i, s) in snapshots.enumerated() where i % 2 == 0 {
    growth.append("round \(i / 2 + 1): +\(mb(s.file.fileBytes - previous)) (log + index +\(mbPages(logPages(s.file) - logPages(i == 0 ? fileBefore : snapshots[i - 1].file))))")
    previous = s.file.fileBytes
}
print()
print("data file growth per \(options.messages.formatted()) messages: " + growth.joined(separator: "; "))
print("peak RSS (VmHWM) of the whole run: \(mb(residentMemory().peak)); the keys live in LMDB pages (the file), none in the heap")
