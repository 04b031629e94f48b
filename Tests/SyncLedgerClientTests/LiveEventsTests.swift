import Foundation
import SyncLedger
@testable import SyncLedgerClient
import Synchronization
import Testing

/// Polls `condition` every 20 ms until it holds or `seconds` passed; returns whether it held.
/// The deadline bounds only a failing wait:
/// it is generous because Swift Testing shares two cooperative threads among every suite, and
/// CPU-heavy suites beside these starved them past 50 s in a run on a loaded machine.
func waitUntil(_ seconds: Double = 120, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

/// Events gathered by a consumer task.
final class Received: Sendable {
    let events = Mutex<[LiveEvent]>([])
    var all: [LiveEvent] { events.withLock { $0 } }
    var datasetEvents: [LiveEvent] { all.filter { $0.type == "dataset" } }
    func add(_ event: LiveEvent) { events.withLock { $0.append(event) } }
}

/// ``LiveEvents`` against the real server binary: events after writes of other devices,
/// resuming with the last id, and feeding a ``SyncScheduler``.
final class LiveEventsServerTests {
    let server: TestServer
    var directories: [String] = []

    init() throws { server = try TestServer(extraArguments: ["--events-keepalive", "0.2"]) }
    deinit {
        server.stop()
        for d in directories { try? FileManager.default.removeItem(atPath: d) }
    }

    /// A device of `identity` writing with the admin key.
    func device(pool: String, identity: String, id: String) throws -> SyncClient {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("client-\(UUID().uuidString)").path
        directories.append(dir)
        let transport = CognitoSyncTransport(endpoint: server.url, pool: pool, credentials: StaticCredentials(TestServer.admin, identityID: identity))
        return try SyncClient(store: try ClientStore(directory: dir), transport: transport, pool: pool, deviceID: id)
    }

    /// A consumer of `identity`'s events (signed with the admin key unless given `credentials`),
    /// started and connected.
    func consume(pool: String, identity: String, credentials: AWSCredentials = TestServer.admin, lastEventID: String? = nil, dataset: String? = nil)
        async throws -> (LiveEvents, Received, Task<Void, any Error>) {
        let live = LiveEvents(endpoint: server.url, pool: pool, credentials: StaticCredentials(credentials, identityID: identity),
                              dataset: dataset, lastEventID: lastEventID, idleTimeout: .seconds(5))
        let received = Received()
        let task = Task { try await live.run { received.add($0) } }
        // The stream's first `id:` (the position it starts from) says it is open.
        #expect(try await waitUntil { live.connections == 1 && live.lastEventID != nil })
        return (live, received, task)
    }

    func write(_ client: SyncClient, _ dataset: String, _ key: String, _ value: String) async throws {
        try await client.put(dataset, key, value)
        try await client.synchronize(dataset)
    }

    @Test func anotherDevicesWriteArrivesWithItsDatasetAndSyncCount() async throws {
        let pool = try await server.createIdentityPool()
        let (identity, other) = (newID(), newID())
        // The admin key hears every identity unless the query names one: the consumer does.
        let (live, received, task) = try await consume(pool: pool, identity: identity)
        defer { task.cancel() }
        // Another identity's write first: it must not reach this identity's stream.
        try await write(try device(pool: pool, identity: other, id: "elsewhere"), "settings", "theme", "light")
        let writer = try device(pool: pool, identity: identity, id: "writer-1")
        try await write(writer, "settings", "theme", "dark")
        try await write(writer, "settings", "font", "big")
        #expect(try await waitUntil { received.datasetEvents.count >= 2 })
        let events = received.datasetEvents
        try #require(events.count == 2)
        #expect(events.map { $0.fields["syncCount"] } == ["1", "2"])
        for event in events {
            #expect(event.fields["datasetName"] == "settings" && event.fields["identityId"] == identity && event.fields["identityPoolId"] == pool)
            #expect(event.fields["deviceId"] == "writer-1" && event.fields["deleted"] == "false" && event.fields["sequence"] == event.id)
        }
        #expect(live.lastEventID == events.last?.id)
        // Only dataset events are delivered, and nothing else came, on one stream.
        #expect(received.all.count == 2 && live.connections == 1 && live.endedStreams == 0)
    }

    /// With the identity's own temporary credentials (a session token). The server ends such a
    /// stream at its first keep-alive (it does not find the temporary credential when it checks
    /// it again), so these streams also resume by themselves in between.
    @Test func resumingWithTheLastIDGetsExactlyTheMissedEvents() async throws {
        let pool = try await server.createIdentityPool()
        let (identity, credentials) = try await server.makeIdentity(pool: pool)
        let writer = try device(pool: pool, identity: identity, id: "writer")
        let (_, first, firstTask) = try await consume(pool: pool, identity: identity, credentials: credentials, dataset: "notes")
        try await write(writer, "notes", "a", "1")
        #expect(try await waitUntil { first.datasetEvents.count == 1 })
        firstTask.cancel()
        try await firstTask.value   // cancelled: returns without an error
        let lastID = try #require(first.datasetEvents.last?.id)

        try await write(writer, "notes", "b", "2")
        try await write(writer, "other", "x", "1")   // another dataset: filtered out
        try await write(writer, "notes", "c", "3")
        let (_, second, secondTask) = try await consume(pool: pool, identity: identity, credentials: credentials, lastEventID: lastID, dataset: "notes")
        defer { secondTask.cancel() }
        // A live write after the missed ones: once it arrived, anything replayed twice would have too.
        try await write(writer, "notes", "d", "4")
        #expect(try await waitUntil { second.datasetEvents.count >= 3 })
        let events = second.datasetEvents
        #expect(events.map { $0.fields["syncCount"] } == ["2", "3", "4"])
        #expect(Set(events.map(\.id)).count == 3 && !events.map(\.id).contains(lastID))
        #expect(events.allSatisfy { $0.fields["datasetName"] == "notes" })
        #expect(events.compactMap { UInt64($0.id) } == events.compactMap { UInt64($0.id) }.sorted() && UInt64(events[0].id)! > UInt64(lastID)!)
    }

    @Test func aFeedQueuesASyncForChangesOfOtherDevicesOnly() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let a = try device(pool: pool, identity: identity, id: "device-a"), b = try device(pool: pool, identity: identity, id: "device-b")
        let scheduler = SyncScheduler(client: b)
        let live = LiveEvents(endpoint: server.url, pool: pool, credentials: StaticCredentials(TestServer.admin, identityID: identity))
        let errors = Mutex<[String]>([])
        let feed = Task { await live.feed(scheduler) { error in errors.withLock { $0.append("\(error)") } } }
        defer { feed.cancel() }
        #expect(try await waitUntil { live.lastEventID != nil })

        try await write(a, "notes", "title", "from A")
        #expect(try await waitUntil { try await scheduler.pending().map(\.dataset) == ["notes"] })
        #expect(try await b.get("notes", "title") == nil)
        #expect(try await scheduler.runPending())
        #expect(try await b.get("notes", "title") == "from A")
        #expect(try await scheduler.pending().isEmpty)

        // B's own write queues nothing; A's next one (another dataset) does: once it is queued,
        // B's event was handled before it.
        try await write(b, "notes", "body", "from B")
        try await write(a, "todo", "1", "milk")
        #expect(try await waitUntil { try await !scheduler.pending().isEmpty })
        #expect(try await waitUntil { try await scheduler.pending().map(\.dataset) == ["todo"] })
        try await scheduler.runPending()
        #expect(try await b.get("todo", "1") == "milk")
        #expect(errors.withLock { $0 }.isEmpty)
    }

    @Test func keepAlivesKeepAQuietStreamOpen() async throws {
        // The server's keep-alive is 0.2 s here: a 1 s idle timeout never fires.
        let pool = try await server.createIdentityPool()
        let live = LiveEvents(endpoint: server.url, pool: pool, credentials: StaticCredentials(TestServer.admin, identityID: newID()), idleTimeout: .seconds(1))
        let task = Task { try await live.run { _ in } }
        defer { task.cancel() }
        #expect(try await waitUntil { live.connections == 1 })
        let start = ContinuousClock.now
        // Observing that nothing happens needs time to pass: 3 idle timeouts.
        #expect(try await !waitUntil(3) { live.endedStreams > 0 })
        #expect(ContinuousClock.now - start >= .seconds(3))
    }

    @Test func aStreamOfCognitoIdentityCredentialsOutlivesItsKeepAlives() async throws {
        // The server re-checks a stream's credential at each keep-alive (0.2 s here); temporary
        // credentials of Cognito Identity are not stored, and must still be found then.
        let pool = try await server.createIdentityPool()
        let (identity, credentials) = try await server.makeIdentity(pool: pool)
        let live = LiveEvents(endpoint: server.url, pool: pool, credentials: StaticCredentials(credentials, identityID: identity), idleTimeout: .seconds(1))
        let task = Task { try await live.run { _ in } }
        defer { task.cancel() }
        #expect(try await waitUntil { live.connections == 1 })
        #expect(try await !waitUntil(2) { live.endedStreams > 0 }, "the stream was ended at a keep-alive")
        #expect(live.connections == 1)
    }

    @Test(.timeLimit(.minutes(1))) func aCredentialForAnotherIdentityIsRefusedOnce() async throws {
        let pool = try await server.createIdentityPool()
        let (_, credentials) = try await server.makeIdentity(pool: pool)
        let live = LiveEvents(endpoint: server.url, pool: pool, credentials: StaticCredentials(credentials, identityID: newID()))
        await #expect { try await live.run { _ in } } throws: { error in
            if case SyncClientError.notAuthorized = error { return true }
            return false
        }
        #expect(live.connections == 0)
    }
}
