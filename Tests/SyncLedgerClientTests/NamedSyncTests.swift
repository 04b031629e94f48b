import Foundation
import SyncLedger
import SyncLedgerTestSupport
import Testing
@testable import SyncLedgerClient

/// A client store, a client and a named sync manager over a real ledger (``LedgerTransport``).
struct NamedSyncHarness {
    let ledger: Ledger
    let transport: LedgerTransport
    let store: ClientStore
    let client: SyncClient
    let manager: SyncManager
    let identity = "test:1"

    /// The server's stream of `dataset` (pool test:0, identity test:1).
    func server(_ dataset: String) -> StreamName { stream(dataset, identity: "1") }
    /// Another device writes on the server.
    func otherDevice(_ dataset: String, _ values: [String: String?]) async throws {
        try await ledger.put(server(dataset), values, device: "other-device")
    }
    /// The local record.
    func local(_ dataset: String, _ key: String) throws -> LocalRecord? { try store.record(identity: identity, dataset: dataset, key: key) }
    /// A local change.
    func put(_ dataset: String, _ key: String, _ value: String?) throws {
        try store.put(identity: identity, dataset: dataset, key: key, value: value)
    }
}

/// A one-sync config.
func namedSyncConfig(_ type: SyncType, _ mode: MergeMode = .overwrite, name: String = "s", datasets: [String] = ["prefs"]) throws -> SyncConfig {
    try SyncConfig(syncs: [SyncDefinition(syncName: name, syncType: type, datasets: datasets, options: SyncOptions(mergeMode: mode))])
}

/// Runs `body` with a harness whose manager has `config` loaded; the store's directory is given
/// too (for tests that reopen it).
func withNamedSyncs(_ config: SyncConfig, _ body: (NamedSyncHarness, String) async throws -> Void) async throws {
    try await withLedger { ledger in
        let dir = temporaryPath("named-syncs")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let transport = LedgerTransport(ledger: ledger)
        let store = try ClientStore(directory: dir, durable: false)
        let client = try SyncClient(store: store, transport: transport, pool: "test:0")
        let manager = try SyncManager(client: client)
        #expect(try manager.load(config: config) == config.syncs.map(\.syncName))
        try await body(NamedSyncHarness(ledger: ledger, transport: transport, store: store, client: client, manager: manager), dir)
    }
}

/// Runs, reSyncs, cursors and persistence of named syncs, over the real server logic.
@Suite struct NamedSyncTests {
    @Test(arguments: [MergeMode.overwrite, .leaveIfChanged])
    func downReplacesOrKeepsADirtyRecordPerMergeMode(mode: MergeMode) async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown, mode)) { h, _ in
            try await h.otherDevice("prefs", ["a": "1", "b": "2"])
            let first = try await h.manager.run("s")
            #expect(first.status == .done && first.pulled == 2 && first.progress == 100)
            let synced = try #require(try h.local("prefs", "a"))
            #expect(synced.value == "1" && synced.syncCount == 1 && !synced.isDirty && synced.lastModifiedBy != nil)
            try h.put("prefs", "a", "mine")
            try await h.otherDevice("prefs", ["a": "theirs", "b": "3"])  // sync count 2
            let state = try await h.manager.reSync("s")
            #expect(state.status == .done && state.fetched == 2)
            let a = try #require(try h.local("prefs", "a"))
            #expect(try h.local("prefs", "b")?.value == "3")
            let shared = try #require(try h.store.dataset(identity: h.identity, name: "prefs")).lastSyncCount
            switch mode {
            case .overwrite:
                #expect(a.value == "theirs" && !a.isDirty && a.syncCount == 2)
                #expect(state.pulled == 2 && state.skipped == 0 && shared == 2)
            case .leaveIfChanged:
                #expect(a.value == "mine" && a.isDirty && a.syncCount == 1)
                #expect(state.pulled == 1 && state.skipped == 1)
                // The shared cursor stays before the skipped change, so synchronize still meets it.
                #expect(shared == 1)
                await #expect(throws: SyncClientError.unresolvedConflicts(["a"])) { try await h.client.synchronize("prefs") }
            }
            #expect(state.cursors == ["prefs": 2])
        }
    }

    @Test(arguments: [MergeMode.overwrite, .leaveIfChanged])
    func upPushesOverOrSkipsAServerChangePerMergeMode(mode: MergeMode) async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncUp, mode)) { h, _ in
            try await h.otherDevice("prefs", ["a": "1", "b": "1"])
            _ = try await h.client.synchronize("prefs")
            try h.put("prefs", "a", "mine")
            try h.put("prefs", "b", "mine too")
            try h.put("prefs", "c", "new")
            try await h.otherDevice("prefs", ["a": "theirs"])  // sync count 2: a changed since this device saw it
            let state = try await h.manager.run("s")
            #expect(state.status == .done && state.totalSize == 3)
            let server = try h.ledger.values(h.server("prefs"))
            #expect(server["b"] == "mine too" && server["c"] == "new")
            let a = try #require(try h.local("prefs", "a"))
            switch mode {
            case .overwrite:
                #expect(server["a"] == "mine" && !a.isDirty && a.syncCount == 3)
                #expect(state.pushed == 3 && state.skipped == 0)
            case .leaveIfChanged:
                #expect(server["a"] == "theirs" && a.isDirty && a.value == "mine" && a.syncCount == 1)
                #expect(state.pushed == 2 && state.skipped == 1)
            }
            #expect(try h.local("prefs", "b")?.isDirty == false && h.local("prefs", "c")?.isDirty == false)
        }
    }

    @Test func anUpSyncThatMeetsAnotherDevicesWritePullsAgainAndWins() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncUp, .overwrite)) { h, _ in
            try await h.otherDevice("prefs", ["a": "1"])
            _ = try await h.client.synchronize("prefs")
            try h.put("prefs", "a", "mine")
            let ledger = h.ledger, server = h.server("prefs")
            h.transport.beforeNextPush { try await ledger.put(server, ["a": "sneaky"], device: "other-device") }
            let state = try await h.manager.run("s")
            #expect(state.status == .done && state.pushed == 1)
            #expect(h.transport.counters.withLock { ($0.pushes, $0.conflicts) } == (2, 1))
            #expect(try h.ledger.values(server)["a"] == "mine")
            #expect(try h.local("prefs", "a")?.isDirty == false)
        }
    }

    @Test func anUpSyncGivesUpAfterMaxRetries() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncUp, .overwrite)) { h, _ in
            try h.put("prefs", "a", "mine")
            let ledger = h.ledger, server = h.server("prefs")
            for i in 0...h.client.maxRetries { h.transport.beforeNextPush { try await ledger.put(server, ["a": "other \(i)"]) } }
            await #expect(throws: SyncClientError.retriesExhausted(h.client.maxRetries + 1)) { try await h.manager.run("s") }
            let state = try #require(h.manager.state("s"))
            #expect(state.status == .failed && state.error?.contains("gave up") == true && state.endTime != nil)
            #expect(try h.local("prefs", "a")?.isDirty == true)
        }
    }

    @Test func aSyncOfBothWaysPullsThenPushes() async throws {
        try await withNamedSyncs(try namedSyncConfig(.sync, .overwrite, datasets: ["prefs", "notes"])) { h, _ in
            try await h.otherDevice("prefs", ["a": "server"])
            try h.put("prefs", "mine", "local")
            try h.put("notes", "n", "note")
            let state = try await h.manager.run("s")
            #expect(state.status == .done && state.pulled == 1 && state.pushed == 2 && state.progress == 100)
            #expect(try h.ledger.values(h.server("prefs")) == ["a": "server", "mine": "local"])
            #expect(try h.ledger.values(h.server("notes")) == ["n": "note"])
            #expect(try h.local("prefs", "a")?.value == "server")
            #expect(state.datasetStates.values.filter { !$0.done }.isEmpty)
        }
    }

    @Test func reSyncFetchesOnlyWhatChangedSinceItsCursor() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown)) { h, _ in
            try await h.otherDevice("prefs", ["a": "1", "b": "1", "c": "1", "d": "1", "e": "1"])
            #expect(try await h.manager.run("s").fetched == 5)
            #expect(h.transport.returned("prefs") == 5)
            try await h.otherDevice("prefs", ["b": "2", "d": "2"])
            let state = try await h.manager.reSync("s")
            #expect(h.transport.returned("prefs") == 7)  // two more
            #expect(state.fetched == 2 && state.pulled == 2 && state.cursors == ["prefs": 2])
            // Nothing new: nothing fetched.
            #expect(try await h.manager.reSync("s").fetched == 0 && h.transport.returned("prefs") == 7)
            // run starts again from 0.
            #expect(try await h.manager.run("s").fetched == 5 && h.transport.returned("prefs") == 12)
            #expect(try h.store.records(identity: h.identity, dataset: "prefs").mapValues(\.value) == ["a": "1", "b": "2", "c": "1", "d": "2", "e": "1"])
        }
    }

    @Test func anInterruptedSyncShowsStoppedAndReSyncFinishesIt() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown, datasets: ["prefs", "notes"])) { h, _ in
            try await h.otherDevice("prefs", ["a": "1", "b": "1"])
            try await h.otherDevice("notes", ["n": "1"])
            // The run is cancelled while it pulls the second dataset.
            h.transport.failNextPull(of: "notes", with: CancellationError())
            await #expect(throws: CancellationError.self) { try await h.manager.run("s") }
            var state = try #require(h.manager.state("s"))
            #expect(state.status == .stopped && state.progress == 50 && state.error == nil)
            #expect(state.cursors == ["prefs": 1, "notes": 0] && state.datasetStates["prefs"]?.done == true)
            // The process dies while a run is RUNNING: a new manager over the store says STOPPED.
            state.status = .running
            try h.store.saveNamedSync(state)
            let restarted = try SyncManager(client: h.client)
            #expect(restarted.state("s")?.status == .stopped)
            #expect(try h.store.namedSyncStates().first?.status == .stopped)
            try await h.otherDevice("prefs", ["b": "2"])
            let done = try await restarted.reSync("s")
            #expect(done.status == .done && done.cursors == ["prefs": 2, "notes": 1])
            // prefs: only the change since its cursor; notes: from its start.
            #expect(done.datasetStates["prefs"]?.fetched == 1 && done.datasetStates["notes"]?.fetched == 1)
            #expect(h.transport.returned("prefs") == 3 && h.transport.returned("notes") == 1)
            #expect(try h.local("notes", "n")?.value == "1" && h.local("prefs", "b")?.value == "2")
        }
    }

    @Test func aFailedRunKeepsTheErrorText() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown)) { h, _ in
            h.transport.failNextPull(of: "prefs", with: SyncClientError.network("the cable is out"))
            await #expect(throws: SyncClientError.network("the cable is out")) { try await h.manager.run("s") }
            let state = try #require(h.manager.state("s"))
            #expect(state.status == .failed && state.error?.contains("the cable is out") == true)
            await #expect(throws: SyncClientError.self) { try await h.manager.run("nope") }
            #expect(try await h.manager.reSync("s").status == .done)
        }
    }

    @Test func aDatasetDeletedOnTheServerFailsTheSyncAndKeepsTheLocalCopy() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown)) { h, _ in
            try await h.otherDevice("prefs", ["a": "1"])
            try await h.manager.run("s")
            try await h.ledger.deleteDataset(h.server("prefs"))
            await #expect(throws: SyncClientError.datasetDeletedOnServer("prefs")) { try await h.manager.reSync("s") }
            #expect(h.manager.state("s")?.status == .failed)
            #expect(try h.local("prefs", "a")?.value == "1")
        }
    }

    @Test func stateIsPersistedAndSeenAfterTheStoreIsReopened() async throws {
        try await withLedger { ledger in
            let dir = temporaryPath("named-syncs")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let transport = LedgerTransport(ledger: ledger)
            try await ledger.put(stream("prefs", identity: "1"), ["a": "1", "b": "2"])
            var before: SyncState?
            do {
                let client = try SyncClient(store: try ClientStore(directory: dir, durable: false), transport: transport, pool: "test:0")
                let manager = try SyncManager(client: client)
                try manager.load(config: try namedSyncConfig(.syncDown, .leaveIfChanged, name: "down"))
                try manager.load(config: try namedSyncConfig(.syncUp, name: "up"))
                before = try await manager.run("down")
            }
            let client = try SyncClient(store: try ClientStore(directory: dir, durable: false), transport: transport, pool: "test:0")
            let manager = try SyncManager(client: client)
            let down = try #require(manager.state("down"))
            #expect(down == before)
            #expect(down.status == .done && down.progress == 100 && down.totalSize == 2 && down.pulled == 2)
            #expect(down.cursors == ["prefs": 1] && down.identity == "test:1" && down.options.mergeMode == .leaveIfChanged)
            #expect(down.startTime != nil && down.endTime != nil && down.error == nil)
            #expect(manager.states().map(\.name) == ["down", "up"] && manager.state("up")?.status == .new)
            // Loading the same config again skips what exists: state and cursors kept.
            #expect(try manager.load(config: try namedSyncConfig(.syncDown, name: "down")) == [])
            #expect(manager.state("down") == before)
            try manager.deleteSync("up")
            #expect(manager.state("up") == nil && manager.states().count == 1)
        }
    }

    @Test func cleanResyncGhostsRemovesCleanRecordsTheServerLostAndKeepsDirtyOnes() async throws {
        try await withNamedSyncs(try namedSyncConfig(.syncDown)) { h, _ in
            try await h.otherDevice("prefs", ["a": "1", "b": "1", "c": "1"])
            try await h.manager.run("s")
            try await h.otherDevice("prefs", ["a": nil, "b": nil])
            try h.put("prefs", "b", "mine")
            #expect(try await h.manager.cleanResyncGhosts("s") == 1)
            #expect(try h.local("prefs", "a") == nil)
            #expect(try h.local("prefs", "b")?.value == "mine" && h.local("prefs", "b")?.isDirty == true)
            #expect(try h.local("prefs", "c")?.value == "1")
            let d = try #require(try h.store.dataset(identity: h.identity, name: "prefs"))
            #expect(d.recordCount == 2 && d.bytes == UInt64("bminec1".utf8.count))
            #expect(try await h.manager.cleanResyncGhosts("s") == 0)
            try h.manager.load(config: try namedSyncConfig(.syncUp, name: "up"))
            await #expect(throws: SyncClientError.self) { try await h.manager.cleanResyncGhosts("up") }
        }
    }
}
