import Testing
import Foundation
import NATS

@Suite("Core protocol against nats-server")
struct CoreTests {
    @Test func pubSubInOrderWithHeaders() async throws {
        let server = try await NATSServerProcess.start()
        let a = try await connectClient([server.url])
        let b = try await connectClient([server.url])
        let info = await a.serverInfo
        #expect(info?.headers == true)
        #expect(info?.version.isEmpty == false)
        let sub = try await a.subscribe("orders.*")
        try await a.flush()
        var h = NATSHeaders()
        h.add("X-Trace", "1")
        h.add("X-Trace", "2")
        for i in 0..<100 {
            try await b.publish("orders.new", payload: bytes("m\(i)"), headers: i == 0 ? h : nil)
        }
        try await b.flush()
        let got = try await withTimeout("100 messages") {
            var out: [NATSMessage] = []
            for try await m in sub {
                out.append(m)
                if out.count == 100 { break }
            }
            return out
        }
        #expect(got.map(\.string) == (0..<100).map { "m\($0)" })
        #expect(got[0].headers == h)
        #expect(got[0].headers?.values(for: "X-Trace") == ["1", "2"])
        #expect(got[1].headers == nil)
        await sub.unsubscribe()
        await a.close()
        await b.close()
    }

    @Test func queueGroupsShareMessages() async throws {
        let server = try await NATSServerProcess.start()
        let client = try await connectClient([server.url])
        let q1 = try await client.subscribe("work", queue: "workers")
        let q2 = try await client.subscribe("work", queue: "workers")
        try await client.flush()
        for i in 0..<50 { try await client.publish("work", payload: bytes("\(i)")) }
        try await client.flush()
        let collector = Collector<String>()
        let readers = [q1, q2].map { sub in
            Task { for try await m in sub { await collector.append(m.string) } }
        }
        defer { readers.forEach { $0.cancel() } }
        let items = try await eventually("50 queued messages") { await collector.count >= 50 ? await collector.items : nil }
        #expect(Set(items) == Set((0..<50).map(String.init)))
        #expect(items.count == 50)
        await client.close()
    }

    @Test func requestReplyNoRespondersAndTimeout() async throws {
        let server = try await NATSServerProcess.start()
        let service = try await connectClient([server.url])
        let client = try await connectClient([server.url])
        let sub = try await service.subscribe("svc.echo")
        let silent = try await service.subscribe("svc.silent")
        try await service.flush()
        let responder = Task {
            for try await m in sub {
                var h = NATSHeaders()
                h["X-Reply"] = "yes"
                try await service.publish(m.replyTo!, payload: m.payload.reversed(), headers: h)
            }
        }
        defer { responder.cancel() }
        for i in 0..<20 {
            let reply = try await client.request("svc.echo", payload: bytes("abc\(i)"))
            #expect(reply.string == String("abc\(i)".reversed()))
            #expect(reply.headers?["X-Reply"] == "yes")
        }
        await #expect(throws: NATSError.noResponders) {
            _ = try await client.request("svc.nobody", payload: [])
        }
        await #expect(throws: NATSError.timeout) {
            _ = try await client.request("svc.silent", payload: [], timeout: .milliseconds(300))
        }
        _ = silent
        await service.close()
        await client.close()
    }

    @Test func injectionAndLimitsRefused() async throws {
        let server = try await NATSServerProcess.start()
        let client = try await connectClient([server.url])
        await #expect(throws: NATSError.invalidSubject("a b")) {
            try await client.publish("a b", payload: [])
        }
        await #expect(throws: NATSError.self) {
            try await client.publish("a\r\nPUB evil 0", payload: [])
        }
        await #expect(throws: NATSError.self) {
            _ = try await client.subscribe("x\r\nUNSUB 1")
        }
        await #expect(throws: NATSError.self) {
            try await client.publish("ok", payload: [], replyTo: "r\r\nx")
        }
        var h = NATSHeaders()
        h["X"] = "v\r\nNats-Msg-Id: forged"
        await #expect(throws: NATSError.invalidHeader("CR or LF in the value of X")) {
            try await client.publish("ok", payload: [], headers: h)
        }
        let max = await client.serverInfo?.maxPayload ?? 0
        #expect(max > 0)
        await #expect(throws: NATSError.payloadTooLarge(size: max + 1, max: max)) {
            try await client.publish("ok", payload: [UInt8](repeating: 0, count: max + 1))
        }
        // The connection is still healthy.
        try await client.flush()
        #expect(await client.isConnected)
        await client.close()
        await #expect(throws: NATSError.closed) { try await client.publish("ok", payload: []) }
    }
}
