import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

@Suite struct HistoryTests {
    @Test func historyTimeTravelAndChangeFeed() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let s = stream("a")
            let t = stream("b")
            try await ledger.put(s, ["k": "1", "x": "x"])   // s@1 seq1
            clock.advance(seconds: 10)
            try await ledger.put(t, ["k": "other"])         // t@1 seq2
            try await ledger.put(s, ["k": "2"])             // s@2 seq3
            clock.advance(seconds: 10)
            try await ledger.put(s, ["k": nil])             // s@3 seq4
            try await ledger.deleteDataset(s)               // s@4 seq5
            try await ledger.put(s, ["k": "3"])             // s@5 seq6

            var changes: [KeyChange] = []
            try ledger.history(of: "k", in: s) { changes.append($0); return true }
            #expect(changes.map(\.offset) == [1, 2, 3, 4, 5])
            #expect(changes.map(\.event) == [
                .put(key: "k", value: "1", deviceModified: nil), .put(key: "k", value: "2", deviceModified: nil),
                .remove(key: "k", deviceModified: nil), .deleteDataset, .put(key: "k", value: "3", deviceModified: nil),
            ])

            #expect(try ledger.dataset(s, asOfSyncCount: 0).dataset == nil)
            #expect(try ledger.dataset(s, asOfSyncCount: 1).liveRecords == ["k": "1", "x": "x"])
            #expect(try ledger.dataset(s, asOfSyncCount: 2).liveRecords == ["k": "2", "x": "x"])
            #expect(try ledger.dataset(s, asOfSyncCount: 3).liveRecords == ["x": "x"])
            #expect(try ledger.dataset(s, asOfSyncCount: 4).dataset?.deleted == true)
            #expect(try ledger.dataset(s, asOfSyncCount: 99).liveRecords == ["k": "3"])
            let start = Timestamp(milliseconds: 1_800_000_000_000)
            #expect(try ledger.dataset(s, asOf: Timestamp(milliseconds: start.milliseconds + 5000)).liveRecords == ["k": "1", "x": "x"])
            #expect(try ledger.dataset(s, asOf: Timestamp(milliseconds: start.milliseconds + 10_000)).liveRecords == ["k": "2", "x": "x"])

            var feed: [(String, UInt64, UInt64)] = []
            try ledger.forEachCommit { feed.append(($0.stream.dataset.rawValue, $0.offset, $0.sequence)); return true }
            #expect(feed.map(\.0) == ["a", "b", "a", "a", "a", "a"])
            #expect(feed.map(\.2) == [1, 2, 3, 4, 5, 6])
            var tail: [UInt64] = []
            try ledger.forEachCommit(after: 4) { tail.append($0.sequence); return true }
            #expect(tail == [5, 6])
            #expect(try ledger.lastSequence == 6)
            #expect(try ledger.entries(in: s, from: 4).map(\.offset) == [4, 5])
        }
    }

    @Test func streamingCrossesBatchBoundaries() async throws {
        var options = LedgerOptions()
        options.durable = false
        try await withLedger(options) { ledger in
            let s = stream()
            for i in 0..<(Ledger.scanBatch * 2 + 10) { try await ledger.put(s, ["k\(i % 5)": "\(i)"]) }
            var offsets: [UInt64] = []
            try ledger.forEachEntry(in: s) { offsets.append($0.offset); return true }
            #expect(offsets == Array(1...UInt64(Ledger.scanBatch * 2 + 10)))
            var sequences = 0
            try ledger.forEachCommit { _ in sequences += 1; return true }
            #expect(sequences == offsets.count)
            #expect(try ledger.verify().entries == UInt64(offsets.count))
        }
    }

    @Test func hashChainLinksEntries() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1", "b": "x"])
            try await ledger.put(s, ["a": "2"])
            let entries = try ledger.entries(in: s)
            let stored = try #require(try ledger.streamSegment(s, after: 0)).entries.map(\.body)
            let h1 = LogEntry.chainHash(previous: LogEntry.genesisHash, stream: s, body: stored[0])
            #expect(entries[0].hash == h1)
            #expect(entries[1].hash == LogEntry.chainHash(previous: h1, stream: s, body: stored[1]))
            // The same content in another stream hashes differently.
            #expect(LogEntry.chainHash(previous: LogEntry.genesisHash, stream: stream("other"), body: stored[0]) != h1)
            // The same events encoded again get a fresh seed, so other commitments: a value
            // cannot be guessed from the hash by encoding candidates without the salt.
            let again = LogEntry.encodeBody(offset: 1, time: entries[0].time, author: entries[0].author, events: entries[0].events)
            #expect(LogEntry.chainHash(previous: LogEntry.genesisHash, stream: s, body: again) != h1)
            // Erasing a value keeps the hash: the canonical bytes hold its commitment.
            let erased = try #require(try LogEntry.erasingValues(stored[0], where: { $0 == "a" }))
            #expect(erased.erased == 1 && LogEntry.chainHash(previous: LogEntry.genesisHash, stream: s, body: erased.body) == h1)
            #expect(!erased.body.contains(subsequence: Array("1".utf8) + [1, UInt8(ascii: "x")]))
            var reader = ByteReader(erased.body)
            let decoded = try LogEntry.decodeBody(&reader)
            #expect(Set(decoded.events) == [.erased(key: "a", deviceModified: nil), .put(key: "b", value: "x", deviceModified: nil)])
            // Erasing again changes nothing; erasing the other value too still keeps the hash.
            #expect(try LogEntry.erasingValues(erased.body[...], where: { $0 == "a" }) == nil)
            let both = try #require(try LogEntry.erasingValues(erased.body[...], where: { _ in true }))
            #expect(LogEntry.chainHash(previous: LogEntry.genesisHash, stream: s, body: both.body) == h1)
            // Altering a value present breaks the hash.
            var altered = Array(stored[0])
            let index = try #require(altered.lastIndex(of: UInt8(ascii: "x")))
            altered[index] = UInt8(ascii: "y")
            #expect(LogEntry.chainHash(previous: LogEntry.genesisHash, stream: s, body: altered) != h1)
        }
    }

    @Test func entryBodiesRoundTripAndRefuseGarbage() throws {
        let events: [Event] = [.put(key: "k", value: "ü", deviceModified: Timestamp(milliseconds: -5)), .remove(key: "r", deviceModified: nil), .deleteDataset]
        let body = LogEntry.encodeBody(offset: 7, time: Timestamp(milliseconds: 42), author: "dev", events: events)
        var reader = ByteReader(body)
        let decoded = try LogEntry.decodeBody(&reader)
        #expect(decoded.offset == 7 && decoded.time.milliseconds == 42 && decoded.author == "dev" && decoded.events == events)
        // Every truncation fails cleanly.
        for cut in 0..<body.count {
            var r = ByteReader(Array(body[..<cut]))
            #expect(throws: DecodeFailure.self) { _ = try LogEntry.decodeBody(&r); try r.expectEnd() }
        }
        var bad = body
        bad[0] = 9
        var r = ByteReader(bad)
        #expect(throws: DecodeFailure.self) { _ = try LogEntry.decodeBody(&r) }
    }
}

@Suite struct VerificationTests {
    /// Overwrites the log value at `sequence` through the storage layer, behind the ledger's back.
    private func tamper(_ dir: String, sequence: UInt64, _ change: (inout [UInt8]) -> Void) throws {
        let env = try Environment(path: dir)
        let log = try env.openDatabase("log")
        try env.write { txn in
            var value = try txn.get(log, key: .bigEndian(sequence))!
            change(&value)
            try txn.put(log, key: .bigEndian(sequence), value: value)
        }
    }

    private func populated() async throws -> String {
        let dir = temporaryPath("verify")
        let ledger = try Ledger(directory: dir)
        try await ledger.put(stream("a"), ["k": "1"])      // seq 1
        try await ledger.put(stream("b"), ["k": "1"])      // seq 2
        try await ledger.put(stream("b"), ["k": "hello"])  // seq 3: b@2
        try await ledger.put(stream("b"), ["k": "3"])      // seq 4: b@3
        #expect(try ledger.verify().isValid)
        ledger.close()
        return dir
    }

    @Test func alteredValueBreaksTheChainAtItsOffset() async throws {
        let dir = try await populated()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try tamper(dir, sequence: 3) { value in
            let i = value.lastIndex(of: UInt8(ascii: "h"))!
            value[i] = UInt8(ascii: "j")  // "hello" → "jello", still valid UTF-8
        }
        let ledger = try Ledger(directory: dir)
        defer { ledger.close() }
        let report = try ledger.verify()
        #expect(!report.isValid)
        #expect(report.problem?.stream == stream("b"))
        #expect(report.problem?.offset == 2)
        #expect(report.problem?.message.contains("hash") == true)
    }

    @Test func undecodableEntryIsReportedWithItsPlace() async throws {
        let dir = try await populated()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try tamper(dir, sequence: 4) { value in value.removeLast(3) }
        let ledger = try Ledger(directory: dir)
        defer { ledger.close() }
        let report = try ledger.verify()
        #expect(report.problem?.stream == stream("b"))
        #expect(report.problem?.offset == 3)
        // Reading that history is a typed corruptData error, not a crash.
        let error = await expectLedgerError(.corruptData) { _ = try ledger.entries(in: stream("b")) }
        #expect(error?.message.contains("sequence 4") == true)
    }

    @Test func tamperedViewIsFound() async throws {
        let dir = try await populated()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let env = try Environment(path: dir)
            let datasets = try env.openDatabase("datasets")
            try env.write { txn in
                let key: [UInt8] = .bigEndian(1)
                var value = try txn.get(datasets, key: key)!
                value[2] ^= 1  // the record count
                try txn.put(datasets, key: key, value: value)
            }
        }
        let ledger = try Ledger(directory: dir)
        defer { ledger.close() }
        let report = try ledger.verify()
        #expect(report.problem?.stream == stream("a"))
        #expect(report.problem?.message.contains("view") == true)
        // Rebuilding from the log repairs it.
        try await ledger.rebuildViews()
        #expect(try ledger.verify().isValid)
    }

    @Test func digestsAgreeForEqualLogsOnly() async throws {
        let a = try await populated()
        let b = try await populated()
        defer { try? FileManager.default.removeItem(atPath: a); try? FileManager.default.removeItem(atPath: b) }
        let la = try Ledger(directory: a)
        let lb = try Ledger(directory: b)
        defer { la.close(); lb.close() }
        // Different server times make different hashes: digests differ…
        #expect(try la.digest() != lb.digest())
        // …and a digest is stable for one ledger.
        #expect(try la.digest() == la.verify().digest)
    }

    @Test func newerFormatIsRefused() async throws {
        let dir = try await populated()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let env = try Environment(path: dir)
            let meta = try env.openDatabase("meta")
            try env.write { txn in try txn.put(meta, key: Array("format".utf8), value: .bigEndian(99)) }
        }
        do {
            _ = try Ledger(directory: dir)
            Issue.record("opened a newer format")
        } catch let error as LedgerError {
            #expect(error.code == .unsupportedFormat)
            #expect(error.message.contains("99") && error.message.contains(dir))
        }
    }

    @Test func notALedgerIsAStorageError() throws {
        let dir = temporaryPath("garbage")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Data(repeating: 7, count: 8192).write(to: URL(fileURLWithPath: dir + "/data.mdb"))
        do {
            _ = try Ledger(directory: dir)
            Issue.record("opened garbage")
        } catch let error as LedgerError {
            #expect(error.code == .storage && error.message.contains(dir))
        }
    }

    @Test func commitSummariesAreTheFeedWithoutItsRecords() async throws {
        try await withLedger { ledger in
            _ = try await ledger.put(stream("a"), ["k": "1"], device: "phone")
            _ = try await ledger.put(stream("b"), ["k": "2"])
            _ = try await ledger.put(stream("a"), ["k": nil], device: "tablet")
            var full: [LogEntry] = []
            try ledger.forEachCommit(after: 0) { full.append($0); return true }
            let summaries = try ledger.commitSummaries(after: 0, limit: 100)
            #expect(summaries.map(\.sequence) == full.map(\.sequence))
            #expect(summaries.map(\.stream) == full.map(\.stream))
            #expect(summaries.map(\.offset) == full.map(\.offset))
            #expect(summaries.map(\.time) == full.map(\.time))
            #expect(summaries.map(\.device) == ["phone", nil, "tablet"])
        }
    }
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs in these bytes.
    func contains(subsequence needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return needle.isEmpty }
        return (0...(count - needle.count)).contains { self[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
