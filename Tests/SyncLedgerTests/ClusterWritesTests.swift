import Foundation
import Synchronization
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// The ledger's side of cluster mode: writes reach a replica only through their shard's log,
/// and replicas that apply the same messages hold the same entries. The log here is an
/// in-process list of encoded messages per shard with the two promises of ``ShardLog`` (an
/// append lands right after `after`, or is refused as behind); the JetStream binding that keeps
/// those promises across machines is tested against a real nats-server cluster in Tests/wire.
@Suite struct ClusterWritesTests {
    /// The shards' messages, encoded as they travel; `fail` makes appends refuse as unavailable.
    final class ListShardLog: ShardLog {
        let shards: ShardMap
        let messages = Mutex<[Int: [[UInt8]]]>([:])
        let fail = Mutex(false)
        /// Appends refused as behind.
        let refusedBehind = Atomic<Int>(0)
        init(shards: Int) throws { self.shards = try ShardMap(count: shards) }

        func append(_ segment: Segment, shard: Int, after: UInt64) async throws -> UInt64 {
            if fail.withLock({ $0 }) { throw LedgerError(.unavailable, "the test log is down") }
            let bytes = try segment.encoded()
            return try messages.withLock { all in
                let last = UInt64(all[shard]?.count ?? 0)
                guard last == after else {
                    refusedBehind.add(1, ordering: .relaxed)
                    throw ShardLogError.behind(shard: shard, last: last)
                }
                all[shard, default: []].append(bytes)
                return last + 1
            }
        }

        func lastSequence(_ shard: Int) async throws -> UInt64 { UInt64(messages.withLock { $0[shard]?.count ?? 0 }) }

        /// Applies every message `replica` has not applied yet, shard by shard, in order.
        func deliver(to replica: Ledger) async throws {
            for (shard, list) in messages.withLock({ $0 }) {
                let done = try replica.shardCheckpoint(shard)
                for (i, bytes) in list.enumerated() where UInt64(i + 1) > done {
                    try await replica.applyShardMessage(bytes: bytes, shard: shard, of: shards, sequence: UInt64(i + 1))
                }
            }
        }

        func message(_ shard: Int, _ sequence: Int) -> [UInt8] { messages.withLock { $0[shard]![sequence - 1] } }

        var count: Int { messages.withLock { $0.values.reduce(0) { $0 + $1.count } } }
    }

    @Test func aWriteIsAppliedOnlyAfterItsShardsLogTookItAndReplicasConverge() async throws {
        let log = try ListShardLog(shards: 8)
        try await withLedger { owner in
            try await withLedger { replica in
                owner.bindCluster(log)
                for i in 0..<12 {
                    try await owner.put(stream("ds\(i % 3)", identity: "\(i % 4)"), ["k\(i)": "v\(i)", "shared": "\(i)"])
                }
                #expect(log.count == 12, "one message per write")
                try await log.deliver(to: replica)
                let ownerDigest = try owner.headsDigest()
                let replicaDigest = try replica.headsDigest()
                #expect(ownerDigest.digest == replicaDigest.digest)
                #expect(ownerDigest.streams == 12)
                for i in 0..<12 {
                    let s = stream("ds\(i % 3)", identity: "\(i % 4)")
                    #expect(try owner.values(s) == replica.values(s))
                }
                #expect(try owner.verify().isValid)
                #expect(try replica.verify().isValid)
            }
        }
    }

    @Test func aWriteTheLogRefusesLeavesNothingAndTheNextOneWorks() async throws {
        let log = try ListShardLog(shards: 4)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let s = stream()
            try await ledger.put(s, ["a": "1"])
            log.fail.withLock { $0 = true }
            await expectLedgerError(.unavailable) { try await ledger.put(s, ["a": "2", "b": "3"]) }
            #expect(try ledger.values(s) == ["a": "1"])
            #expect(try ledger.listRecords(s).datasetSyncCount == 1)
            log.fail.withLock { $0 = false }
            try await ledger.put(s, ["a": "2"])
            #expect(try ledger.values(s) == ["a": "2"])
            #expect(log.count == 2)
        }
    }

    @Test func aRefusedWriteStoresNothingInTheLog() async throws {
        let log = try ListShardLog(shards: 4)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let s = stream()
            try await ledger.put(s, ["a": "1"])
            // A stale sync count: Cognito's conflict, refused before anything reaches the log.
            let token = try ledger.token(s)
            await expectLedgerError(.conflict) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "a", value: "x", syncCount: 0)], sessionToken: token)
            }
            #expect(log.count == 1)
        }
    }

    @Test func aWriterBehindTheLogCatchesUpAndPreparesItsWriteAgain() async throws {
        let log = try ListShardLog(shards: 2)
        try await withLedger { first in
            try await withLedger { second in
                first.bindCluster(log)
                second.bindCluster(log)
                let s = stream()
                let token = try second.token(s)
                try await first.put(s, ["a": "1"])  // message 1, applied on `first` only
                // `second` prepares on an empty dataset, is told it is behind, and waits for its
                // replica to catch up: deliver the message, and its write goes through on top.
                let write = Task { try await second.updateRecords(s, patches: [RecordPatch(op: .replace, key: "b", value: "2", syncCount: 0)], sessionToken: token) }
                let deadline = ContinuousClock.now + .seconds(20)
                while log.refusedBehind.load(ordering: .relaxed) == 0, ContinuousClock.now < deadline { await Task.yield() }
                #expect(log.refusedBehind.load(ordering: .relaxed) == 1, "the write was refused as behind before the message reached it")
                #expect(log.count == 1)
                try await log.deliver(to: second)
                _ = try await write.value
                try await log.deliver(to: first)
                #expect(try first.values(s) == ["a": "1", "b": "2"])
                #expect(try second.values(s) == ["a": "1", "b": "2"])
                #expect(try first.headsDigest().digest == second.headsDigest().digest)
                #expect(try second.listRecords(s).datasetSyncCount == 2)
            }
        }
    }

    @Test func everyWriteOfAContendedShardLandsOnce() async throws {
        let log = try ListShardLog(shards: 1)  // every identity on one shard
        try await withLedger { ledger in
            ledger.bindCluster(log)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<48 {
                    group.addTask { try await ledger.put(stream(identity: "\(i)"), ["k": "\(i)"]) }
                }
                try await group.waitForAll()
            }
            // Writes that queued while a batch was in flight travel together (ClusterBatchTests).
            #expect((1...48).contains(log.count))
            for i in 0..<48 { #expect(try ledger.values(stream(identity: "\(i)")) == ["k": "\(i)"]) }
            #expect(try ledger.shardCheckpoint(0) == UInt64(log.count))
            #expect(try ledger.verify().isValid)
        }
    }

    /// Message 1 of stream `a` written by another ledger through `log` (a history of its own).
    private func divergedMessage(_ log: ListShardLog, _ a: StreamName, _ shard: Int) async throws -> [UInt8] {
        let dir = temporaryPath("other")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let other = try Ledger(directory: dir)
        defer { other.close() }
        other.bindCluster(log)
        try await other.put(a, ["k": "other"])
        return log.message(shard, 1)
    }

    @Test func aMessageOutOfOrderOfAnotherShardOrDivergedIsRefusedWhole() async throws {
        let log = try ListShardLog(shards: 16)
        try await withLedger { owner in
            try await withLedger { replica in
                owner.bindCluster(log)
                let a = stream(identity: "1")
                let shard = log.shards.shard(of: a)
                try await owner.put(a, ["k": "1"])
                try await owner.put(a, ["k": "2"])
                let first = log.message(shard, 1)
                let second = log.message(shard, 2)
                // Message 2 before message 1: a gap.
                await expectLedgerError(.invalidParameter) {
                    try await replica.applyShardMessage(bytes: second, shard: shard, of: log.shards, sequence: 2)
                }
                // Message 1 presented as another shard's.
                await expectLedgerError(.invalidParameter) {
                    try await replica.applyShardMessage(bytes: first, shard: (shard + 1) % 16, of: log.shards, sequence: 1)
                }
                #expect(try replica.headsDigest().streams == 0)
                let applied = try await replica.applyShardMessage(bytes: first, shard: shard, of: log.shards, sequence: 1)
                #expect(applied != .alreadyApplied)
                let again = try await replica.applyShardMessage(bytes: first, shard: shard, of: log.shards, sequence: 1)
                #expect(again == .alreadyApplied)
                // A message 2 from a history that diverged: refused whole; the checkpoint stays.
                let diverged = try await divergedMessage(try ListShardLog(shards: 16), a, shard)
                let refused = await expectLedgerError(.invalidParameter) {
                    try await replica.applyShardMessage(bytes: diverged, shard: shard, of: log.shards, sequence: 2)
                }
                let why = refused?.message ?? ""
                #expect(why.contains("diverged"))
                #expect(try replica.shardCheckpoint(shard) == 1)
                try await replica.applyShardMessage(bytes: second, shard: shard, of: log.shards, sequence: 2)
                #expect(try replica.values(a) == ["k": "2"])
                #expect(try replica.shardCheckpoint(shard) == 2)
            }
        }
    }

    @Test func anIdempotencyKeyIsKeptOnceTheLogTookTheWrite() async throws {
        let log = try ListShardLog(shards: 4)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let s = stream()
            let token = try ledger.token(s)
            let patches = [RecordPatch(op: .replace, key: "a", value: "1", syncCount: 0)]
            let first = try await ledger.updateRecords(s, patches: patches, sessionToken: token, idempotencyKey: "key-1")
            #expect(!first.replayed)
            let retry = try await ledger.updateRecords(s, patches: patches, sessionToken: token, idempotencyKey: "key-1")
            #expect(retry.replayed)
            #expect(retry.records.map(\.key) == first.records.map(\.key))
            #expect(log.count == 1, "the retry reached the log no more")
            await expectLedgerError(.idempotencyConflict) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "a", value: "2", syncCount: 0)], sessionToken: token, idempotencyKey: "key-1")
            }
            // A write the log refused keeps no key: its retry is judged afresh.
            log.fail.withLock { $0 = true }
            let second = [RecordPatch(op: .replace, key: "b", value: "1", syncCount: 0)]
            await expectLedgerError(.unavailable) { _ = try await ledger.updateRecords(s, patches: second, sessionToken: token, idempotencyKey: "key-2") }
            log.fail.withLock { $0 = false }
            let afresh = try await ledger.updateRecords(s, patches: second, sessionToken: token, idempotencyKey: "key-2")
            #expect(!afresh.replayed)
            #expect(try ledger.values(s) == ["a": "1", "b": "1"])
        }
    }

    @Test func aFenceMovesTheCheckpointInOrderAndIsKept() async throws {
        try await withLedger { replica in
            #expect(try await replica.applyShardFence(Array("node-b".utf8), shard: 3, sequence: 1))
            #expect(try await !replica.applyShardFence(Array("node-b".utf8), shard: 3, sequence: 1))
            await expectLedgerError(.invalidParameter) { try await replica.applyShardFence([], shard: 3, sequence: 3) }
            #expect(try replica.shardCheckpoint(3) == 1)
            let fence = try replica.shardFence(3)
            #expect(fence?.sequence == 1)
            #expect(fence?.note == Array("node-b".utf8))
            #expect(try replica.shardFence(4) == nil)
        }
    }

    @Test func aSkippedMessageMovesTheCheckpointInOrderAndAppliesNothing() async throws {
        try await withLedger { replica in
            let before = try replica.headsDigest()
            #expect(try await replica.skipShardMessage(shard: 2, sequence: 1))
            #expect(try await !replica.skipShardMessage(shard: 2, sequence: 1), "already passed")
            await expectLedgerError(.invalidParameter) { try await replica.skipShardMessage(shard: 2, sequence: 3) }
            #expect(try replica.shardCheckpoint(2) == 1)
            #expect(try replica.headsDigest().digest == before.digest)
            #expect(try replica.shardFence(2) == nil, "a skipped message is no fence")
            // The next message applies after it.
            #expect(try await replica.applyShardFence(Array("node-b".utf8), shard: 2, sequence: 2))
            #expect(try replica.shardCheckpoint(2) == 2)
        }
    }

    @Test func theShardMapIsFixedAndSpreadsIdentities() throws {
        let map = try ShardMap(count: 64)
        // Fixed values (SHA-256 of "pool\0identity", first 8 bytes big-endian, mod 64, as
        // Python's hashlib computes them): every node and every version computes the same map.
        #expect(map.shard(pool: "us-east-1:pool", identity: "us-east-1:abc") == 23)
        // The separator keeps ("a", "bc") and ("ab", "c") apart.
        #expect(map.shard(pool: "a", identity: "bc") == 49)
        #expect(map.shard(pool: "ab", identity: "c") == 13)
        var used = Set<Int>()
        for i in 0..<2000 { used.insert(map.shard(pool: "p", identity: "id-\(i)")) }
        #expect(used.count == 64)
        // SyncLedger's own streams, of every pool, are on the registry shard.
        let registry = try StreamName(pool: "us-east-1:0a1b", identity: Ledger.systemIdentity.rawValue, dataset: "devices")
        let global = try StreamName(pool: Ledger.systemIdentity.rawValue, identity: Ledger.systemIdentity.rawValue, dataset: "identity-index")
        #expect(map.shard(of: registry) == ShardMap.registryShard)
        #expect(map.shard(of: global) == ShardMap.registryShard)
        #expect(throws: LedgerError.self) { try ShardMap(count: 0) }
        #expect(throws: LedgerError.self) { try ShardMap(count: ShardMap.maxShards + 1) }
    }
}
