import Foundation
import Testing
@testable import SyncLedgerClient

/// The local store alone: changes are atomic, dirty until a sync, limits checked locally.
@Suite struct ClientStoreTests {
    func withStore(_ body: (ClientStore) throws -> Void) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("client-store-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try body(try ClientStore(directory: dir))
    }

    @Test func putsAreDirtyAndCountedAndAnUnchangedValueIsNoChange() throws {
        try withStore { store in
            #expect(try store.put(identity: "us-east-1:a", dataset: "prefs", key: "theme", value: "dark"))
            #expect(try !store.put(identity: "us-east-1:a", dataset: "prefs", key: "theme", value: "dark"))
            #expect(try store.put(identity: "us-east-1:a", dataset: "prefs", key: "lang", value: "fr"))
            let d = try #require(try store.dataset(identity: "us-east-1:a", name: "prefs"))
            #expect(d.recordCount == 2 && d.bytes == UInt64("themedarklangfr".utf8.count) && d.lastSyncCount == 0)
            let r = try #require(try store.record(identity: "us-east-1:a", dataset: "prefs", key: "theme"))
            #expect(r.isDirty && r.syncCount == 0 && r.value == "dark" && r.deviceLastModified != nil)
            #expect(try store.put(identity: "us-east-1:a", dataset: "prefs", key: "theme", value: nil))
            #expect(try store.dataset(identity: "us-east-1:a", name: "prefs")?.recordCount == 1)
            #expect(try store.record(identity: "us-east-1:a", dataset: "prefs", key: "theme")?.value == nil)
            // A long key is kept whole.
            let long = String(repeating: "k", count: 900)
            try store.put(identity: "us-east-1:a", dataset: "prefs", key: long, value: "v")
            #expect(try store.records(identity: "us-east-1:a", dataset: "prefs")[long]?.value == "v")
            // The dirty index finds them, long key included; a delete clears it.
            #expect(Set(try store.dirtyRecords(identity: "us-east-1:a", dataset: "prefs").map(\.key)) == ["theme", "lang", long])
            try store.deleteDataset(identity: "us-east-1:a", dataset: "prefs")
            #expect(try store.dirtyRecords(identity: "us-east-1:a", dataset: "prefs").isEmpty)
        }
    }

    @Test func limitsAreCheckedBeforeAnythingIsWritten() throws {
        var limits = SyncLedgerClient.ClientStore.defaultLimits
        limits.maxRecordsPerDataset = 2
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("client-store-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try ClientStore(directory: dir, limits: limits)
        try store.put(identity: "i", dataset: "d", key: "a", value: "1")
        try store.put(identity: "i", dataset: "d", key: "b", value: "1")
        #expect(throws: SyncClientError.self) { try store.put(identity: "i", dataset: "d", key: "c", value: "1") }
        #expect(try store.records(identity: "i", dataset: "d").count == 2)
        #expect(throws: SyncClientError.self) { try store.put(identity: "i", dataset: "d", key: "", value: "1") }
    }

    @Test func aLocalDeleteIsRememberedAndAnIdentityChangeRenames() throws {
        try withStore { store in
            try store.put(identity: "us-east-1:old", dataset: "prefs", key: "k", value: "v")
            try store.put(identity: "us-east-1:old", dataset: "gone", key: "k", value: "v")
            try store.deleteDataset(identity: "us-east-1:old", dataset: "gone")
            #expect(try store.dataset(identity: "us-east-1:old", name: "gone")?.isDeletedLocally == true)
            #expect(throws: SyncClientError.self) { try store.put(identity: "us-east-1:old", dataset: "gone", key: "k", value: "w") }
            try store.changeIdentity(pool: "p", from: "us-east-1:old", to: "us-east-1:new")
            #expect(try store.datasets(identity: "us-east-1:old").isEmpty)
            let moved = try store.datasets(identity: "us-east-1:new")
            #expect(moved.map(\.name) == ["prefs.us-east-1:old"] && moved[0].dataset.lastSyncCount == 0)
            #expect(try store.record(identity: "us-east-1:new", dataset: "prefs.us-east-1:old", key: "k")?.value == "v")
            #expect(try store.currentIdentity(pool: "p") == "us-east-1:new")
        }
    }
}
