import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import SyncLedgerClient
import Synchronization
import Testing

extension SyncClientError {
    /// The case's name, for assertions.
    var kind: String {
        switch self {
        case .conflict: "conflict"
        case .limitExceeded: "limitExceeded"
        case .notAuthorized: "notAuthorized"
        case .notFound: "notFound"
        case .network: "network"
        case .server: "server"
        case .invalidParameter: "invalidParameter"
        case .unresolvedConflicts: "unresolvedConflicts"
        case .datasetDeletedOnServer: "datasetDeletedOnServer"
        case .cancelled: "cancelled"
        case .retriesExhausted: "retriesExhausted"
        case .store: "store"
        }
    }
}

/// Replace patches of `values` for records new to the dataset.
func newRecords(_ values: [String: String]) -> [RecordPatch] {
    values.sorted { $0.key < $1.key }.map { RecordPatch(key: $0.key, value: $0.value, syncCount: 0, deviceLastModified: nil) }
}

/// CognitoSyncTransport against the real server binary (one server per test).
final class TransportTests {
    let server: TestServer

    init() throws { server = try TestServer() }
    deinit { server.stop() }

    @Test func putThenListShowsRecordsWithSyncCountsOverTemporaryCredentials() async throws {
        let pool = try await server.createIdentityPool()
        let (identity, credentials) = try await server.makeIdentity(pool: pool)
        #expect(credentials.sessionToken != nil)
        let transport = server.transport(pool: pool, identity: identity, credentials: credentials)
        #expect(try await transport.identityID() == identity)

        let empty = try await transport.listUpdates(identity: identity, dataset: "prefs", after: 0)
        #expect(empty.records.isEmpty && !empty.datasetExists && empty.datasetSyncCount == 0 && !empty.syncSessionToken.isEmpty)

        let device = Date(timeIntervalSince1970: 1_700_000_000.25)
        let pushed = try await transport.putRecords(
            identity: identity, dataset: "prefs",
            patches: [RecordPatch(key: "color", value: "blue", syncCount: 0, deviceLastModified: device),
                      RecordPatch(key: "size / ü", value: "{\"n\": 1}", syncCount: 0, deviceLastModified: nil)],
            sessionToken: empty.syncSessionToken, deviceID: "device-1")
        #expect(pushed.map(\.key).sorted() == ["color", "size / ü"])
        #expect(pushed.allSatisfy { $0.syncCount == 1 })

        let pulled = try await transport.listUpdates(identity: identity, dataset: "prefs", after: 0)
        #expect(pulled.datasetExists && pulled.datasetSyncCount == 1)
        let byKey = Dictionary(uniqueKeysWithValues: pulled.records.map { ($0.key, $0) })
        #expect(byKey["color"]?.value == "blue" && byKey["color"]?.syncCount == 1)
        #expect(byKey["size / ü"]?.value == "{\"n\": 1}")
        #expect(byKey["color"]?.deviceLastModified == device)
        #expect(byKey["color"]?.lastModified.map { abs($0.timeIntervalSinceNow) < 60 } == true)

        let after = try await transport.listUpdates(identity: identity, dataset: "prefs", after: 1)
        #expect(after.records.isEmpty && after.datasetSyncCount == 1)
    }

    @Test func listUpdatesReadsEveryPage() async throws {
        // The server keeps at most 1,024 live records: 1,000 records, 500 of them removed, and
        // 500 more make 1,500 records (removed ones included) to page over.
        let (pool, identity) = (newID(), newID())
        let transport = server.transport(pool: pool, identity: identity)
        let first = try await transport.listUpdates(identity: identity, dataset: "big", after: 0)
        let values = Dictionary(uniqueKeysWithValues: (0..<1000).map { ("k\($0)", "value \($0)") })
        let put = try await transport.putRecords(identity: identity, dataset: "big", patches: newRecords(values),
                                                 sessionToken: first.syncSessionToken, deviceID: nil)
        #expect(put.count == 1000)
        let second = try await transport.listUpdates(identity: identity, dataset: "big", after: 0)
        #expect(second.records.count == 1000)
        let removals = second.records.filter { Int($0.key.dropFirst())! < 500 }
            .map { RecordPatch(key: $0.key, value: nil, syncCount: $0.syncCount, deviceLastModified: nil) }
        _ = try await transport.putRecords(identity: identity, dataset: "big", patches: removals, sessionToken: second.syncSessionToken, deviceID: nil)
        let third = try await transport.listUpdates(identity: identity, dataset: "big", after: 1)
        #expect(third.records.count == 500 && third.records.allSatisfy { $0.value == nil })
        let more = Dictionary(uniqueKeysWithValues: (1000..<1500).map { ("k\($0)", "value \($0)") })
        _ = try await transport.putRecords(identity: identity, dataset: "big", patches: newRecords(more), sessionToken: third.syncSessionToken, deviceID: nil)

        let all = try await transport.listUpdates(identity: identity, dataset: "big", after: 0)
        #expect(all.records.count == 1500)
        #expect(Set(all.records.map(\.key)).count == 1500)
        #expect(all.datasetSyncCount == 3)
        for record in all.records {
            let n = Int(record.key.dropFirst())!
            #expect(record.value == (n < 500 ? nil : "value \(n)"), "\(record.key)")
        }
    }

    @Test func aStaleSyncCountIsAConflict() async throws {
        let (pool, identity) = (newID(), newID())
        let transport = server.transport(pool: pool, identity: identity)
        let pull = try await transport.listUpdates(identity: identity, dataset: "d", after: 0)
        _ = try await transport.putRecords(identity: identity, dataset: "d", patches: newRecords(["a": "1"]), sessionToken: pull.syncSessionToken, deviceID: nil)
        let again = try await transport.listUpdates(identity: identity, dataset: "d", after: 0)
        let error = await #expect(throws: SyncClientError.self) {
            try await transport.putRecords(identity: identity, dataset: "d", patches: newRecords(["a": "2"]), sessionToken: again.syncSessionToken, deviceID: nil)
        }
        #expect(error?.kind == "conflict", "\(String(describing: error))")
        let unchanged = try await transport.listUpdates(identity: identity, dataset: "d", after: 0)
        #expect(unchanged.records.map(\.value) == ["1"])
    }

    @Test func deleteDatasetThenDescribeIsNilAndDeletingAMissingDatasetSucceeds() async throws {
        let (pool, identity) = (newID(), newID())
        let transport = server.transport(pool: pool, identity: identity)
        let pull = try await transport.listUpdates(identity: identity, dataset: "gone", after: 0)
        _ = try await transport.putRecords(identity: identity, dataset: "gone", patches: newRecords(["a": "1"]), sessionToken: pull.syncSessionToken, deviceID: nil)
        #expect(try await transport.describeDataset(identity: identity, dataset: "gone")?.records == 1)

        try await transport.deleteDataset(identity: identity, dataset: "gone")
        #expect(try await transport.describeDataset(identity: identity, dataset: "gone") == nil)
        let after = try await transport.listUpdates(identity: identity, dataset: "gone", after: 1)
        #expect(!after.datasetExists && after.deletedAfterRequestedSyncCount)

        try await transport.deleteDataset(identity: identity, dataset: "gone")
        try await transport.deleteDataset(identity: identity, dataset: "never-made")
        #expect(try await transport.describeDataset(identity: identity, dataset: "never-made") == nil)
    }

    @Test func listDatasetsAndDescribeDataset() async throws {
        let (pool, identity) = (newID(), newID())
        let transport = server.transport(pool: pool, identity: identity)
        #expect(try await transport.listDatasets(identity: identity).isEmpty)
        for (name, count) in [("one", 1), ("two", 2), ("three", 3)] {
            let pull = try await transport.listUpdates(identity: identity, dataset: name, after: 0)
            let values = Dictionary(uniqueKeysWithValues: (0..<count).map { ("key\($0)", "v") })
            _ = try await transport.putRecords(identity: identity, dataset: name, patches: newRecords(values), sessionToken: pull.syncSessionToken, deviceID: nil)
        }
        let listed = try await transport.listDatasets(identity: identity)
        #expect(listed.map(\.name).sorted() == ["one", "three", "two"])
        #expect(listed.first { $0.name == "three" }?.records == 3)
        let described = try #require(try await transport.describeDataset(identity: identity, dataset: "two"))
        #expect(described.records == 2 && described.bytes == UInt64("key0v".utf8.count * 2))
        #expect(described.created != nil && described.lastModified != nil && described.lastModifiedBy != nil)
        // Another identity of the pool sees none of them.
        #expect(try await transport.listDatasets(identity: newID()).isEmpty)
    }

    @Test func aRemovedRecordComesBackWithoutValue() async throws {
        let (pool, identity) = (newID(), newID())
        let transport = server.transport(pool: pool, identity: identity)
        let pull = try await transport.listUpdates(identity: identity, dataset: "d", after: 0)
        let put = try await transport.putRecords(identity: identity, dataset: "d", patches: newRecords(["a": "1", "b": "2"]), sessionToken: pull.syncSessionToken, deviceID: nil)
        let a = try #require(put.first { $0.key == "a" })
        let next = try await transport.listUpdates(identity: identity, dataset: "d", after: 1)
        let removed = try await transport.putRecords(identity: identity, dataset: "d", patches: [RecordPatch(key: "a", value: nil, syncCount: a.syncCount, deviceLastModified: nil)],
                                                     sessionToken: next.syncSessionToken, deviceID: nil)
        #expect(removed.count == 1 && removed[0].value == nil && removed[0].syncCount == 2)
        let changes = try await transport.listUpdates(identity: identity, dataset: "d", after: 1)
        #expect(changes.records.count == 1 && changes.records[0].key == "a" && changes.records[0].value == nil && changes.records[0].syncCount == 2)
    }

    @Test func aBadSecretIsNotAuthorized() async throws {
        let (pool, identity) = (newID(), newID())
        let wrong = AWSCredentials(accessKeyID: TestServer.admin.accessKeyID, secretAccessKey: "not-the-secret")
        let transport = server.transport(pool: pool, identity: identity, credentials: wrong)
        let error = await #expect(throws: SyncClientError.self) { try await transport.listDatasets(identity: identity) }
        #expect(error?.kind == "notAuthorized", "\(String(describing: error))")
        // Temporary credentials of one identity do not reach another's datasets.
        let real = try await server.createIdentityPool()
        let (_, credentials) = try await server.makeIdentity(pool: real)
        let other = server.transport(pool: real, identity: newID(), credentials: credentials)
        let refused = await #expect(throws: SyncClientError.self) { try await other.listDatasets(identity: other.identityID()) }
        #expect(refused?.kind == "notAuthorized", "\(String(describing: refused))")
    }

    @Test func aClosedPortIsANetworkError() async throws {
        let url = server.url
        #expect(server.stop() == 0, "the server exits 0 on SIGTERM")
        let transport = CognitoSyncTransport(endpoint: url, pool: newID(), credentials: StaticCredentials(TestServer.admin, identityID: newID()))
        let error = await #expect(throws: SyncClientError.self) { try await transport.listDatasets(identity: transport.identityID()) }
        #expect(error?.kind == "network", "\(String(describing: error))")
    }

    @Test func aServerThatDoesNotAnswerIsANetworkErrorWithinTheTimeout() async throws {
        let listener = try SilentListener()
        defer { listener.close() }
        let transport = CognitoSyncTransport(endpoint: URL(string: "http://127.0.0.1:\(listener.port)")!, pool: newID(),
                                             credentials: StaticCredentials(TestServer.admin, identityID: newID()), timeout: .milliseconds(500))
        let hold = listener.holdSilently()
        let error = await #expect(throws: SyncClientError.self) { try await transport.describeDataset(identity: newID(), dataset: "d") }
        #expect(error?.kind == "network", "\(String(describing: error))")
        // Not a speed check: only that the 500 ms limit applies rather than the 30 s default. The
        // time is the one the client held the connection, measured by the listener's thread: the
        // test task's own clock once read 25.7 s here, the cooperative pool being busy elsewhere.
        #expect(try await waitUntil { hold.held.withLock { $0 } != nil })
        let held = try #require(hold.held.withLock { $0 })
        #expect(held < .seconds(25), "the client held the silent connection \(held)")
    }

    @Test func anAnswerLargerThan64MiBIsRefusedUnread() async throws {
        let listener = try SilentListener()
        defer { listener.close() }
        listener.answerOnce("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \(65 << 20)\r\n\r\n{\"Datasets\": [")
        let transport = CognitoSyncTransport(endpoint: URL(string: "http://127.0.0.1:\(listener.port)")!, pool: newID(),
                                             credentials: StaticCredentials(TestServer.admin, identityID: newID()), timeout: .seconds(10))
        let error = await #expect(throws: SyncClientError.self) { try await transport.listDatasets(identity: newID()) }
        #expect(error == .server(status: 200, type: "ResponseTooLarge", message: "the server's answer exceeds \(64 << 20) bytes"))
    }

    @Test func anEndpointThatIsNotHTTPIsAnInvalidParameter() async throws {
        let transport = CognitoSyncTransport(endpoint: URL(string: "ftp://127.0.0.1/")!, pool: newID(),
                                             credentials: StaticCredentials(TestServer.admin, identityID: newID()))
        let error = await #expect(throws: SyncClientError.self) { try await transport.listDatasets(identity: newID()) }
        #expect(error?.kind == "invalidParameter")
    }
}

/// A loopback TCP socket that listens and never accepts nor answers: connections complete
/// (the kernel's backlog), requests go unanswered.
final class SilentListener: Sendable {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard fd >= 0, bound else { throw FixtureError("cannot listen on loopback: errno \(errno)") }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Accepts one connection (on a thread), reads a request head and writes `reply`.
    func answerOnce(_ reply: String) {
        let fd = self.fd
        Thread.detachNewThread {
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { return }
            var buffer = [UInt8](repeating: 0, count: 65536)
            var head: [UInt8] = []
            while !head.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
                let n = read(connection, &buffer, 1)
                if n <= 0 { break }
                head.append(buffer[0])
            }
            let bytes = Array(reply.utf8)
            _ = bytes.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
            // Keep the connection open (the promised body never comes) until the client closes it.
            while read(connection, &buffer, buffer.count) > 0 {}
            _ = Glibc.close(connection)
        }
    }

    /// Accepts one connection (on a thread), reads and discards what comes, answers nothing,
    /// and records how long the client held it open before closing it — timed on that thread,
    /// so a test task the cooperative pool runs late does not stretch it.
    func holdSilently() -> Hold {
        let fd = self.fd, hold = Hold()
        Thread.detachNewThread {
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { return }
            let accepted = ContinuousClock.now
            var buffer = [UInt8](repeating: 0, count: 65536)
            while read(connection, &buffer, buffer.count) > 0 {}
            hold.held.withLock { $0 = ContinuousClock.now - accepted }
            _ = Glibc.close(connection)
        }
        return hold
    }

    /// How long a client held a silent connection open (nil until it closed it).
    final class Hold: Sendable {
        let held = Mutex<Duration?>(nil)
    }

    func close() { _ = Glibc.close(fd) }
}
