import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// A plain in-memory model of Cognito semantics, independent of the ledger's code.
struct Model {
    struct Dataset {
        var syncCount: UInt64 = 0
        var records: [String: (value: String?, count: UInt64)] = [:]
        var exists = false
        var lastDelete: UInt64 = 0
    }
    var datasets: [StreamName: Dataset] = [:]

    mutating func update(_ s: StreamName, _ patches: [RecordPatch]) -> Bool {
        var d = datasets[s] ?? Dataset()
        for p in patches where (d.records[p.key]?.count ?? 0) != p.syncCount { return false }
        d.syncCount += 1
        for p in patches { d.records[p.key] = (p.op == .replace ? p.value : nil, d.syncCount) }
        d.exists = true
        datasets[s] = d
        return true
    }

    mutating func delete(_ s: StreamName) -> Bool {
        guard var d = datasets[s], d.exists else { return false }
        d.syncCount += 1
        d.records = [:]
        d.exists = false
        d.lastDelete = d.syncCount
        datasets[s] = d
        return true
    }
}


@Suite struct ModelTests {
    /// Random operation sequences against the model: maintained views == rebuilt views == model.
    @Test(arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func randomWorkloadsMatchTheModel(seed: UInt64) async throws {
        var options = LedgerOptions()
        options.durable = false  // the model, not fsync, is under test here
        try await withLedger(options) { ledger in
            var rng = SeededRandom(state: seed)
            var model = Model()
            let streams = (0..<4).map { stream("ds\($0 % 2)", identity: "\($0 / 2)") }
            let keys = (0..<12).map { "key-\($0)" } + ["ü-ñïçødé", String(repeating: "L", count: 600)]
            for step in 0..<300 {
                let s = streams[Int.random(in: 0..<streams.count, using: &rng)]
                let roll = Int.random(in: 0..<100, using: &rng)
                if roll < 5 {
                    let expected = model.delete(s)
                    do {
                        try await ledger.deleteDataset(s)
                        #expect(expected, "step \(step): delete succeeded, model says not found")
                    } catch let error as LedgerError {
                        #expect(!expected && error.code == .notFound, "step \(step): \(error)")
                    }
                    continue
                }
                var chosen = Set<String>()
                for _ in 0..<Int.random(in: 1...4, using: &rng) { chosen.insert(keys.randomElement(using: &rng)!) }
                let current = model.datasets[s]?.records ?? [:]
                let patches = chosen.sorted().map { key -> RecordPatch in
                    var count = current[key]?.count ?? 0
                    if Int.random(in: 0..<10, using: &rng) == 0 { count += 1 }  // a stale or wrong count: conflict
                    return Int.random(in: 0..<4, using: &rng) == 0
                        ? RecordPatch(op: .remove, key: key, syncCount: count)
                        : RecordPatch(op: .replace, key: key, value: "v\(step)-\(Int.random(in: 0..<1000, using: &rng))", syncCount: count)
                }
                let expected = model.update(s, patches)
                let token = try ledger.listRecords(s).syncSessionToken
                do {
                    let result = try await ledger.updateRecords(s, patches: patches, sessionToken: token)
                    #expect(expected, "step \(step): update succeeded, model says conflict")
                    #expect(result.syncCount == model.datasets[s]!.syncCount)
                } catch let error as LedgerError {
                    #expect(!expected && error.code == .conflict, "step \(step): \(error)")
                }
            }
            try compare(ledger, model, streams)
            let maintained = try ledger.viewContents()
            try await ledger.rebuildViews()
            let rebuilt = try ledger.viewContents()
            #expect(maintained.count == rebuilt.count)
            for (m, r) in zip(maintained, rebuilt) {
                #expect(m.map(\.key) == r.map(\.key))
                #expect(m.map(\.value) == r.map(\.value), "rebuilt view bytes differ from maintained ones")
            }
            try compare(ledger, model, streams)
            let report = try ledger.verify()
            #expect(report.isValid, "\(report)")

            // A merge writes each stream's views once per segment, after applying all of its
            // entries: the whole feed in one segment (many entries per stream, deletes among
            // them) and in two pieces must both give the leader's state, view bytes included.
            let feed = try #require(try ledger.feedSegment(after: 0, maxBytes: 64 << 20))
            let half = feed.entries.count / 2
            let pieces = [[feed], [Segment(scope: .feed, entries: Array(feed.entries[..<half])), Segment(scope: .feed, entries: Array(feed.entries[half...]))]]
            for segments in pieces {
                try await withLedger(options) { follower in
                    for segment in segments {
                        let merged = try await follower.merge(bytes: try segment.encoded())
                        #expect(merged.applied == segment.entries.count)
                    }
                    try compare(follower, model, streams)
                    #expect(try follower.digest() == ledger.digest())
                    #expect(try follower.verify().isValid)
                    let followerViews = try follower.viewContents()
                    #expect(followerViews.map { $0.map(\.value) } == rebuilt.map { $0.map(\.value) }, "merged view bytes differ from the leader's")
                }
            }
        }
    }

    private func compare(_ ledger: Ledger, _ model: Model, _ streams: [StreamName]) throws {
        for s in streams {
            let d = model.datasets[s] ?? Model.Dataset()
            let (records, page) = try ledger.allRecords(s)
            #expect(page.datasetSyncCount == d.syncCount, "\(s)")
            #expect(page.datasetExists == d.exists, "\(s)")
            let got = Dictionary(uniqueKeysWithValues: records.map { ($0.key, $0.value) })
            let want = d.records.mapValues(\.value)
            #expect(got == want, "\(s)")
            #expect(records.allSatisfy { $0.syncCount == d.records[$0.key]?.count }, "\(s)")
            // Replay reproduces the same state.
            let replayed = try ledger.dataset(s, asOfSyncCount: d.syncCount)
            #expect(Dictionary(uniqueKeysWithValues: replayed.records.map { ($0.key.string, $0.value.value) }) == want)
            if d.exists {
                let described = try ledger.describeDataset(s)
                #expect(described.numRecords == UInt64(want.values.compactMap { $0 }.count))
                var bytes = 0
                for (key, value) in want { if let value { bytes += key.utf8.count + value.utf8.count } }
                #expect(described.dataStorage == UInt64(bytes))
            }
            // listRecords after every count matches the model's records changed after it.
            for after in stride(from: 0, through: d.syncCount, by: max(1, Int(d.syncCount) / 7)) {
                let changed = try ledger.allRecords(s, after: after, pageSize: 5).records
                #expect(Set(changed.map(\.key)) == Set(d.records.filter { $0.value.count > after }.keys), "\(s) after \(after)")
                let deleted = try ledger.listRecords(s, after: after).datasetDeletedAfterRequestedSyncCount
                #expect(deleted == (after > 0 && d.lastDelete > after), "a device that never synced (0) is not told of deletes")
            }
        }
    }
}
