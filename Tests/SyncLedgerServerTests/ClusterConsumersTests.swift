import Synchronization
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

/// A cluster consumer's acknowledgement as it counts and moves on one replica (the KV bucket
/// and the nodes around it are tested in Tests/wire/test_cluster_messages.py): a bounded
/// acknowledgement stops short exactly where it stopped counting.
@Suite struct ClusterConsumersTests {
    /// A shard log that only numbers appends (the ledger applies each write itself).
    final class CountingLog: ShardLog {
        let shards: ShardMap
        let last = Mutex<[Int: UInt64]>([:])
        init(shards: Int) throws { self.shards = try ShardMap(count: shards) }
        func append(_ segment: Segment, shard: Int, after: UInt64) async throws -> UInt64 {
            try last.withLock { all in
                guard all[shard, default: 0] == after else { throw ShardLogError.behind(shard: shard, last: all[shard, default: 0]) }
                all[shard] = after + 1
                return after + 1
            }
        }
        func lastSequence(_ shard: Int) async throws -> UInt64 { last.withLock { $0[shard, default: 0] } }
    }

    @Test func aBoundedAcknowledgementStopsShortWhereItStoppedCounting() async throws {
        let log = try CountingLog(shards: 2)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let pool = try IdentityPoolID("test:0")
            // One identity per shard, each with a device; eight messages, alternating.
            var senders: [(IdentityID, String)] = []
            var n = 0
            while senders.count < 2 {
                let identity = try IdentityID("test:\(n)")
                n += 1
                guard log.shards.shard(pool: pool.rawValue, identity: identity.rawValue) == senders.count else { continue }
                senders.append((identity, try await ledger.syncDevice(pool: pool, caller: .identity(identity), code: nil, info: DeviceInfo(platform: .gcm))))
            }
            for i in 0..<8 {
                let (identity, code) = senders[i % 2]
                _ = try await ledger.postMessage(pool: pool, identity: identity, deviceCode: code,
                                                 message: DeviceMessage(messageId: "m\(i)", timeToLive: 3600, sentAt: nil, data: [:]))
            }
            var everything = ShardPositions()
            _ = try everything.pass(through: try ledger.lastSequence, on: ledger, over: [0, 1])
            let now = ledger.options.clock()
            // Three at a time: each call passes three messages and leaves the rest unsettled.
            var positions = ShardPositions()
            var passed: [UInt64] = []
            for _ in 0..<3 {
                let (next, acknowledged, expired) = try ClusterConsumers.settle(old: positions, given: everything, ledger: ledger, map: log.shards, now: now, limit: 3)
                #expect(expired == 0)
                passed.append(acknowledged)
                positions = next
                let unsettled = try unsettledMessages(ledger, log.shards, after: positions)
                #expect(unsettled.count == 8 - Int(passed.reduce(0, +)), "what it did not count stays unsettled")
            }
            #expect(passed == [3, 3, 2])
            #expect(positions.joined(everything) == positions, "in the end, as far as acknowledged")
            #expect(try unsettledMessages(ledger, log.shards, after: positions).isEmpty)
        }
    }

    /// The message ids a consumer at `positions` has not settled.
    func unsettledMessages(_ ledger: Ledger, _ map: ShardMap, after positions: ShardPositions) throws -> [String] {
        try ledger.walkShardMessages(after: 0, maxRows: 100, shardOf: map.shard(of:)) { row in
            guard let message = row.message, !positions.covers(shard: row.shard, message: message.sequence, index: row.index) else { return .settled }
            return .read
        }.messages.map(\.message.messageId)
    }
}
