import Foundation
import SyncLedger
import Synchronization
import SyncLedgerTestSupport
import Testing
@testable import SyncLedgerClient

/// Observing named syncs: the stream of states, and that it ends and leaks nothing.
@Suite(.timeLimit(.minutes(1))) struct NamedSyncStatusTests {
    @Test func statusUpdatesYieldTheCurrentStateThenRunningThenDone() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown, datasets: ["prefs", "notes"])) { h, _ in
            try await h.otherDevice("prefs", ["a": "1"])
            let updates = h.manager.statusUpdates("s")
            #expect(h.manager.hub.observerCount == 1)
            try await h.manager.run("s")
            var seen: [SyncState] = []
            for await state in updates {
                seen.append(state)
                if state.status == .done { break }
            }
            #expect(seen.map(\.status) == [.new, .running, .running, .running, .done])
            #expect(seen.map(\.progress) == [0, 0, 50, 100, 100])
            #expect(seen.map(\.pulled) == [0, 0, 1, 1, 1])
            #expect(seen.map(\.totalSize) == [-1, -1, 1, 1, 1])
            #expect(seen.last == h.manager.state("s"))
        }
    }

    @Test func aStreamEndsWhenItsConsumerIsCancelledOrTheManagerGoes() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown)) { h, _ in
            let hub = h.manager.hub
            let stream = h.manager.statusUpdates("s")
            #expect(hub.observerCount == 1)
            let consumer = Task {
                var n = 0
                for await _ in stream { n += 1 }
                return n
            }
            consumer.cancel()
            #expect(await consumer.value <= 1)
            #expect(hub.observerCount == 0)

            weak var gone: SyncManager?
            let orphan: AsyncStream<SyncState>
            let otherHub: StateHub
            do {
                let manager = try SyncManager(client: h.client)
                gone = manager
                otherHub = manager.hub
                orphan = manager.statusUpdates("s")
                #expect(otherHub.observerCount == 1)
            }
            #expect(gone == nil)
            var statuses: [SyncStatus] = []
            for await state in orphan { statuses.append(state.status) }
            #expect(statuses == [.new])
            #expect(otherHub.observerCount == 0)
            // A stream asked for after the manager went (its hub kept alive here) ends at once.
            var late = otherHub.subscribe("s").makeAsyncIterator()
            #expect(await late.next() == nil)
        }
    }

    @Test func aSyncNotLoadedYetIsSeenOnceLoadedAndItsStreamEndsWhenDeleted() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown)) { h, _ in
            var later = h.manager.statusUpdates("later").makeAsyncIterator()
            try h.manager.load(config: try namedSyncConfig(.syncUp, name: "later"))
            #expect(await later.next()?.status == .new)
            try h.manager.deleteSync("later")
            #expect(await later.next() == nil)
            #expect(h.manager.hub.observerCount == 0)
        }
    }

    @Test func aSyncRunsOnceAtATime() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncUp)) { h, _ in
            try h.put("prefs", "a", "1")
            let manager = h.manager
            let refused = Mutex<[SyncClientError]>([])
            h.transport.beforeNextPush {
                do { try await manager.run("s") } catch let error as SyncClientError { refused.withLock { $0.append(error) } }
                do { _ = try await manager.cleanResyncGhosts("s") } catch let error as SyncClientError { refused.withLock { $0.append(error) } }
            }
            #expect(try await h.manager.run("s").status == .done)
            let errors = refused.withLock { $0 }
            #expect(errors.first == .invalidParameter("sync s is already running"))
            #expect(errors.count == 2)
            // Released afterwards.
            #expect(try await h.manager.reSync("s").status == .done)
        }
    }
}
