import Foundation
import SyncLedger
@testable import SyncLedgerClient
import Synchronization
import Testing

/// Credentials of the admin for an identity the test can switch (as a merge does).
final class SwitchableIdentity: CredentialsProvider {
    let current: Mutex<String>
    init(_ identity: String) { current = Mutex(identity) }
    func credentials() async throws -> AWSCredentials { TestServer.admin }
    func identityID() async throws -> String { current.withLock { $0 } }
}

/// A handler that records every conflict it is given and resolves them one way.
final class RecordingHandler: SyncHandler {
    let resolution: Resolution?
    let acceptDeletes: Bool
    let seen = Mutex<[Conflict]>([])
    let merged = Mutex<[String]>([])
    init(_ resolution: Resolution?, acceptDeletes: Bool = false) {
        self.resolution = resolution
        self.acceptDeletes = acceptDeletes
    }
    func resolve(conflicts: [Conflict], dataset: String) async -> [String: Resolution]? {
        seen.withLock { $0 += conflicts }
        guard let resolution else { return nil }
        return Dictionary(conflicts.map { ($0.key, resolution) }, uniquingKeysWith: { a, _ in a })
    }
    func datasetDeleted(_ dataset: String) async -> Bool { acceptDeletes }
    func datasetsMerged(_ dataset: String, merged names: [String]) async -> Bool {
        merged.withLock { $0 += names }
        return true
    }
}

/// `synchronize` against the real server binary: devices of one identity editing offline and
/// syncing in every order.
final class SynchronizeTests {
    let server: TestServer
    var directories: [String] = []

    init() throws { server = try TestServer() }
    deinit {
        server.stop()
        for d in directories { try? FileManager.default.removeItem(atPath: d) }
    }

    /// A device: its own store, the admin's credentials for `identity`.
    func device(pool: String, identity: String, directory: String? = nil, credentials: (any CredentialsProvider)? = nil, endpoint: URL? = nil) throws -> SyncClient {
        let dir = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("client-\(UUID().uuidString)").path
        if directory == nil { directories.append(dir) }
        let transport = CognitoSyncTransport(endpoint: endpoint ?? server.url, pool: pool,
                                             credentials: credentials ?? StaticCredentials(TestServer.admin, identityID: identity))
        return try SyncClient(store: try ClientStore(directory: dir), transport: transport, pool: pool)
    }

    func serverValues(_ pool: String, _ identity: String, _ dataset: String) async throws -> [String: String] {
        let updates = try await server.transport(pool: pool, identity: identity).listUpdates(identity: identity, dataset: dataset, after: 0)
        return Dictionary(uniqueKeysWithValues: updates.records.compactMap { r in r.value.map { (r.key, $0) } })
    }

    @Test func twoDevicesEditingOfflineConvergeInEitherOrder() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let phone = try device(pool: pool, identity: identity), tablet = try device(pool: pool, identity: identity)
        try await phone.put("settings", "theme", "dark")
        try await tablet.put("settings", "font", "big")
        let first = try await phone.synchronize("settings")
        #expect(first.pushed == 1 && first.lastSyncCount == 1)
        let second = try await tablet.synchronize("settings")
        #expect(second.pulled == 1 && second.pushed == 1 && second.lastSyncCount == 2)
        try await phone.synchronize("settings")
        let expected = ["theme": "dark", "font": "big"]
        #expect(try await phone.getAll("settings") == expected)
        #expect(try await tablet.getAll("settings") == expected)
        #expect(try await serverValues(pool, identity, "settings") == expected)
        // Nothing is left to push, and a removal travels too.
        #expect(try phone.store.dirtyRecords(identity: identity, dataset: "settings").isEmpty)
        try await tablet.remove("settings", "font")
        try await tablet.synchronize("settings")
        try await phone.synchronize("settings")
        #expect(try await phone.getAll("settings") == ["theme": "dark"])
        #expect(try await phone.store.record(identity: identity, dataset: "settings", key: "font")?.value == nil)
    }

    @Test func conflictsAreResolvedEachWayAndNeverSilently() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let a = try device(pool: pool, identity: identity), b = try device(pool: pool, identity: identity)
        try await a.put("prefs", "theme", "from-a")
        try await b.put("prefs", "theme", "from-b")
        try await a.synchronize("prefs")
        // The default handler leaves the conflict: the sync fails, B's change stays.
        await #expect(throws: SyncClientError.unresolvedConflicts(["theme"])) { try await b.synchronize("prefs") }
        let kept = try #require(try b.store.record(identity: identity, dataset: "prefs", key: "theme"))
        #expect(kept.value == "from-b" && kept.isDirty)
        #expect(try b.store.dataset(identity: identity, name: "prefs")?.lastSyncOutcome == .failed)
        // Resolved with the local record: it wins on the server, and A gets it.
        let local = RecordingHandler(.local)
        let report = try await b.synchronize("prefs", handler: local)
        #expect(report.conflicts == 1 && local.seen.withLock { $0.map(\.remote.value) } == ["from-a"])
        #expect(try await serverValues(pool, identity, "prefs") == ["theme": "from-b"])
        try await a.synchronize("prefs")
        #expect(try await a.get("prefs", "theme") == "from-b")
        // Resolved with the remote record: the local change goes, the server is untouched.
        try await a.put("prefs", "theme", "a-again")
        try await b.put("prefs", "theme", "b-again")
        try await a.synchronize("prefs")
        try await b.synchronize("prefs", handler: RecordingHandler(.remote))
        #expect(try await b.get("prefs", "theme") == "a-again")
        #expect(try await serverValues(pool, identity, "prefs") == ["theme": "a-again"])
        // Resolved with a new value.
        try await a.put("prefs", "theme", "a3")
        try await b.put("prefs", "theme", "b3")
        try await a.synchronize("prefs")
        try await b.synchronize("prefs", handler: RecordingHandler(.value("both")))
        #expect(try await serverValues(pool, identity, "prefs") == ["theme": "both"])
    }

    @Test func aDatasetDeletedOnOneDeviceIsDeletedOnTheOthersOnlyIfTheyAgree() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let a = try device(pool: pool, identity: identity), b = try device(pool: pool, identity: identity)
        try await a.put("notes", "n1", "x")
        try await a.synchronize("notes")
        try await b.synchronize("notes")
        try await a.delete("notes")
        #expect(try a.store.dataset(identity: identity, name: "notes")?.isDeletedLocally == true)
        #expect(try await a.synchronize("notes").deleted)
        #expect(try a.store.dataset(identity: identity, name: "notes") == nil)
        #expect(try await serverValues(pool, identity, "notes").isEmpty)
        // B keeps its copy by default, and is told.
        await #expect(throws: SyncClientError.datasetDeletedOnServer("notes")) { try await b.synchronize("notes") }
        #expect(try await b.get("notes", "n1") == "x")
        #expect(try await b.synchronize("notes", handler: RecordingHandler(nil, acceptDeletes: true)).deleted)
        #expect(try await b.getAll("notes").isEmpty)
        // A dataset only ever local is deleted without trouble.
        try await b.put("scratch", "k", "v")
        try await b.delete("scratch")
        #expect(try await b.synchronize("scratch").deleted)
    }

    @Test func anIdentityMergeRenamesTheOldDatasetsAndReportsTheServersCopies() async throws {
        let provider = "login.client.test"
        let pool = try await server.createIdentityPool(developerProvider: provider)
        let (old, _) = try await server.developerToken(pool: pool, provider: provider, user: "old-user")
        let (new, _) = try await server.developerToken(pool: pool, provider: provider, user: "new-user")
        let identity = SwitchableIdentity(old)
        let phone = try device(pool: pool, identity: old, credentials: identity)
        try await phone.put("settings", "theme", "light")
        try await phone.synchronize("settings")
        try await phone.put("settings", "unsynced", "yes")
        let other = try device(pool: pool, identity: new)
        try await other.put("settings", "theme", "dark")
        try await other.synchronize("settings")
        _ = try await server.identityCall("MergeDeveloperIdentities", ["IdentityPoolId": pool, "DeveloperProviderName": provider,
                                                                        "SourceUserIdentifier": "old-user", "DestinationUserIdentifier": "new-user"])
        identity.current.withLock { $0 = new }
        // The local datasets move under the new identity as the server's copies are named.
        let copy = "settings.\(old)"
        #expect(try await phone.listDatasets().map(\.name) == [copy])
        let handler = RecordingHandler(.remote)
        let report = try await phone.synchronize("settings", handler: handler)
        #expect(report.merged == [copy] && handler.merged.withLock { $0 } == [copy])
        #expect(try await phone.getAll("settings") == ["theme": "dark"])
        // The copy syncs with the server's copy: the unsynced change goes up, nothing is lost.
        try await phone.synchronize(copy, handler: handler)
        #expect(try await serverValues(pool, new, copy) == ["theme": "light", "unsynced": "yes"])
    }

    /// How many requests of `operation` the server answered with `status`, from `/metrics`
    /// (signed by the admin, as the API's listener requires).
    func served(_ operation: String, status: Int = 200) async throws -> Int {
        let signer = SigV4Signer(accessKeyID: TestServer.admin.accessKeyID, secretAccessKey: TestServer.admin.secretAccessKey, service: "cognito-sync")
        let answer = try await HTTPExchange.send(endpoint: try HTTPEndpoint.parse(server.url).get(), method: .GET, path: "/metrics", signer: signer, timeout: .seconds(10))
        guard answer.status == 200 else { throw AWSErrorBody(answer).clientError(status: answer.status) }
        let line = String(decoding: answer.body, as: UTF8.self).split(separator: "\n")
            .first { $0.hasPrefix("syncledger_requests_total{operation=\"\(operation)\",status=\"\(status)\"}") }
        return line.flatMap { $0.split(separator: " ").last.flatMap { Int($0) } } ?? 0
    }

    @Test func aLargePushTravelsAsACompressedSegmentAndASmallOneAsUpdateRecords() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let a = try device(pool: pool, identity: identity), b = try device(pool: pool, identity: identity)
        let values = Dictionary(uniqueKeysWithValues: (0..<300).map { ("key-\($0)", String(repeating: "lorem ipsum ", count: 20) + "\($0)") })
        try await a.put("big", values.mapValues { Optional($0) })
        let segmentsBefore = try await served("MergeOfflineSegment")
        let report = try await a.synchronize("big")
        #expect(report.pushed == 300 && report.lastSyncCount == 1)
        #expect(try await served("MergeOfflineSegment") == segmentsBefore + 1, "300 records of repetitive text go as one zstd segment")
        #expect(try await serverValues(pool, identity, "big") == values)
        try await b.synchronize("big")
        #expect(try await b.getAll("big") == values)
        // A conflict through the segment path is a 409 like UpdateRecords': pulled and resolved.
        try await a.put("big", (0..<300).reduce(into: [String: String?]()) { $0["key-\($1)"] = "a-\($1) " + String(repeating: "x", count: 200) })
        try await b.put("big", "key-7", "from-b")
        try await b.synchronize("big")
        let conflict = RecordingHandler(.local)
        #expect(try await a.synchronize("big", handler: conflict).conflicts == 1)
        #expect(try await serverValues(pool, identity, "big")["key-7"]?.hasPrefix("a-7 ") == true)
        // A small push is plain UpdateRecords.
        let updatesBefore = try await served("UpdateRecords")
        try await b.put("small", "k", "v")
        try await b.synchronize("small")
        #expect(try await served("UpdateRecords") == updatesBefore + 1)
    }

    @Test func aPushOrEventNewerThanTheStoreQueuesASyncThatSurvivesARestart() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("client-\(UUID().uuidString)").path
        directories.append(dir)
        let writer = try device(pool: pool, identity: identity)
        try await writer.put("inbox", "m1", "hello")
        try await writer.synchronize("inbox")
        // The server cannot be reached: the sync is queued, durably.
        let closed = URL(string: "http://127.0.0.1:9")!
        let offline = SyncScheduler(client: try device(pool: pool, identity: identity, directory: dir, endpoint: closed))
        #expect(try await offline.synchronizeOnConnectivity("inbox") == nil)
        let notification = ["identityPoolId": pool, "identityId": identity, "datasetName": "inbox", "syncCount": "1"]
        #expect(try await offline.handleNotification(notification))
        #expect(try await offline.pending().map(\.dataset) == ["inbox"])
        #expect(try await offline.runPending() == false)
        // A restart, with the network back: the queue is still there and runs.
        let online = SyncScheduler(client: try device(pool: pool, identity: identity, directory: dir))
        #expect(try await online.pending().map(\.dataset) == ["inbox"])
        #expect(try await online.runPending())
        #expect(try await online.pending().isEmpty)
        #expect(try await online.client.get("inbox", "m1") == "hello")
        // Old news, another identity, or this device's own change: nothing queued.
        #expect(try await !online.handleNotification(notification))
        #expect(try await !online.handleNotification(notification.merging(["identityId": newID(), "syncCount": "9"]) { $1 }))
        #expect(try await !online.handleNotification(notification.merging(["syncCount": "9", "deviceId": online.client.deviceID]) { $1 }))
        #expect(try await online.handleNotification(notification.merging(["syncCount": "2"]) { $1 }))
    }
}
