import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// Device messages placed in their shards' logs (what a cluster's consumers count in): replicas
/// that applied the shards in different orders place every message the same, and a walk says
/// exactly how far it went.
@Suite struct ShardMessagesTests {
    typealias ListShardLog = ClusterWritesTests.ListShardLog
    let pool = try! IdentityPoolID("test:0")

    /// Identities, one per shard of `map` at least, each with a device; then `count` messages
    /// sent round-robin through `owner`. Returns the message ids in sending order, by identity.
    func send(_ owner: Ledger, _ log: ListShardLog, count: Int) async throws -> [String: [String]] {
        owner.bindCluster(log)
        var people: [(IdentityID, String)] = []
        var shards: Set<Int> = []
        var n = 0
        while shards.count < log.shards.count {
            let identity = try IdentityID("test:\(n)")
            n += 1
            let shard = log.shards.shard(pool: pool.rawValue, identity: identity.rawValue)
            guard shards.insert(shard).inserted else { continue }
            people.append((identity, try await owner.syncDevice(pool: pool, caller: .identity(identity), code: nil, info: DeviceInfo(platform: .gcm))))
        }
        var sent: [String: [String]] = [:]
        for i in 0..<count {
            let (identity, code) = people[i % people.count]
            _ = try await owner.postMessage(pool: pool, identity: identity, deviceCode: code,
                                            message: DeviceMessage(messageId: "m\(i)", timeToLive: 3600, sentAt: nil, data: ["i": "\(i)"]))
            sent[identity.rawValue, default: []].append("m\(i)")
        }
        return sent
    }

    struct Placed: Hashable {
        let shard: Int, message: UInt64, index: Int, id: String
    }

    func placed(_ ledger: Ledger, _ map: ShardMap) throws -> (rows: [Placed], walk: ShardMessageWalk) {
        var rows: [ShardMessageRow] = []
        let walk = try ledger.walkShardMessages(after: 0, maxRows: 1000, shardOf: map.shard(of:)) { row in
            rows.append(row)
            return .read
        }
        #expect(rows.count == walk.messages.count)
        return (try zip(rows, walk.messages).map { row, m in
            let message = try #require(row.message, "message \(m.message.messageId) is placed in its shard's log")
            #expect(row.shard == map.shard(pool: m.pool.rawValue, identity: m.identity.rawValue))
            return Placed(shard: row.shard, message: message.sequence, index: row.index, id: m.message.messageId)
        }, walk)
    }

    @Test func replicasPlaceEveryMessageTheSameWhateverTheirApplyOrder() async throws {
        let log = try ListShardLog(shards: 3)
        try await withLedger { owner in
            try await withLedger { replica in
                let sent = try await send(owner, log, count: 12)
                try await log.deliver(to: replica)  // shard by shard: another feed order than the owner's
                let (onOwner, ownerWalk) = try placed(owner, log.shards)
                let (onReplica, replicaWalk) = try placed(replica, log.shards)
                #expect(onOwner.count == 12)
                #expect(Set(onOwner) == Set(onReplica))
                // Within a shard, the same order on both.
                for shard in 0..<3 {
                    #expect(onOwner.filter { $0.shard == shard } == onReplica.filter { $0.shard == shard })
                }
                // Per identity, the sending order.
                for (identity, ids) in sent {
                    #expect(replicaWalk.messages.filter { $0.identity.rawValue == identity }.map(\.message.messageId) == ids)
                }
                #expect(ownerWalk.through == (try owner.lastSequence))
                #expect(replicaWalk.through == (try replica.lastSequence))
            }
        }
    }

    @Test func aWalkSaysHowFarItWentWhenStoppedOrBounded() async throws {
        let log = try ListShardLog(shards: 2)
        try await withLedger { owner in
            _ = try await send(owner, log, count: 6)
            var seen: [UInt64] = []
            let all = try owner.walkShardMessages(after: 0, maxRows: 100, shardOf: log.shards.shard(of:)) { row in
                seen.append(row.sequence)
                return .pass
            }
            #expect(all.messages.isEmpty && seen.count == 6)
            // Stopped at the fourth: everything before it was walked, not it.
            var read = 0
            let stopped = try owner.walkShardMessages(after: 0, maxRows: 100, shardOf: log.shards.shard(of:)) { _ in
                read += 1
                return read == 4 ? .stop : .read
            }
            #expect(stopped.messages.count == 3 && stopped.through == seen[3] - 1)
            // Bounded at three rows: through the third.
            let bounded = try owner.walkShardMessages(after: 0, maxRows: 3, shardOf: log.shards.shard(of:)) { _ in .read }
            #expect(bounded.messages.count == 3 && bounded.through == seen[2])
            // Rows called settled count toward their own bound: past it, the walk says how far it got.
            var settledSeen = 0
            let settled = try owner.walkShardMessages(after: 0, maxRows: 1, maxSettled: 4, shardOf: log.shards.shard(of:)) { _ in
                settledSeen += 1
                return .settled
            }
            #expect(settledSeen == 4 && settled.messages.isEmpty && settled.through == seen[3])
            // From after the second message's position: the other four.
            let later = try owner.walkShardMessages(after: seen[1], maxRows: 100, shardOf: log.shards.shard(of:)) { _ in .read }
            #expect(later.messages.map(\.sequence) == Array(seen[2...]))
        }
    }
}
