import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// The index from a shard's messages to a replica's change feed, and the Cognito stream batches
/// read through it: a cursor counted in the shard's own sequences reads the same records, in the
/// same order, from replicas that applied the shards in different orders.
@Suite struct ShardStreamsTests {
    typealias ListShardLog = ClusterWritesTests.ListShardLog

    /// Writes 12 changes over 4 identities and 3 datasets of pool `test:0` (and one of another
    /// pool) through `owner`, bound to a 2-shard log.
    func write(_ owner: Ledger, _ log: ListShardLog) async throws {
        owner.bindCluster(log)
        for i in 0..<12 {
            try await owner.put(stream("ds\(i % 3)", identity: "\(i % 4)"), ["k": "v\(i)"])
        }
        try await owner.put(stream("other", identity: "1", pool: "test:9"), ["k": "x"])
    }

    func decode(_ record: StreamRecord) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(record.json)) as? [String: Any])
    }

    @Test func replicasReadTheSameRecordsForAShardCursorWhateverTheirApplyOrder() async throws {
        let log = try ListShardLog(shards: 2)
        try await withLedger { owner in
            try await withLedger { replica in
                try await write(owner, log)
                try await log.deliver(to: replica)  // shard by shard: another feed order than the owner's
                let pool = try IdentityPoolID("test:0")
                var total = 0
                for shard in 0..<2 {
                    let messages = log.messages.withLock { $0[shard]?.count ?? 0 }
                    let onOwner = try owner.appliedShardMessages(shard, after: 0, limit: 100)
                    let onReplica = try replica.appliedShardMessages(shard, after: 0, limit: 100)
                    #expect(onOwner.map(\.sequence) == Array(1...UInt64(messages)))
                    #expect(onReplica.map(\.sequence) == onOwner.map(\.sequence))
                    #expect(onOwner.allSatisfy { $0.count == 1 })
                    let a = try owner.shardStreamBatch(pool: pool, shard: shard, after: 0, through: .max)
                    let b = try replica.shardStreamBatch(pool: pool, shard: shard, after: 0, through: .max)
                    #expect(a.last == UInt64(messages) && b.last == a.last)
                    let ra = try a.records.map(decode), rb = try b.records.map(decode)
                    #expect(ra.map { $0["shardSequence"] as? Int } == rb.map { $0["shardSequence"] as? Int })
                    #expect(ra.map { "\($0["identityId"]!)/\($0["dataSetName"]!)/\($0["syncCount"]!)" }
                            == rb.map { "\($0["identityId"]!)/\($0["dataSetName"]!)/\($0["syncCount"]!)" })
                    #expect(ra.allSatisfy { $0["shard"] as? Int == shard && $0["identityPoolId"] as? String == "test:0" })
                    // In order per dataset: sync counts 1, 2, … for each.
                    var counts: [String: [Int]] = [:]
                    for r in rb { counts["\(r["identityId"]!)/\(r["dataSetName"]!)", default: []].append(r["syncCount"] as! Int) }
                    #expect(counts.values.allSatisfy { $0 == Array(1...$0.count) })
                    total += rb.count
                }
                #expect(total == 12, "every change of the pool, none of the other pool")
            }
        }
    }

    @Test func theShardSequenceAtAFeedPositionIsFoundAcrossFencesAndOtherShards() async throws {
        let log = try ListShardLog(shards: 2)
        try await withLedger { owner in
            try await withLedger { replica in
                try await write(owner, log)
                // The replica applies shard 0 with a fence before every third message (so its
                // sequences have gaps in the index) and shard 1's messages in between.
                let all = log.messages.withLock { $0 }
                var zero = 0, one = 0, sequence: UInt64 = 0
                let first = all[0] ?? [], second = all[1] ?? []
                while zero < first.count || one < second.count {
                    if zero < first.count {
                        sequence += 1
                        if zero % 3 == 0 {
                            try await replica.applyShardFence(Array("fence".utf8), shard: 0, sequence: sequence)
                            sequence += 1
                        }
                        try await replica.applyShardMessage(bytes: first[zero], shard: 0, of: log.shards, sequence: sequence)
                        zero += 1
                    }
                    if one < second.count {
                        try await replica.applyShardMessage(bytes: second[one], shard: 1, of: log.shards, sequence: UInt64(one + 1))
                        one += 1
                    }
                }
                let messages = try replica.appliedShardMessages(0, after: 0, limit: 100)
                #expect(messages.count == first.count && messages.first?.sequence == 2)
                for local in 0...(try replica.lastSequence + 1) {
                    let expected = messages.last(where: { $0.firstLocal <= local })
                    #expect(try replica.shardSequence(0, appliedThrough: local) == expected?.sequence ?? 0, "at feed position \(local)")
                    // The message of shard 0 holding the entry at `local`, if one does.
                    let place = try replica.shardMessages(containing: [(local, 0)])[0]
                    if let expected, local < expected.firstLocal + UInt64(expected.count) {
                        #expect(place?.message == expected && place?.index == Int(local - expected.firstLocal) + 1, "at feed position \(local)")
                    } else {
                        #expect(place == nil, "at feed position \(local): an entry of shard 1, or none")
                    }
                }
                #expect(try replica.shardIndexStart(0) == 1)
            }
        }
    }

    @Test func aReplicaThatAppliedMessagesBeforeItKeptTheIndexRefusesToReadFromThere() async throws {
        let log = try ListShardLog(shards: 1)
        try await withLedger { owner in
            try await withLedger { replica in
                try await write(owner, log)
                let all = log.messages.withLock { $0[0] ?? [] }
                for i in 0..<3 { try await replica.applyShardMessage(bytes: all[i], shard: 0, of: log.shards, sequence: UInt64(i + 1)) }
                // As if a version that kept no index had applied those three.
                try await replica.writeLocal { txn in
                    let keys = try txn.withCursor(replica.schema.shardIndex) { cursor -> [[UInt8]] in
                        var found: [[UInt8]] = []
                        var pair = try cursor.first()
                        while let current = pair { found.append(Array(current.key)); pair = try cursor.next() }
                        return found
                    }
                    for key in keys { _ = try txn.delete(replica.schema.shardIndex, key: key) }
                    _ = try txn.delete(replica.schema.meta, key: Ledger.shardIndexStartKey(0))
                }
                #expect(try replica.shardIndexStart(0) == 4)
                for i in 3..<all.count { try await replica.applyShardMessage(bytes: all[i], shard: 0, of: log.shards, sequence: UInt64(i + 1)) }
                #expect(try replica.shardIndexStart(0) == 4)
                let pool = try IdentityPoolID("test:0")
                let error = await expectLedgerError(.unavailable) { _ = try replica.shardStreamBatch(pool: pool, shard: 0, after: 1, through: .max) }
                #expect(error?.message.contains("from message 4 on") == true)
                await expectLedgerError(.unavailable) { _ = try replica.feedPosition(shard: 0, sequence: 2, entries: 1) }
                #expect(try replica.shardStreamBatch(pool: pool, shard: 0, after: 3, through: .max).records.count == 9)
            }
        }
    }

    @Test func aBatchEndsBetweenMessagesAndBeforeWhatWasAppliedAfterTheSettingsWereRead() async throws {
        let log = try ListShardLog(shards: 1)
        try await withLedger { owner in
            try await write(owner, log)
            let pool = try IdentityPoolID("test:0")
            let first = try owner.shardStreamBatch(pool: pool, shard: 0, after: 0, through: .max, maxRecords: 5)
            #expect(first.records.count == 5 && first.last == 5)
            let rest = try owner.shardStreamBatch(pool: pool, shard: 0, after: first.last, through: .max)
            #expect(rest.records.count == 7 && rest.last == 13, "the other pool's message is passed over, the cursor moves past it")
            // Settings read when the feed stood at the 4th message's entry: the batch stops there.
            let fourth = try #require(owner.appliedShardMessages(0, after: 3, limit: 1).first)
            let held = try owner.shardStreamBatch(pool: pool, shard: 0, after: 0, through: fourth.firstLocal)
            #expect(held.records.count == 4 && held.last == 4)
            // A target started at a feed position starts after the messages applied up to it.
            #expect(try owner.shardSequence(0, appliedThrough: fourth.firstLocal) == 4)
            #expect(try owner.shardSequence(0, appliedThrough: fourth.firstLocal - 1) == 3)
            #expect(try owner.shardSequence(0, appliedThrough: 0) == 0)
            #expect(try owner.shardSequence(0, appliedThrough: .max) == 13)
            #expect(try owner.appliedShardMessages(0, after: 13, limit: 10).isEmpty)
        }
    }
}
