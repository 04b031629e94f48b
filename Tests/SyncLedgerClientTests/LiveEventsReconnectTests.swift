import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import SyncLedgerClient
import Synchronization
import Testing

/// A scripted HTTP server on a loopback port: each connection's request head is recorded, then
/// the script for that connection (by its index) writes the answer; the connection is closed
/// when the script returns. (Unchecked: the listening socket is only closed once, by `stop`.)
final class ScriptedServer: @unchecked Sendable {
    /// One accepted connection.
    struct Connection: Sendable {
        let fd: Int32
        let index: Int
        let log: Log
        func write(_ text: String) {
            var bytes = Array(text.utf8)[...]
            while !bytes.isEmpty {
                let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return }
                bytes = bytes.dropFirst(n)
            }
        }
        /// Blocks until the client closes the connection (or 30 s passed); whether it did.
        func waitForClientClose() -> Bool {
            var timeout = timeval(tv_sec: 30, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var buffer = [UInt8](repeating: 0, count: 4096)
            var closed = false
            while true {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n > 0 { continue }
                closed = n == 0 || errno == ECONNRESET
                break
            }
            log.closes.withLock { $0[index] = closed }
            return closed
        }
    }

    let url: URL
    /// What the server saw: the request heads, in the order the connections came, and per
    /// connection whether the client closed it while the script waited for that.
    final class Log: Sendable {
        let requests = Mutex<[String]>([])
        let closes = Mutex<[Int: Bool]>([:])
    }
    let log = Log()
    var requests: [String] { log.requests.withLock { $0 } }
    var clientClosed: [Int: Bool] { log.closes.withLock { $0 } }
    private let listener: Int32

    init(script: @escaping @Sendable (Int, Connection) -> Void) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        guard bound, listen(listener, 16) == 0 else { throw FixtureError("cannot listen on a loopback port") }
        url = URL(string: "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))")!
        let log = self.log
        Thread.detachNewThread {
            var index = 0
            while true {
                let fd = accept(listener, nil, nil)
                if fd < 0 { return }
                let connection = Connection(fd: fd, index: index, log: log), current = index
                index += 1
                Thread.detachNewThread {
                    var head: [UInt8] = []
                    var byte: UInt8 = 0
                    while !head.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)), recv(fd, &byte, 1, 0) == 1 { head.append(byte) }
                    log.requests.withLock { $0.append(String(decoding: head, as: UTF8.self)) }
                    script(current, connection)
                    close(fd)
                }
            }
        }
    }

    /// Wakes the accepting thread and stops listening.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    deinit { stop() }

    /// The head of a 200 event stream read until the connection closes.
    static let streamHead = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\nconnection: close\r\n\r\n"
}

/// Reconnection rules against a scripted server: a stream the server ends, one that goes silent,
/// an oversize event, answers to retry and answers to give up on. (The real server cannot be
/// restarted on the same port with the same log by the fixture, so it cannot serve these.)
struct LiveEventsReconnectTests {
    static let key = AWSCredentials(accessKeyID: "AKIDSCRIPTED", secretAccessKey: "scripted-secret-never-sent", sessionToken: "scripted-session-token")

    func consumer(_ server: ScriptedServer, idleTimeout: Duration = .seconds(60), maxEventBytes: Int = 1 << 20) -> LiveEvents {
        LiveEvents(endpoint: server.url, pool: "us-east-1:pool", credentials: StaticCredentials(Self.key, identityID: "us-east-1:me"),
                   dataset: "notes", idleTimeout: idleTimeout, maxEventBytes: maxEventBytes)
    }

    @Test func aStreamTheServerEndsIsResumedAfterItsLastDispatchedID() async throws {
        let server = try ScriptedServer { index, connection in
            switch index {
            case 0:
                connection.write(ScriptedServer.streamHead + "retry: 50\nid: 10\n\nid: 11\nevent: dataset\ndata: {\"n\":1}\n\nid: 12\ndata: cut")
            case 1:
                connection.write(ScriptedServer.streamHead + "id: 13\nevent: dataset\ndata: {\"n\":2}\n\n")
                _ = connection.waitForClientClose()
            default: break
            }
        }
        let live = consumer(server), received = Received()
        let task = Task { try await live.run { received.add($0) } }
        #expect(try await waitUntil { received.all.count == 2 })
        task.cancel()
        try await task.value
        #expect(received.all.map(\.id) == ["11", "13"] && received.all.map { $0.fields["n"] } == ["1", "2"])
        let heads = server.requests
        try #require(heads.count == 2)
        #expect(!heads[0].lowercased().contains("last-event-id"))
        #expect(heads[1].lowercased().contains("last-event-id: 11\r\n"))
        // Signed for cognito-sync with the session token, for the identity and dataset; the
        // secret never travels.
        for head in heads {
            #expect(head.hasPrefix("GET /events?identityPoolId=us-east-1%3Apool&identityId=us-east-1%3Ame&datasetName=notes HTTP/1.1\r\n"))
            #expect(head.contains("Credential=AKIDSCRIPTED/") && head.contains("/us-east-1/cognito-sync/aws4_request"))
            #expect(head.lowercased().contains("x-amz-security-token: scripted-session-token"))
            #expect(!head.contains(Self.key.secretAccessKey))
        }
    }

    @Test func aSilentStreamIsDroppedAndOpenedAgain() async throws {
        let server = try ScriptedServer { index, connection in
            connection.write(ScriptedServer.streamHead + "retry: 50\nid: \(5 + index)\n\n" + (index == 1 ? "event: dataset\ndata: {}\n\n" : ""))
            _ = connection.waitForClientClose()
        }
        let live = consumer(server, idleTimeout: .milliseconds(300)), received = Received()
        let task = Task { try await live.run { received.add($0) } }
        #expect(try await waitUntil { received.all.count == 1 })
        task.cancel()
        try await task.value
        #expect(received.all.map(\.id) == ["6"])
        try #require(server.requests.count >= 2)
        #expect(server.requests[1].lowercased().contains("last-event-id: 5\r\n"))
        // The silent connection was closed by the client, not left open.
        #expect(try await waitUntil { server.clientClosed[0] == true })
    }

    @Test func anOversizeEventDropsTheConnection() async throws {
        let server = try ScriptedServer { index, connection in
            let event = index == 0 ? "data: " + String(repeating: "x", count: 500) + "\n\n" : "id: 2\nevent: dataset\ndata: small\n\n"
            connection.write(ScriptedServer.streamHead + "retry: 50\nid: 1\n\n" + event)
            _ = connection.waitForClientClose()
        }
        let live = consumer(server, maxEventBytes: 100), received = Received()
        let task = Task { try await live.run { received.add($0) } }
        #expect(try await waitUntil { received.all.count == 1 })
        task.cancel()
        try await task.value
        #expect(received.all.map(\.data) == ["small"])
        try #require(server.requests.count >= 2)
        #expect(server.requests[1].lowercased().contains("last-event-id: 1\r\n"))
        #expect(try await waitUntil { server.clientClosed[0] == true })
    }

    @Test(.timeLimit(.minutes(1))) func aServerErrorIsRetriedAndARefusalIsNot() async throws {
        let retried = try ScriptedServer { index, connection in
            if index == 0 {
                connection.write("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
            } else {
                connection.write(ScriptedServer.streamHead + "id: 3\nevent: dataset\ndata: {}\n\n")
                _ = connection.waitForClientClose()
            }
        }
        let live = consumer(retried), received = Received()
        let task = Task { try await live.run { received.add($0) } }
        #expect(try await waitUntil { received.all.count == 1 })   // after the 1 s backoff
        task.cancel()
        try await task.value

        let refusing = try ScriptedServer { _, connection in
            let body = "{\"message\":\"no\"}"
            connection.write("HTTP/1.1 403 Forbidden\r\nx-amzn-ErrorType: NotAuthorizedException\r\ncontent-length: \(body.utf8.count)\r\nconnection: close\r\n\r\n" + body)
        }
        await #expect(throws: SyncClientError.notAuthorized("no")) { try await consumer(refusing).run { _ in } }
        #expect(refusing.requests.count == 1)
    }

    @Test(.timeLimit(.minutes(1))) func noContentMeansDoNotReconnect() async throws {
        let server = try ScriptedServer { _, connection in
            connection.write("HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
        }
        let live = consumer(server)
        try await live.run { _ in Issue.record("no event was sent") }
        #expect(server.requests.count == 1 && live.connections == 0)
    }

    @Test func anEventsStreamDeliversInOrderUntilTheConsumerStops() async throws {
        let server = try ScriptedServer { _, connection in
            connection.write(ScriptedServer.streamHead + (1...50).map { "id: \($0)\nevent: dataset\ndata: {\"n\":\($0)}\n\n" }.joined())
            _ = connection.waitForClientClose()
        }
        var ids: [String] = []
        for try await event in consumer(server).events() {
            ids.append(event.id)
            if ids.count == 50 { break }
        }
        #expect(ids == (1...50).map(String.init))
        #expect(try await waitUntil { server.requests.count == 1 })
    }
}
