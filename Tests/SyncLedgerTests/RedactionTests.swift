import Foundation
import LedgerStorage
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// Redaction: values erased across the history (by key, dataset or identity) while hashes,
/// `verify` and other data stay; the erasure audited; bad requests refused whole.
@Suite struct RedactionTests {
    /// Every value ever written to `stream`, as (offset, key, value), `.erased` as nil.
    func history(_ ledger: Ledger, _ stream: StreamName) throws -> [(UInt64, String, String?)] {
        var result: [(UInt64, String, String?)] = []
        try ledger.forEachEntry(in: stream) { entry in
            for event in entry.events {
                switch event {
                case .put(let key, let value, _): result.append((entry.offset, key, value))
                case .erased(let key, _): result.append((entry.offset, key, nil))
                default: break
                }
            }
            return true
        }
        return result
    }

    func heads(_ ledger: Ledger) throws -> [String: [UInt8]] {
        var result: [String: [UInt8]] = [:]
        try ledger.forEachCommit { entry in
            result["\(entry.stream)@\(entry.offset)"] = entry.hash
            return true
        }
        return result
    }

    @Test func randomWorkloadsRedactedByKeyDatasetAndIdentityKeepHashesAndEverythingElse() async throws {
        for (seed, scope) in [(1, "key"), (2, "dataset"), (3, "identity"), (4, "key"), (5, "identity")] {
            try await withLedger { ledger in
                var rng = SeededGenerator(seed: UInt64(seed))
                let identities = ["1", "2"], datasets = ["a", "b", "c"], keys = ["k1", "k2", "k3"]
                for n in 0..<120 {
                    let s = stream(datasets.randomElement(using: &rng)!, identity: identities.randomElement(using: &rng)!)
                    if Int.random(in: 0..<12, using: &rng) == 0, (try? ledger.values(s).isEmpty) == false {
                        _ = try await ledger.deleteDataset(s)
                        continue
                    }
                    var change: [String: String?] = [:]
                    for key in keys.shuffled(using: &rng).prefix(Int.random(in: 1...2, using: &rng)) {
                        change[key] = Int.random(in: 0..<5, using: &rng) == 0 ? nil : "secret-\(n)-\(key)"
                    }
                    _ = try await ledger.put(s, change)
                }
                let target = stream("a", identity: "1")
                if (try? ledger.values(target).isEmpty) != false { _ = try await ledger.put(target, ["k1": "secret-last-k1"]) }
                let hashesBefore = try heads(ledger)
                let untouched = try ledger.streams().map(\.stream).filter { $0.identity.rawValue != "test:1" }
                let untouchedHistory = try untouched.map { try history(ledger, $0).map { "\($0.0) \($0.1) \($0.2 ?? "-")" } }
                let (dataset, key): (DatasetName?, String?) = switch scope {
                case "key": (target.dataset, "k1")
                case "dataset": (target.dataset, nil)
                default: (nil, nil)
                }
                let report = try await ledger.redact(pool: target.pool, identity: target.identity, dataset: dataset, key: key, reason: "request \(seed)", author: "admin:AK")
                #expect(report.erasedValues > 0)
                // Hashes of every entry written before are unchanged; verify passes.
                let hashesAfter = try heads(ledger)
                for (entry, hash) in hashesBefore { #expect(hashesAfter[entry] == hash, "\(entry)") }
                #expect(try ledger.verify().isValid)
                // In scope: no value is left in the history; the current state dropped them.
                // (The identity's record of its redactions holds no user value: it is the audit.)
                for s in try ledger.streams().map(\.stream) where s.identity == target.identity && s.dataset != DatasetName.redactions {
                    let inScope = dataset.map { $0 == s.dataset } ?? true
                    guard inScope else { continue }
                    for (offset, k, value) in try history(ledger, s) where key.map({ $0 == k }) ?? true {
                        if offset < (try ledger.entries(in: s).last?.offset ?? 0) || value != nil {
                            #expect(value == nil, "\(s)@\(offset) \(k) still holds a value")
                        }
                    }
                    let current = try ledger.values(s)
                    if let key { #expect(current[key] == nil) } else { #expect(current.isEmpty) }
                }
                // Out of scope: exactly as before.
                #expect(try untouched.map { try history(ledger, $0).map { "\($0.0) \($0.1) \($0.2 ?? "-")" } } == untouchedHistory)
                if key != nil {
                    // The dataset's other keys keep their values.
                    let others = try history(ledger, target).filter { $0.1 != "k1" }
                    #expect(others.allSatisfy { $0.2 != nil })
                }
                // The erasure is audited, and doing it again erases nothing more.
                let recorded = try ledger.redactions(pool: target.pool)
                #expect(recorded.count == 1 && recorded[0].redaction.reason == "request \(seed)" && recorded[0].redaction.by == "admin:AK")
                #expect(recorded[0].sequence == report.sequence)
                let again = try await ledger.redact(pool: target.pool, identity: target.identity, dataset: dataset, key: key, reason: "again", author: "admin:AK")
                #expect(again.erasedValues == 0)
                #expect(try ledger.verify().isValid)
                // Views rebuilt from the redacted log equal the maintained ones.
                try await ledger.rebuildViews()
                #expect(try ledger.verify().isValid)
            }
        }
    }

    @Test func badRedactionsAreRefusedWhole() async throws {
        try await withLedger { ledger in
            let s = stream()
            _ = try await ledger.put(s, ["k": "v"])
            let before = try ledger.lastSequence
            await expectLedgerError(.invalidParameter) { _ = try await ledger.redact(pool: s.pool, identity: s.identity, reason: "  ", author: "a") }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.redact(pool: s.pool, identity: s.identity, key: "k", reason: "r", author: "a") }
            await expectLedgerError(.invalidParameter) {
                _ = try await ledger.redact(pool: s.pool, identity: s.identity, reason: String(repeating: "x", count: 1001), author: "a")
            }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.redact(pool: s.pool, identity: Ledger.systemIdentity, reason: "r", author: "a") }
            await expectLedgerError(.notFound) { _ = try await ledger.redact(pool: s.pool, identity: try IdentityID("test:404"), reason: "r", author: "a") }
            await expectLedgerError(.notFound) {
                _ = try await ledger.redact(pool: s.pool, identity: s.identity, dataset: try DatasetName("nope"), reason: "r", author: "a")
            }
            #expect(try ledger.lastSequence == before)
            #expect(try ledger.values(s) == ["k": "v"])
            // A write can never carry an erased value.
            await expectLedgerError(.invalidParameter) { _ = try ledger.validateChange([.erased(key: "k", deviceModified: nil)], for: s) }
        }
    }

    @Test func deviceMessagesOfTheIdentityAreErasedToo() async throws {
        try await withLedger { ledger in
            let s = stream()
            _ = try await ledger.put(s, ["k": "v"])
            let messages = StreamName(pool: s.pool, identity: s.identity, dataset: DatasetName.messages)
            let code = try await ledger.syncDevice(pool: s.pool, caller: .identity(s.identity), code: nil, info: DeviceInfo(platform: .gcm))
            _ = try await ledger.postMessage(pool: s.pool, identity: s.identity, deviceCode: code,
                                             message: DeviceMessage(messageId: "m1", timeToLive: 3600, data: ["card": "4111-1111"]))
            #expect(try history(ledger, messages).contains { $0.2?.contains("4111") == true })
            _ = try await ledger.redact(pool: s.pool, identity: s.identity, reason: "erasure", author: "admin")
            #expect(try history(ledger, messages).allSatisfy { $0.2 == nil })
            #expect(try ledger.verify().isValid)
            // A consumer no longer receives it.
            #expect(try ledger.messages(after: 0, limit: 100).messages.isEmpty)
        }
    }
}

extension RedactionTests {
    /// A value erased behind the ledger's back (no redaction record) is reported by verify,
    /// although the hash chain still holds.
    @Test func anErasureWithoutARedactionRecordIsReported() async throws {
        try await withLedger { ledger in
            let s = stream()
            _ = try await ledger.put(s, ["k": "v", "other": "w"])
            _ = try await ledger.put(stream("b"), ["x": "y"])
            #expect(try ledger.verify().isValid)
            try await ledger.write { txn in
                let sequence = try #require(try ledger.entries(in: s).first).sequence
                let row = try #require(try txn.get(ledger.schema.log, key: .bigEndian(sequence)))
                let erased = try #require(try LogEntry.erasingValues(row[40...], where: { $0 == "k" }))
                try txn.put(ledger.schema.log, key: .bigEndian(sequence), value: Array(row[..<40]) + erased.body)
            }
            let report = try ledger.verify()
            #expect(report.problem?.message.contains("no redaction recorded after it covers it") == true)
            #expect(report.problem?.stream == s)
            // A redaction of another key does not cover it; one of that key does.
            _ = try await ledger.redact(pool: s.pool, identity: s.identity, dataset: s.dataset, key: "other", reason: "r", author: "a")
            #expect(try ledger.verify().isValid == false)
            _ = try await ledger.redact(pool: s.pool, identity: s.identity, dataset: s.dataset, key: "k", reason: "r", author: "a")
            #expect(try ledger.verify().isValid)
        }
    }

    /// A follower's directory written by format 2 is not migrated in place: its hashes would no
    /// longer be its leader's. It says what to do instead, and is left as it was.
    @Test func aFormat2FollowerDirectoryIsRefused() async throws {
        let dir = temporaryPath("format2-follower")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let ledger = try Ledger(directory: dir)
            defer { ledger.close() }
            _ = try await ledger.put(stream(), ["k": "v"])
            try await ledger.write { txn in
                try txn.put(ledger.schema.meta, key: Array("format".utf8), value: .bigEndian(2))
                try txn.put(ledger.schema.meta, key: Array("replication-leader".utf8), value: Array("0123abcd".utf8))
            }
        }
        let error = await expectLedgerError(.unsupportedFormat) { _ = try Ledger(directory: dir) }
        #expect(error?.message.contains("follower of ledger 0123abcd") == true)
        #expect(error?.message.contains("start the follower again in an empty one") == true)
    }
}

/// A small deterministic generator (SplitMix64) for reproducible workloads.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
