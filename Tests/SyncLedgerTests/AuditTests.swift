import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

/// Blame, diff, statistics and follow against a model of random workloads, on the real LMDB
/// ledger.
@Suite struct AuditTests {
    /// What the model keeps of a record: its value (nil: removed) and who set it.
    struct Setter: Equatable {
        var value: String?
        var syncCount: UInt64
        var time: Timestamp
        var author: String
        var device: String?
    }

    /// The model: the dataset's records after every sync count (index = sync count), with the
    /// time of each entry and the last dataset delete.
    struct Model {
        var states: [[String: Setter]] = [[:]]
        var times: [Timestamp] = [Timestamp(milliseconds: 0)]
        var deletes: [Setter?] = [nil]

        var head: UInt64 { UInt64(states.count - 1) }

        mutating func apply(_ changes: [String: String?], delete: Bool, syncCount: UInt64, time: Timestamp, author: String, device: String?) {
            var state = states.last!
            var lastDelete = deletes.last!
            if delete {
                state.removeAll()
                lastDelete = Setter(value: nil, syncCount: syncCount, time: time, author: author, device: device)
            }
            for (key, value) in changes {
                state[key] = Setter(value: value, syncCount: syncCount, time: time, author: author, device: device)
            }
            states.append(state)
            times.append(time)
            deletes.append(lastDelete)
        }

        /// The sync count a point resolves to.
        func syncCount(at point: AuditPoint) -> UInt64 {
            switch point {
            case .syncCount(let n): n
            case .time(let t): UInt64(times.lastIndex { $0 <= t } ?? 0)
            }
        }

        /// Blame lines at a sync count, in key order.
        func blame(at syncCount: UInt64, includeRemoved: Bool) -> [BlameLine] {
            states[Int(syncCount)].filter { includeRemoved || $0.value.value != nil }
                .sorted { RecordKey($0.key) < RecordKey($1.key) }
                .map { BlameLine(key: $0.key, value: $0.value.value, origin: attribution($0.value)) }
        }

        /// Diff lines between two sync counts, in key order.
        func diff(from a: UInt64, to b: UInt64) -> [DiffLine] {
            let before = states[Int(a)], after = states[Int(b)]
            let keys = Set(before.keys).union(after.keys).sorted { RecordKey($0) < RecordKey($1) }
            return keys.compactMap { key in
                let old = before[key]?.value, new = after[key]?.value
                guard old != new else { return nil }
                let origin = after[key] ?? deletes[Int(b)]!
                return DiffLine(key: key, before: old, after: new, origin: attribution(origin))
            }
        }

        /// An attribution without the sequence (the model does not know it): 0.
        func attribution(_ s: Setter) -> Attribution {
            Attribution(syncCount: s.syncCount, sequence: 0, time: s.time, author: s.author, device: s.device)
        }
    }

    /// `origin` with sequence 0, to compare with the model.
    static func withoutSequence(_ line: BlameLine) -> BlameLine {
        BlameLine(key: line.key, value: line.value, origin: Attribution(syncCount: line.origin.syncCount, sequence: 0, time: line.origin.time,
                                                                       author: line.origin.author, device: line.origin.device))
    }

    static func withoutSequence(_ line: DiffLine) -> DiffLine {
        DiffLine(key: line.key, before: line.before, after: line.after,
                 origin: Attribution(syncCount: line.origin.syncCount, sequence: 0, time: line.origin.time, author: line.origin.author, device: line.origin.device))
    }

    /// Writes `changes` (nil: remove) as `author` from `device`, with the sync counts a
    /// well-behaved device sends; returns the new sync count.
    static func write(_ ledger: Ledger, _ s: StreamName, _ changes: [String: String?], author: String, device: String?) async throws -> UInt64 {
        let (records, page) = try ledger.allRecords(s)
        let counts = Dictionary(uniqueKeysWithValues: records.map { ($0.key, $0.syncCount) })
        let patches = changes.sorted { $0.key < $1.key }.map { key, value in
            value.map { RecordPatch(op: .replace, key: key, value: $0, syncCount: counts[key] ?? 0) }
                ?? RecordPatch(op: .remove, key: key, syncCount: counts[key] ?? 0)
        }
        return try await ledger.updateRecords(s, patches: patches, deviceID: device, caller: author, sessionToken: page.syncSessionToken).syncCount
    }

    /// A random workload on one dataset (puts, removes, dataset deletes by several authors and
    /// devices, interleaved with writes to another dataset), then blame and diff at random
    /// points compared with the model.
    @Test(arguments: [1, 2, 3, 4])
    func blameAndDiffMatchTheModel(seed: UInt64) async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        options.durable = false
        try await withLedger(options) { ledger in
            var random = SeededRandom(state: seed)
            let s = stream("audited"), other = stream("other")
            let keys = (0..<12).map { "k\($0)" } + ["é", "a long key " + String(repeating: "x", count: 420)]
            let authors = ["alice", "bob", "admin:AKIA0001"], devices: [String?] = [nil, "phone", "tablet"]
            var model = Model()
            var deleted = false
            for _ in 0..<160 {
                clock.advance(seconds: Int64.random(in: 0...3, using: &random))
                if Int.random(in: 0..<4, using: &random) == 0 {
                    _ = try await Self.write(ledger, other, ["x": "\(Int.random(in: 0..<100, using: &random))"], author: "carol", device: nil)
                }
                let author = authors.randomElement(using: &random)!, device = devices.randomElement(using: &random)!
                if Int.random(in: 0..<25, using: &random) == 0, model.head > 0, !deleted {
                    _ = try await ledger.deleteDataset(s, caller: author)
                    deleted = true
                    #expect(try ledger.entries(in: s, from: model.head + 1).first?.events == [.deleteDataset])
                    model.apply([:], delete: true, syncCount: model.head + 1, time: clock.read(), author: author, device: nil)
                    continue
                }
                var changes: [String: String?] = [:]
                for _ in 0..<Int.random(in: 1...3, using: &random) {
                    let key = keys.randomElement(using: &random)!
                    changes[key] = Int.random(in: 0..<4, using: &random) == 0 ? .some(nil) : "v\(Int.random(in: 0..<5, using: &random))"
                }
                // Removes of live keys only, as a device sends them.
                let live = model.states.last!
                changes = changes.filter { $0.value != nil || live[$0.key]?.value != nil }
                guard !changes.isEmpty else { continue }
                let syncCount = try await Self.write(ledger, s, changes, author: author, device: device)
                #expect(syncCount == model.head + 1)
                model.apply(changes, delete: false, syncCount: syncCount, time: clock.read(), author: author, device: device)
                deleted = false
            }

            // Blame of now (the view) and at random points (replay), removed records too.
            for removed in [false, true] {
                var now: [BlameLine] = []
                let summary = try ledger.blame(s, includeRemoved: removed) { now.append($0); return true }
                #expect(summary.syncCount == model.head)
                #expect(now.map(Self.withoutSequence) == model.blame(at: model.head, includeRemoved: removed))
                for line in now {  // the sequence names the entry at that sync count
                    #expect(try ledger.entries(in: s, from: line.origin.syncCount, limit: 1).first?.sequence == line.origin.sequence)
                }
                var replayed: [BlameLine] = []
                try ledger.blame(s, at: .syncCount(model.head), includeRemoved: removed) { replayed.append($0); return true }
                #expect(replayed == now)
            }
            for _ in 0..<20 {
                let n = UInt64.random(in: 0...model.head, using: &random)
                var lines: [BlameLine] = []
                let summary = try ledger.blame(s, at: .syncCount(n), includeRemoved: true) { lines.append($0); return true }
                #expect(summary.syncCount == n)
                #expect(lines.map(Self.withoutSequence) == model.blame(at: n, includeRemoved: true))
            }
            // By time: every time the model saw, and one between entries.
            for _ in 0..<10 {
                let t = model.times[Int.random(in: 1...Int(model.head), using: &random)]
                let n = model.syncCount(at: .time(t))
                var lines: [BlameLine] = []
                try ledger.blame(s, at: .time(t)) { lines.append($0); return true }
                #expect(lines.map(Self.withoutSequence) == model.blame(at: n, includeRemoved: false))
            }
            // Filters: author, device, sync-count range, key.
            var filter = AuditFilter()
            filter.author = "bob"
            filter.minimumSyncCount = model.head / 2
            var filtered: [BlameLine] = []
            try ledger.blame(s, filter: filter) { filtered.append($0); return true }
            #expect(filtered.map(Self.withoutSequence) == model.blame(at: model.head, includeRemoved: false)
                .filter { $0.origin.author == "bob" && $0.origin.syncCount >= model.head / 2 })
            filter = AuditFilter()
            filter.device = "phone"
            filter.key = "k3"
            filtered = []
            try ledger.blame(s, filter: filter, includeRemoved: true) { filtered.append($0); return true }
            #expect(filtered.map(Self.withoutSequence) == model.blame(at: model.head, includeRemoved: true)
                .filter { $0.key == "k3" && $0.origin.device == "phone" })

            // Diff between random sync counts, and between times.
            for _ in 0..<30 {
                var a = UInt64.random(in: 0...model.head, using: &random), b = UInt64.random(in: 0...model.head, using: &random)
                if a > b { swap(&a, &b) }
                var lines: [DiffLine] = []
                let summary = try ledger.diff(s, from: .syncCount(a), to: .syncCount(b)) { lines.append($0); return true }
                #expect((summary.fromSyncCount, summary.toSyncCount) == (a, b))
                #expect(lines.map(Self.withoutSequence) == model.diff(from: a, to: b), "diff \(a)…\(b)")
            }
            for _ in 0..<10 {
                var a = Int.random(in: 1...Int(model.head), using: &random), b = Int.random(in: 1...Int(model.head), using: &random)
                if a > b { swap(&a, &b) }
                let (ta, tb) = (model.times[a], model.times[b])
                var lines: [DiffLine] = []
                try ledger.diff(s, from: .time(ta), to: .time(tb)) { lines.append($0); return true }
                #expect(lines.map(Self.withoutSequence) == model.diff(from: model.syncCount(at: .time(ta)), to: model.syncCount(at: .time(tb))))
            }
            var lines: [DiffLine] = []
            try ledger.diff(s, from: .syncCount(0)) { lines.append($0); return true }
            #expect(lines.map(Self.withoutSequence) == model.diff(from: 0, to: model.head))
            #expect(lines.allSatisfy { $0.change == .added })
        }
    }

    @Test func badPointsAndUnknownDatasetsAreRefused() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1"])
            try await ledger.put(s, ["a": "2"])
            let missing = await expectLedgerError(.notFound) { try ledger.blame(stream("nope")) { _ in true } }
            #expect(missing?.message.contains("test:0/test:1/nope does not exist") == true)
            let past = await expectLedgerError(.invalidParameter) { try ledger.diff(s, from: .syncCount(3)) { _ in true } }
            #expect(past?.message.contains("from sync count 3 is past the last entry") == true)
            let backwards = await expectLedgerError(.invalidParameter) { try ledger.diff(s, from: .syncCount(2), to: .syncCount(1)) { _ in true } }
            #expect(backwards?.message.contains("from sync count 2 is after to sync count 1") == true)
            let future = Timestamp(milliseconds: clock.read().milliseconds + 60_000)
            let later = await expectLedgerError(.invalidParameter) { try ledger.blame(s, at: .time(future)) { _ in true } }
            #expect(later?.message.contains("is in the future") == true)
            var empty = AuditFilter()
            empty.minimumSyncCount = 5
            empty.maximumSyncCount = 4
            await expectLedgerError(.invalidParameter) { try ledger.statistics(filter: empty) { _ in true } }
        }
    }

    /// Statistics against counts made by walking the feed.
    @Test func statisticsMatchTheFeed() async throws {
        var options = LedgerOptions()
        options.durable = false
        try await withLedger(options) { ledger in
            var random = SeededRandom(state: 7)
            for _ in 0..<120 {
                let s = stream("d\(Int.random(in: 0..<3, using: &random))", identity: "\(Int.random(in: 0..<4, using: &random))",
                               pool: "p:\(Int.random(in: 0..<2, using: &random))")
                try await ledger.put(s, ["k": "\(Int.random(in: 0..<1000, using: &random))"], device: Bool.random(using: &random) ? "phone" : nil)
            }
            // The model: entries and bytes per identity from the log's own values.
            var expected: [String: (streams: Set<String>, entries: UInt64, bytes: UInt64)] = [:]
            let values = try ledger.read { txn in
                try txn.withCursor(ledger.schema.log) { cursor in
                    var sizes: [UInt64: Int] = [:]
                    var pair = try cursor.first()
                    while let current = pair { sizes[current.key.bigEndianUInt64()] = current.value.count; pair = try cursor.next() }
                    return sizes
                }
            }
            try ledger.forEachCommit { entry in
                guard entry.device == "phone" else { return true }
                let group = "\(entry.stream.pool)/\(entry.stream.identity)"
                expected[group, default: ([], 0, 0)].streams.insert(entry.stream.description)
                expected[group, default: ([], 0, 0)].entries += 1
                expected[group, default: ([], 0, 0)].bytes += UInt64(values[entry.sequence]!)
                return true
            }
            var filter = AuditFilter()
            filter.device = "phone"
            var rows: [StatisticsRow] = []
            let total = try ledger.statistics(by: .identity, filter: filter) { rows.append($0); return true }
            #expect(rows.map { "\($0.pool!)/\($0.identity!)" } == expected.keys.sorted())
            for row in rows {
                let e = expected["\(row.pool!)/\(row.identity!)"]!
                #expect((row.streams, row.entries, row.bytes) == (UInt64(e.streams.count), e.entries, e.bytes))
            }
            #expect(total.entries == expected.values.reduce(0) { $0 + $1.entries })
            // Counts alone come from the heads: every entry of the pool.
            var pool = AuditFilter()
            pool.pool = try IdentityPoolID("p:1")
            var pools: [StatisticsRow] = []
            try ledger.statistics(by: .pool, filter: pool, countBytes: false) { pools.append($0); return true }
            var count: UInt64 = 0
            try ledger.forEachCommit { entry in if entry.stream.pool.rawValue == "p:1" { count += 1 }; return true }
            #expect(pools.count == 1 && pools[0].entries == count && pools[0].bytes == 0)
        }
    }

    /// A follower sees entries committed after it started, resumes where it stopped, and stops
    /// when cancelled.
    @Test func followSeesNewCommitsAndResumes() async throws {
        var options = LedgerOptions()
        options.durable = false
        try await withLedger(options) { ledger in
            let s = stream("f"), t = stream("g")
            try await ledger.put(s, ["a": "0"])
            var filter = AuditFilter()
            filter.dataset = try DatasetName("f")
            let scope = filter
            let seen = try await withThrowingTaskGroup(of: [UInt64].self) { group in
                group.addTask {
                    var offsets: [UInt64] = []
                    _ = try await ledger.follow(filter: scope) { entry in
                        offsets.append(entry.offset)
                        return offsets.count < 4
                    }
                    return offsets
                }
                for i in 1...3 {
                    try await ledger.put(t, ["b": "\(i)"])
                    try await ledger.put(s, ["a": "\(i)"])
                }
                return try await group.next()!
            }
            #expect(seen == [1, 2, 3, 4])
            // Resume after the second entry of the feed: everything after it, once.
            let last = try ledger.lastSequence
            var resumed: [UInt64] = []
            let position = try await ledger.follow(after: 2) { entry in
                resumed.append(entry.sequence)
                return entry.sequence < last
            }
            #expect(resumed == Array(3...last))
            #expect(position == last)
            // Caught up and waiting: cancelling ends it at its position.
            let (caughtUp, continuation) = AsyncStream<UInt64>.makeStream()
            let idle = Task { try await ledger.follow(after: last, caughtUp: { continuation.yield($0) }) { _ in true } }
            var iterator = caughtUp.makeAsyncIterator()
            #expect(await iterator.next() == last)
            idle.cancel()
            #expect(try await idle.value == last)
        }
    }
}
