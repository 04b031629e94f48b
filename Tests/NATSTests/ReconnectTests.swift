import Testing
import Foundation
import NATS

@Suite("Reconnection")
struct ReconnectTests {
    @Test func killedServerMidRequestThenNextServer() async throws {
        let first = try await NATSServerProcess.start()
        let second = try await NATSServerProcess.start()
        let client = try await connectClient([first.url, second.url], requestTimeout: .seconds(3))
        let events = client.events
        #expect(await client.connectedServer == first.url)

        let sub = try await client.subscribe("feed")
        let blackHole = try await client.subscribe("svc.never")
        try await client.flush()
        let serviceSub = try await client.subscribe("svc.ping")
        let responder = Task {
            for try await m in serviceSub { try await client.publish(m.replyTo!, payload: bytes("pong")) }
        }
        defer { responder.cancel() }
        try await client.flush()

        // A request in flight when the server dies fails (not a hang).
        let inFlight = Task { () -> (any Error)? in
            do {
                _ = try await client.request("svc.never", payload: [], timeout: .seconds(20))
                return nil
            } catch { return error }
        }
        try await client.flush() // the request is on the wire
        first.stop(signal: SIGKILL)
        let error = try await withTimeout("in-flight request failure", .seconds(10)) { await inFlight.value }
        #expect(error as? NATSError == .connectionLost || error as? NATSError == .timeout, "got \(String(describing: error))")

        let event = try await waitForEvent(events) { if case .reconnected = $0 { true } else { false } }
        #expect(event == .reconnected(server: second.url))
        #expect(await client.isConnected)

        // Subscriptions were re-sent: traffic from another client on the new server flows.
        let other = try await connectClient([second.url])
        try await other.publish("feed", payload: bytes("after"))
        let got = try await withTimeout("message after reconnect") {
            for try await m in sub { return m.string }
            return ""
        }
        #expect(got == "after")
        let reply = try await other.request("svc.ping", payload: [])
        #expect(reply.string == "pong")
        _ = blackHole
        await other.close()
        await client.close()
    }

    @Test func restartedServerAndPublishWhileDisconnected() async throws {
        let server = try await NATSServerProcess.start()
        var options = NATSClientOptions(servers: [server.url])
        options.reconnectWait = .milliseconds(50)
        options.requestTimeout = .seconds(10)
        let client = try await NATSClient.connect(options)
        let events = client.events
        let sub = try await client.subscribe("x")
        try await client.flush()
        server.stop(signal: SIGKILL)
        _ = try await waitForEvent(events) { $0 == .disconnected }
        #expect(await client.isConnected == false)
        // A publish while disconnected waits (bounded) for the reconnection.
        let publisher = Task { try await client.publish("x", payload: bytes("queued")) }
        try await server.launch()
        _ = try await waitForEvent(events) { if case .reconnected = $0 { true } else { false } }
        try await withTimeout("publish after reconnection") { try await publisher.value }
        let got = try await withTimeout("message after restart") {
            for try await m in sub { return m.string }
            return ""
        }
        #expect(got == "queued")

        // Without a server, publishing gives up with notConnected after the time-out.
        var short = NATSClientOptions(servers: [server.url])
        short.requestTimeout = .milliseconds(300)
        short.reconnectWait = .milliseconds(50)
        let c2 = try await NATSClient.connect(short)
        let e2 = c2.events
        server.stop(signal: SIGKILL)
        _ = try await waitForEvent(e2) { $0 == .disconnected }
        await #expect(throws: NATSError.notConnected) { try await c2.publish("x", payload: []) }
        await #expect(throws: NATSError.timeout) { try await c2.waitUntilConnected(timeout: .milliseconds(100)) }
        await c2.close()
        await client.close()
    }
}
