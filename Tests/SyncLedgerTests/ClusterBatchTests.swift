import Foundation
import Synchronization
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// Group commit per shard: the writes a node queued for a shard while its last batch was on its
/// way are planned one on top of another and travel as one message of the shard's log.
@Suite struct ClusterBatchTests {
    typealias ListShardLog = ClusterWritesTests.ListShardLog

    /// A shard log whose appends wait at a gate until it opens; optionally refuses the first
    /// append after opening as behind, or fails every append.
    final class GatedShardLog: ShardLog {
        let inner: ListShardLog
        var shards: ShardMap { inner.shards }
        private struct Gate {
            /// Appends that may still pass (Int.max once open).
            var permits = 0
            var waiters: [CheckedContinuation<Void, Never>] = []
        }
        private let gate = Mutex(Gate())
        let fail = Mutex(false)
        /// Segments appended, in order: how many entries each carried.
        let sizes = Mutex<[Int]>([])

        init(shards: Int) throws { inner = try ListShardLog(shards: shards) }

        func append(_ segment: Segment, shard: Int, after: UInt64) async throws -> UInt64 {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let go = gate.withLock { gate -> Bool in
                    guard gate.permits > 0 else { gate.waiters.append(continuation); return false }
                    if gate.permits != .max { gate.permits -= 1 }
                    return true
                }
                if go { continuation.resume() }
            }
            if fail.withLock({ $0 }) { throw LedgerError(.unavailable, "the test log is down") }
            let sequence = try await inner.append(segment, shard: shard, after: after)
            sizes.withLock { $0.append(segment.entries.count) }
            return sequence
        }

        func lastSequence(_ shard: Int) async throws -> UInt64 { try await inner.lastSequence(shard) }

        /// Appends waiting at the gate.
        var held: Int { gate.withLock { $0.waiters.count } }

        /// Lets `count` appends through (the held ones first), or every append from now on.
        func allow(_ count: Int = .max) {
            let go = gate.withLock { gate -> [CheckedContinuation<Void, Never>] in
                gate.permits = count == .max ? .max : gate.permits + count
                let n = min(gate.permits, gate.waiters.count)
                if gate.permits != .max { gate.permits -= n }
                defer { gate.waiters.removeFirst(n) }
                return Array(gate.waiters.prefix(n))
            }
            for waiter in go { waiter.resume() }
        }
        func open() { allow() }
    }

    /// Waits until one append is held at the gate and `queued` writes wait in `ledger`'s queue
    /// with no planner running (each planned once and parked behind the batch in flight).
    func waitUntilParked(_ ledger: Ledger, _ log: GatedShardLog, queued: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !(log.held == 1 && ledger.shardBatches.waiting == (queued, false)) {
            try #require(ContinuousClock.now < deadline, "writes did not line up: \(log.held) held, \(ledger.shardBatches.waiting)")
            await Task.yield()
        }
    }

    /// A planning round takes at most ``ShardBatches/maxPerRound`` writes, the earliest first,
    /// and passes over those of a shard with a batch in flight; the planner goes on (the queue
    /// is not left to wait for the next enqueue) until nothing plannable is left.
    @Test func aPlanningRoundTakesAtMostItsCapEarliestFirst() {
        let batches = ShardBatches()
        let cap = ShardBatches.maxPerRound
        func write(shard: Int?) -> QueuedClusterWrite {
            QueuedClusterWrite(run: { _ in 0 }, finish: { _ in }, shard: shard)
        }
        #expect(batches.enqueue(write(shard: 7)))  // the first starts a planner
        let first = batches.takePlannable()
        batches.planned(left: [], inFlight: [7])  // shard 7's batch is on its way
        #expect(first.writes.count == 1)
        for i in 0..<(cap + 101) { #expect(!batches.enqueue(write(shard: i == 0 ? 7 : nil))) }
        let round = batches.takePlannable()
        #expect(round.writes.count == cap)
        #expect(round.writes.allSatisfy { $0.shard != 7 })
        #expect(round.busy == [7])
        #expect(zip(round.writes, round.writes.dropFirst()).allSatisfy { $0.arrival < $1.arrival })
        #expect(batches.waiting == (101, true))  // the planner keeps going
        let next = batches.takePlannable()
        #expect(next.writes.count == 100)
        #expect(next.writes.first!.arrival > round.writes.last!.arrival)
        #expect(batches.waiting == (1, true))  // shard 7's write waits for its batch
        #expect(batches.takePlannable().writes.isEmpty)
        #expect(batches.waiting == (1, false))
    }

    @Test func writesQueuedBehindABatchTravelAsOneMessageAndReplicasConverge() async throws {
        let log = try GatedShardLog(shards: 1)
        try await withLedger { owner in
            try await withLedger { replica in
                owner.bindCluster(log)
                let first = Task { try await owner.put(stream(identity: "f0"), ["k": "0"]) }
                try await waitUntilParked(owner, log, queued: 0)
                var writes: [Task<Void, any Error>] = []
                for i in 1...20 {
                    writes.append(Task { try await owner.put(stream(identity: "\(i)"), ["k": "\(i)"]) })
                }
                try await waitUntilParked(owner, log, queued: 20)
                #expect(log.inner.count == 0, "nothing acknowledged yet")
                #expect(try owner.values(stream(identity: "1")).isEmpty, "nothing applied before the log took it")
                log.open()
                try await first.value
                for write in writes { try await write.value }
                #expect(log.sizes.withLock { $0 } == [1, 20], "the first write alone, then the twenty queued behind it in one message")
                for i in 1...20 { #expect(try owner.values(stream(identity: "\(i)")) == ["k": "\(i)"]) }
                try await log.inner.deliver(to: replica)
                #expect(try replica.headsDigest().digest == owner.headsDigest().digest)
                #expect(try owner.verify().isValid && replica.verify().isValid)
            }
        }
    }

    @Test func aWritePlannedOnAnUncommittedOneSeesItsSyncCountsLimitsAndIdempotencyKey() async throws {
        let log = try GatedShardLog(shards: 1)
        var options = LedgerOptions()
        options.limits.maxDatasetsPerIdentity = 2
        try await withLedger(options) { ledger in
            ledger.bindCluster(log)
            let s = stream("a", identity: "abc")
            let token = try ledger.token(s)
            let blocker = Task { try await ledger.put(stream(identity: "b10c"), ["k": "v"]) }
            try await waitUntilParked(ledger, log, queued: 0)
            func update(_ key: String, _ syncCount: UInt64, idempotencyKey: String? = nil) -> Task<UpdateResult, any Error> {
                Task {
                    try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: key, value: "v", syncCount: syncCount)],
                                                   sessionToken: token, idempotencyKey: idempotencyKey)
                }
            }
            // In queue order: r at 0 (new), r at 0 again (stale once the first is planned),
            // q with a key, the same call again (a retry), and datasets b, c past the limit of 2.
            let firstR = update("r", 0)
            try await waitUntilParked(ledger, log, queued: 1)
            let secondR = update("r", 0)
            try await waitUntilParked(ledger, log, queued: 2)
            let keyed = update("q", 0, idempotencyKey: "call-1")
            try await waitUntilParked(ledger, log, queued: 3)
            let retry = update("q", 0, idempotencyKey: "call-1")
            try await waitUntilParked(ledger, log, queued: 4)
            let datasetB = Task { try await ledger.put(stream("b", identity: "abc"), ["k": "v"]) }
            try await waitUntilParked(ledger, log, queued: 5)
            let datasetC = Task { try await ledger.put(stream("c", identity: "abc"), ["k": "v"]) }
            try await waitUntilParked(ledger, log, queued: 6)
            log.open()
            try await blocker.value
            #expect(try await firstR.value.syncCount == 1)
            await expectLedgerError(.conflict) { _ = try await secondR.value }
            let original = try await keyed.value
            let replayed = try await retry.value
            #expect(original.syncCount == 2 && !original.replayed)
            #expect(replayed.syncCount == 2 && replayed.replayed, "the retry found the first call's answer, planned but not committed")
            try await datasetB.value
            await expectLedgerError(.limitExceeded) { try await datasetC.value }
            #expect(log.sizes.withLock { $0 } == [1, 3], "r, q and dataset b in one message; the refusals and the replay wrote nothing")
            #expect(try ledger.values(s) == ["r": "v", "q": "v"])
            #expect(try ledger.listRecords(s).datasetSyncCount == 2)
            // The replay's answer is kept here, as the original's was.
            let again = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "q", value: "v", syncCount: 0)],
                                                       sessionToken: token, idempotencyKey: "call-1")
            #expect(again.replayed && again.syncCount == 2)
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func aBatchRefusedAsBehindIsPlannedAgainWholeOnTheCaughtUpState() async throws {
        let log = try GatedShardLog(shards: 1)
        try await withLedger { owner in
            try await withLedger { other in
                owner.bindCluster(log)
                other.bindCluster(log.inner)
                let s = stream("shared", identity: "abc")
                let blocker = Task { try await owner.put(stream(identity: "b10c"), ["k": "v"]) }
                try await waitUntilParked(owner, log, queued: 0)
                let writes = (1...5).map { i in Task { try await owner.put(s, ["k\(i)": "\(i)"]) } }
                try await waitUntilParked(owner, log, queued: 5)
                log.allow(1)  // the blocker lands; the five are planned as one batch, held at the gate
                try await blocker.value
                try await waitUntilParked(owner, log, queued: 0)
                // Another node gets a message in first: the batch was planned without it.
                try await log.inner.deliver(to: other)
                try await other.put(s, ["k0": "0"])
                log.open()
                let deadline = ContinuousClock.now + .seconds(60)
                while log.inner.refusedBehind.load(ordering: .relaxed) == 0 {
                    try #require(ContinuousClock.now < deadline, "the batch was not refused as behind")
                    await Task.yield()
                }
                #expect(try owner.values(s).isEmpty, "nothing of the refused batch applied")
                try await log.inner.deliver(to: owner)  // the owner catches up; the batch is planned again
                for write in writes { try await write.value }
                #expect(log.sizes.withLock { $0 } == [1, 5], "the five travelled together, once")
                #expect(log.inner.count == 3)
                #expect(try owner.values(s) == ["k0": "0", "k1": "1", "k2": "2", "k3": "3", "k4": "4", "k5": "5"])
                #expect(try owner.listRecords(s).datasetSyncCount == 6)
                try await log.inner.deliver(to: other)
                #expect(try owner.headsDigest().digest == other.headsDigest().digest)
                #expect(try owner.verify().isValid && other.verify().isValid)
            }
        }
    }

    /// A batch the log refuses fails the writes that appended and leaves nothing; a write
    /// refused on the batch's state (a conflict with the batch's first write) is planned again
    /// on the state there is, since that batch never landed.
    @Test func aBatchTheLogRefusesFailsEveryWriteInItAndLeavesNothing() async throws {
        let log = try GatedShardLog(shards: 1)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let s = stream("a", identity: "abc")
            let token = try ledger.token(s)
            let blocker = Task { try await ledger.put(stream(identity: "b10c"), ["k": "v"]) }
            try await waitUntilParked(ledger, log, queued: 0)
            let patches = [RecordPatch(op: .replace, key: "r", value: "v", syncCount: 0)]
            let first = Task { try await ledger.updateRecords(s, patches: patches, sessionToken: token) }
            try await waitUntilParked(ledger, log, queued: 1)
            let stale = Task { try await ledger.updateRecords(s, patches: patches, sessionToken: token) }
            try await waitUntilParked(ledger, log, queued: 2)
            log.allow(1)
            try await blocker.value
            try await waitUntilParked(ledger, log, queued: 0)  // the two, planned as one batch, held
            log.fail.withLock { $0 = true }
            log.allow(1)
            await expectLedgerError(.unavailable) { _ = try await first.value }
            #expect(try ledger.values(s).isEmpty)
            #expect(try ledger.listRecords(s).datasetSyncCount == 0)
            #expect(log.inner.count == 1)
            // Its conflict was decided on a state that never came to be: planned again, it
            // appends this time (its batch held at the gate), and lands once the log is back.
            try await waitUntilParked(ledger, log, queued: 0)
            log.fail.withLock { $0 = false }
            log.open()
            #expect(try await stale.value.syncCount == 1)
            #expect(try ledger.values(s) == ["r": "v"])
        }
    }

    /// Writes of two shards, interleaved, planned in one round: a batch for each shard; a write
    /// whose stream was named when queued runs once, one whose shard is learnt by running it
    /// runs again (rolled back) when it came up while another shard's batch was being planned.
    @Test func oneRoundMakesABatchForEachShardAndRunsANamedWriteOnce() async throws {
        let log = try ListShardLog(shards: 2)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let map = log.shards
            var byShard: [Int: [StreamName]] = [0: [], 1: []]
            var n = 0
            while byShard[0]!.count < 3 || byShard[1]!.count < 3 {
                let s = stream(identity: String(n, radix: 16))
                if byShard[map.shard(of: s)]!.count < 3 { byShard[map.shard(of: s)]!.append(s) }
                n += 1
            }
            let streams = (0..<3).flatMap { [byShard[0]![$0], byShard[1]![$0]] }  // shard 0, 1, 0, 1, 0, 1
            let runs = Mutex<[StreamName: Int]>([:])
            func queued(_ s: StreamName, named: Bool) -> QueuedClusterWrite {
                QueuedClusterWrite(run: { scope in
                    runs.withLock { $0[s, default: 0] += 1 }
                    try ledger.appendChange(scope.txn, to: s, author: "t", events: [.put(key: "k", value: "v", deviceModified: nil)])
                    return 0
                }, finish: { _ in }, shard: named ? map.shard(of: s) : nil)
            }
            let named = streams.map { queued($0, named: true) }
            let plan = try await ledger.writeLocal { txn in try ledger.plan(named, txn, map: map, busy: []) }
            #expect(plan.batches.map(\.shard) == [0, 1])
            #expect(plan.batches.map(\.members.count) == [3, 3])
            #expect(plan.batches.map(\.entries.count) == [3, 3])
            #expect(plan.left.isEmpty && plan.finished.isEmpty)
            #expect(runs.withLock { $0 }.values.allSatisfy { $0 == 1 })
            for s in streams { #expect(try ledger.values(s).isEmpty, "a plan leaves nothing behind") }
            // A write of a shard with a batch in flight is left, not run.
            runs.withLock { $0 = [:] }
            let again = streams.map { queued($0, named: true) }
            let busy = try await ledger.writeLocal { txn in try ledger.plan(again, txn, map: map, busy: [1]) }
            #expect(busy.batches.map(\.shard) == [0])
            #expect(busy.left.count == 3 && busy.left.allSatisfy { $0.shard == 1 })
            #expect(runs.withLock { $0 }.keys.allSatisfy { map.shard(of: $0) == 0 })
            // Unnamed: the writes of shard 1 run once in shard 0's pass (rolled back), once in their own.
            runs.withLock { $0 = [:] }
            let anonymous = streams.map { queued($0, named: false) }
            let unnamed = try await ledger.writeLocal { txn in try ledger.plan(anonymous, txn, map: map, busy: []) }
            #expect(unnamed.batches.map(\.members.count) == [3, 3])
            let counts = runs.withLock { $0 }
            #expect(byShard[0]!.allSatisfy { counts[$0] == 1 } && byShard[1]!.allSatisfy { counts[$0] == 2 })
        }
    }
}
