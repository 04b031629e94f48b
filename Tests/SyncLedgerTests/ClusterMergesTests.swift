import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// Identity merges on a cluster: the merge is one write of the registry shard, and the copies
/// one write of the survivor's shard each, made by whichever replica owns that shard — even one
/// that was not the node that merged (which may have died in between).
@Suite struct ClusterMergesTests {
    typealias ListShardLog = ClusterWritesTests.ListShardLog

    static let shards = 4

    /// A pool, a survivor identity outside the registry shard and a source identity with two
    /// datasets, written through `owner` (bound to `log`).
    func setUp(_ owner: Ledger, _ log: ListShardLog) async throws -> (IdentityPoolID, survivor: String, source: String) {
        owner.bindCluster(log)
        let created = try await owner.createIdentityPool(region: "us-east-1", name: "App", allowUnauthenticatedIdentities: true,
                                                         developerProviderName: "login.app", supportedLoginProviders: [:], caller: "admin")
        let pool = try IdentityPoolID(created.id)
        let survivor = try await identityOffTheRegistryShard(owner, log, pool)
        let source = try await owner.newUnauthenticatedIdentity(pool: pool).id
        try await owner.put(try StreamName(pool: pool.rawValue, identity: survivor, dataset: "settings"), ["theme": "dark"])
        try await owner.put(try StreamName(pool: pool.rawValue, identity: source, dataset: "settings"), ["theme": "light", "lang": "fr"])
        try await owner.put(try StreamName(pool: pool.rawValue, identity: source, dataset: "drafts"), ["d1": "hello"])
        _ = try await owner.put(try StreamName(pool: pool.rawValue, identity: source, dataset: "drafts"), ["d1": nil, "d2": "later"])
        return (pool, survivor, source)
    }

    /// A new identity of `pool` whose shard is not the registry shard, so that a merge into it
    /// leaves its copies pending (a merge into an identity of the registry shard copies at once).
    func identityOffTheRegistryShard(_ owner: Ledger, _ log: ListShardLog, _ pool: IdentityPoolID) async throws -> String {
        var identity = try await owner.newUnauthenticatedIdentity(pool: pool).id
        while log.shards.shard(pool: pool.rawValue, identity: identity) == ShardMap.registryShard {
            identity = try await owner.newUnauthenticatedIdentity(pool: pool).id
        }
        return identity
    }

    /// Applies every message of `log` to `replica`, shard `first` before the others.
    func applyFirst(_ first: Int, of log: ListShardLog, to replica: Ledger) async throws {
        let all = log.messages.withLock { $0 }
        var order = [first]
        for shard in 0..<Self.shards where shard != first { order.append(shard) }
        for shard in order {
            let list = all[shard] ?? []
            for i in 0..<list.count {
                try await replica.applyShardMessage(bytes: list[i], shard: shard, of: log.shards, sequence: UInt64(i + 1))
            }
        }
    }

    var quick: LedgerOptions {
        var options = LedgerOptions()
        options.mergeCopyWait = .zero  // nobody makes the copies in the merging call here
        return options
    }

    @Test func anotherReplicaOwningTheSurvivorsShardMakesTheCopiesOnce() async throws {
        let log = try ListShardLog(shards: Self.shards)
        try await withLedger(quick) { merger in
            try await withLedger(quick) { successor in
                let (pool, survivor, source) = try await setUp(merger, log)
                successor.bindCluster(log)
                try await log.deliver(to: successor)
                let before = log.count
                let summary = try await merger.mergeIdentities(pool: pool, source: source, into: survivor, caller: "admin")
                #expect(log.count == before + 1, "the merge is one message, of the registry shard")
                #expect(Set(summary.datasets.map(\.child)) == ["settings.\(source)", "drafts.\(source)"])
                let copy = try StreamName(pool: pool.rawValue, identity: survivor, dataset: "drafts.\(source)")
                #expect(try merger.values(copy).isEmpty, "no copy yet")
                #expect(try merger.pendingMergeCopies().count == 2)
                // The merging node dies; the replica that owns the survivor's shard makes the copies.
                try await log.deliver(to: successor)
                #expect(try successor.pendingMergeCopies().map(\.child).sorted() == ["drafts.\(source)", "settings.\(source)"])
                #expect(try await successor.completePendingMergeCopies(owns: { _ in true }) == 2)
                #expect(log.count == before + 3, "one message per copy, of the survivor's shard")
                #expect(try successor.values(copy) == ["d2": "later"])
                #expect(try successor.values(try StreamName(pool: pool.rawValue, identity: survivor, dataset: "settings.\(source)")) == ["theme": "light", "lang": "fr"])
                #expect(try successor.pendingMergeCopies().isEmpty)
                #expect(try await successor.completePendingMergeCopies(owns: { _ in true }) == 0, "made once")
                // The first node, back, applies them and has nothing left to do.
                try await log.deliver(to: merger)
                #expect(try merger.pendingMergeCopies().isEmpty)
                #expect(try await merger.completePendingMergeCopies(owns: { _ in true }) == 0)
                #expect(try merger.listRecords(try StreamName(pool: pool.rawValue, identity: survivor, dataset: "settings")).mergedDatasetNames == ["settings.\(source)"])
                #expect(try merger.headsDigest().digest == successor.headsDigest().digest)
                #expect(try merger.verify().isValid && successor.verify().isValid)
                let merged = try #require(try merger.identity(pool: pool, id: source))
                #expect(!merged.isEnabled && merged.mergedInto == survivor)
            }
        }
    }

    @Test func aReplicaThatAppliesTheCopiesBeforeTheMergeHasNothingPending() async throws {
        let log = try ListShardLog(shards: Self.shards)
        try await withLedger(quick) { merger in
            try await withLedger(quick) { late in
                let (pool, survivor, source) = try await setUp(merger, log)
                _ = try await merger.mergeIdentities(pool: pool, source: source, into: survivor, caller: "admin")
                #expect(try await merger.completePendingMergeCopies(owns: { _ in true }) == 2)
                // `late` applies the survivor's shard first, the registry shard last.
                try await applyFirst(log.shards.shard(pool: pool.rawValue, identity: survivor), of: log, to: late)
                #expect(try late.pendingMergeCopies().isEmpty, "the copies it holds are not pending")
                #expect(try late.headsDigest().digest == merger.headsDigest().digest)
            }
        }
    }

    @Test func anIdentityStillReceivingAMergesCopiesIsNotMergedOnUntilTheyAreMade() async throws {
        let log = try ListShardLog(shards: Self.shards)
        try await withLedger(quick) { node in
            let (pool, survivor, source) = try await setUp(node, log)
            let final = try await identityOffTheRegistryShard(node, log, pool)
            _ = try await node.mergeIdentities(pool: pool, source: source, into: survivor, caller: "admin")
            #expect(try node.pendingMergeCopies().count == 2)
            // Merged on now, the copies would land in an identity merged away: refused, nothing written.
            let before = log.count
            await expectLedgerError(.unavailable) {
                _ = try await node.mergeIdentities(pool: pool, source: survivor, into: final, caller: "admin")
            }
            #expect(log.count == before)
            #expect(try await node.completePendingMergeCopies(owns: { _ in true }) == 2)
            // Once they are made, the merge goes on, and carries them along.
            let summary = try await node.mergeIdentities(pool: pool, source: survivor, into: final, caller: "admin")
            #expect(summary.datasets.map(\.child).contains("drafts.\(source).\(survivor)"))
            #expect(try await node.completePendingMergeCopies(owns: { _ in true }) == 3)
            #expect(try node.values(try StreamName(pool: pool.rawValue, identity: final, dataset: "drafts.\(source).\(survivor)")) == ["d2": "later"])
        }
    }

    @Test func aCopyStillPendingAfterAMinuteNoLongerHoldsTheIdentityUp() async throws {
        let log = try ListShardLog(shards: Self.shards)
        let clock = TestClock()
        var options = quick
        options.clock = clock.read
        try await withLedger(options) { node in
            let (pool, survivor, source) = try await setUp(node, log)
            let final = try await identityOffTheRegistryShard(node, log, pool)
            _ = try await node.mergeIdentities(pool: pool, source: source, into: survivor, caller: "admin")
            clock.advance(seconds: 59)
            await expectLedgerError(.unavailable) {
                _ = try await node.mergeIdentities(pool: pool, source: survivor, into: final, caller: "admin")
            }
            // Nobody made the copies (say they keep failing): a minute on, the merge goes on.
            clock.advance(seconds: 2)
            let summary = try await node.mergeIdentities(pool: pool, source: survivor, into: final, caller: "admin")
            #expect(summary.merged == [survivor])
        }
    }

    @Test func aWriteOfTwoShardsIsStillRefusedWhole() async throws {
        // Nothing the API offers writes two shards now; the guard stays for what might.
        let log = try ListShardLog(shards: Self.shards)
        try await withLedger { ledger in
            ledger.bindCluster(log)
            let a = stream("x", identity: "a")
            var other = 0
            while log.shards.shard(of: stream("x", identity: "b\(other)")) == log.shards.shard(of: a) { other += 1 }
            let b = stream("x", identity: "b\(other)")
            let error = await expectLedgerError(.invalidParameter) {
                try await ledger.write { txn in
                    try ledger.appendChange(txn, to: a, author: "t", events: [.put(key: "k", value: "1", deviceModified: nil)])
                    try ledger.appendChange(txn, to: b, author: "t", events: [.put(key: "k", value: "2", deviceModified: nil)])
                }
            }
            #expect(error?.message.contains("2 shards") == true)
            #expect(log.count == 0)
            let left = try ledger.values(a).count + ledger.values(b).count
            #expect(left == 0)
        }
    }

    @Test func onOneNodeAMergeStillCopiesInItsOwnCommit() async throws {
        try await withLedger { ledger in
            let created = try await ledger.createIdentityPool(region: "us-east-1", name: "App", allowUnauthenticatedIdentities: true,
                                                              developerProviderName: nil, supportedLoginProviders: [:], caller: "admin")
            let pool = try IdentityPoolID(created.id)
            let a = try await ledger.newUnauthenticatedIdentity(pool: pool).id
            let b = try await ledger.newUnauthenticatedIdentity(pool: pool).id
            try await ledger.put(try StreamName(pool: pool.rawValue, identity: b, dataset: "x"), ["k": "v"])
            _ = try await ledger.mergeIdentities(pool: pool, source: b, into: a, caller: "admin")
            #expect(try ledger.values(try StreamName(pool: pool.rawValue, identity: a, dataset: "x.\(b)")) == ["k": "v"])
            #expect(try ledger.pendingMergeCopies().isEmpty)
        }
    }
}
