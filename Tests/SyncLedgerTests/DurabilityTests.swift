import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// The directory holding the built products (the crash writer sits beside the test bundle).
func productsDirectory() -> URL {
    var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("ledger-crash-writer").path) { return url }
    }
    // Fall back to the usual SwiftPM layout relative to the package.
    return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/debug")
}

/// One acknowledged write, as the crash writer printed it.
struct Ack: Hashable {
    let dataset: String
    let offset: UInt64
    let key: String
    let length: Int
    let prefix: String

    init?(_ line: Substring) {
        let parts = line.split(separator: " ")
        guard parts.count == 6, parts[0] == "ACK", let offset = UInt64(parts[2]), let length = Int(parts[4]) else { return nil }
        dataset = String(parts[1]); self.offset = offset; key = String(parts[3]); self.length = length; prefix = String(parts[5])
    }
}

/// Runs the crash writer; returns its output after it exits or after `killAfter` (SIGKILL).
func runWriter(_ dir: String, writers: Int, extra: [String] = [], killAfter: Duration?) throws -> String {
    let process = Process()
    process.executableURL = productsDirectory().appendingPathComponent("ledger-crash-writer")
    process.arguments = [dir, "\(writers)"] + extra
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    if let killAfter {
        Thread.sleep(forTimeInterval: Double(killAfter.components.seconds) + Double(killAfter.components.attoseconds) / 1e18)
        kill(process.processIdentifier, SIGKILL)
    }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

/// Checks that every acknowledged write is in the log with its value, and the ledger verifies.
func checkAcknowledged(_ acks: [Ack], in dir: String) throws {
    let ledger = try Ledger(directory: dir)
    defer { ledger.close() }
    let report = try ledger.verify()
    #expect(report.isValid, "\(report)")
    for (dataset, group) in Dictionary(grouping: acks, by: \.dataset) {
        let s = try StreamName(pool: "crash:0", identity: "crash:1", dataset: dataset)
        let entries = Dictionary(uniqueKeysWithValues: try ledger.entries(in: s, limit: 1_000_000).map { ($0.offset, $0) })
        for ack in group {
            guard let entry = entries[ack.offset], case .put(let key, let value, _) = entry.events.first else {
                Issue.record("acknowledged write \(dataset)@\(ack.offset) is missing")
                continue
            }
            #expect(key == ack.key && value.hasPrefix(ack.prefix) && value.utf8.count == ack.length, "\(dataset)@\(ack.offset)")
        }
    }
}

@Suite(.serialized) struct DurabilityTests {
    /// Kills a writing process at random moments, many times; after each reopen every
    /// acknowledged write is there and verify passes.
    @Test func acknowledgedWritesSurviveSIGKILL() throws {
        let dir = temporaryPath("crash")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var rng = SeededRandom(state: 20261122)
        var all: [Ack] = []
        for round in 0..<25 {
            let delay = Duration.milliseconds(Int.random(in: 30...350, using: &rng))
            let output = try runWriter(dir, writers: 8, killAfter: delay)
            let acks = output.split(separator: "\n").compactMap(Ack.init)
            all += acks
            try checkAcknowledged(all, in: dir)
            if round == 24 { #expect(all.count > 100, "the writer acknowledged only \(all.count) writes") }
        }
    }

    /// A file that may not grow acts as a full disk: writes fail with `.diskFull`, nothing
    /// half-written is visible, and what was acknowledged stays.
    @Test func fullDiskIsATypedErrorAndLosesNothing() throws {
        let dir = temporaryPath("full")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let output = try runWriter(dir, writers: 4, extra: ["\(3 << 20)", "20000"], killAfter: nil)
        let lines = output.split(separator: "\n")
        let acks = lines.compactMap(Ack.init)
        let errors = lines.filter { $0.hasPrefix("ERR") }
        #expect(!acks.isEmpty)
        #expect(errors.count == 4, "\(errors)")
        #expect(errors.allSatisfy { $0.contains("diskFull") }, "\(errors)")
        try checkAcknowledged(acks, in: dir)
        // With room again, writing goes on.
        let more = try runWriter(dir, writers: 2, killAfter: .milliseconds(300))
        try checkAcknowledged(acks + more.split(separator: "\n").compactMap(Ack.init), in: dir)
    }
}

@Suite struct ConcurrencyTests {
    @Test func concurrentCallersShareCommitsAndConflictsStayTheirOwn() async throws {
        try await withLedger { ledger in
            let streams = (0..<64).map { stream("c\($0 % 16)") }
            // 64 callers, 16 datasets: four callers race on each dataset with the same counts.
            let outcomes = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
                for (i, s) in streams.enumerated() {
                    group.addTask {
                        let token = try ledger.listRecords(s).syncSessionToken
                        do {
                            _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: "\(i)", syncCount: 0)], sessionToken: token)
                            return (i, true)
                        } catch let error as LedgerError where error.code == .conflict {
                            return (i, false)
                        }
                    }
                }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
            for d in 0..<16 {
                let racers = (0..<64).filter { $0 % 16 == d }
                #expect(racers.filter { outcomes[$0]! }.count == 1, "exactly one writer wins dataset \(d)")
            }
            for s in Set(streams) {
                #expect(try ledger.describeDataset(s).syncCount == 1)
            }
            let stats = ledger.writerStatistics
            #expect(stats.largestGroup > 1, "callers were grouped: \(stats)")
            #expect(stats.commits < stats.writes)
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func readersRunWhileWritersWrite() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["k": "0"])
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for i in 1...50 { try await ledger.put(s, ["k": "\(i)"]) }
                }
                group.addTask {
                    var last: UInt64 = 0
                    for _ in 0..<500 {
                        let count = try ledger.listRecords(s).datasetSyncCount
                        #expect(count >= last, "sync counts never go back")
                        last = count
                    }
                }
                try await group.waitForAll()
            }
            #expect(try ledger.values(s) == ["k": "50"])
        }
    }

    @Test func mapGrowsUnderTheLedger() async throws {
        var options = LedgerOptions()
        options.initialMapSize = 1 << 20
        options.durable = false
        try await withLedger(options) { ledger in
            for i in 0..<40 {
                try await ledger.put(stream("d\(i % 10)"), ["k\(i)": String(repeating: "x", count: 20_000)])
            }
            #expect(try ledger.verify().isValid)
            #expect(ledger.diskBytes > 1 << 20)
        }
    }

    @Test func writesAfterCloseFail() async throws {
        let dir = temporaryPath("closed")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Ledger(directory: dir)
        let token = try ledger.listRecords(stream()).syncSessionToken
        ledger.close()
        await expectLedgerError(.closed) {
            _ = try await ledger.updateRecords(stream(), patches: [RecordPatch(op: .replace, key: "k", value: "v", syncCount: 0)], sessionToken: token)
        }
    }
}
