import HTTPTypes
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing
@testable import SyncLedgerServer

/// The connection and request guards on an `EmbeddedChannel`: what they forward, what they
/// answer themselves, the body budget, the connection registry and the timers.
@Suite struct TransportGuardTests {
    private func shared(maxBody: Int = 100, budget: Int = 150, maxConnections: Int = 10) -> TransportShared {
        TransportShared(
            limits: HTTPLimits(idleTimeout: .seconds(60), headerTimeout: .seconds(10), bodyTimeout: .seconds(30), maxBodyBytes: maxBody),
            connections: ConnectionRegistry(maximum: maxConnections), budget: BodyBudget(capacity: budget), metrics: TransportMetrics())
    }

    /// A connected channel with both guards, as GuardedHTTP1Channel installs them (the HTTP
    /// codec between them is left out: the test writes HTTP parts).
    private func channel(_ shared: TransportShared) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        let connection = ConnectionGuard(shared: shared, logger: Logger(label: "test"))
        try channel.pipeline.syncOperations.addHandler(connection)
        try channel.pipeline.syncOperations.addHandler(RequestGuard(connection: connection, shared: shared, logger: Logger(label: "test")))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    private func head(contentLength: Int?) -> HTTPRequestPart {
        var fields = HTTPFields()
        if let contentLength { fields[.contentLength] = "\(contentLength)" }
        return .head(HTTPRequest(method: .post, scheme: nil, authority: "127.0.0.1", path: "/identitypools/p", headerFields: fields))
    }

    /// The response the guard wrote: status, headers, body.
    private func refusal(_ channel: EmbeddedChannel) throws -> (Int, HTTPFields, String)? {
        guard case .head(let response)? = try channel.readOutbound(as: HTTPResponsePart.self) else { return nil }
        guard case .body(let body)? = try channel.readOutbound(as: HTTPResponsePart.self),
              case .end? = try channel.readOutbound(as: HTTPResponsePart.self) else { return nil }
        return (response.status.code, response.headerFields, String(buffer: body))
    }

    @Test func aContentLengthOverTheLimitIsAnswered413WithoutPassingTheRequestOn() throws {
        let shared = shared()
        let channel = try channel(shared)
        try channel.writeInbound(head(contentLength: 1000))
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)
        let (status, fields, body) = try #require(try refusal(channel))
        #expect(status == 413)
        #expect(fields[HTTPField.Name("x-amzn-ErrorType")!] == "InvalidParameterException")
        #expect(fields[.connection] == "close")
        #expect(body.contains("1000") && body.contains("100 bytes"))
        // What the client still sends is dropped; nothing was taken from the budget.
        try channel.writeInbound(HTTPRequestPart.body(ByteBuffer(string: "xyz")))
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)
        #expect(shared.budget.inUse == 0)
        #expect(shared.metrics.value(.bodyTooLarge) == 1)
    }

    @Test func aBodyWithoutALengthIsCountedAndCutPastTheLimit() throws {
        let shared = shared()
        let channel = try channel(shared)
        try channel.writeInbound(head(contentLength: nil))
        try channel.writeInbound(HTTPRequestPart.body(ByteBuffer(repeating: 0x20, count: 60)))
        #expect(shared.budget.inUse == 60)
        #expect(throws: RequestCut.self) { try channel.writeInbound(HTTPRequestPart.body(ByteBuffer(repeating: 0x20, count: 60))) }
        guard case .head? = try channel.readInbound(as: HTTPRequestPart.self), case .body? = try channel.readInbound(as: HTTPRequestPart.self) else {
            Issue.record("the head and the first chunk should have been passed on")
            return
        }
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)
        #expect(try refusal(channel)?.0 == 413)
        #expect(shared.budget.inUse == 0)
        // Hummingbird's own answer to the cut request is dropped.
        #expect(throws: RequestCut.self) { try channel.writeOutbound(HTTPResponsePart.end(nil)) }
    }

    @Test func theBodyBudgetIsSharedAndGivenBackWithTheResponse() throws {
        let shared = shared(budget: 150)
        let first = try channel(shared), second = try channel(shared)
        try first.writeInbound(head(contentLength: 100))
        #expect(shared.budget.inUse == 100)
        try second.writeInbound(head(contentLength: 60))
        #expect(try second.readInbound(as: HTTPRequestPart.self) == nil)
        let (status, fields, _) = try #require(try refusal(second))
        #expect(status == 429 && fields[HTTPField.Name("x-amzn-ErrorType")!] == "TooManyRequestsException")
        // The first request is answered: its bytes go back, and the same request now fits.
        try first.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        try first.writeOutbound(HTTPResponsePart.end(nil))
        #expect(shared.budget.inUse == 0)
        let third = try channel(shared)
        try third.writeInbound(head(contentLength: 60))
        #expect(shared.budget.inUse == 60)
    }

    @Test func atTheLimitTheLongestIdleConnectionMakesRoomButNoBusyOne() {
        let registry = ConnectionRegistry(maximum: 2)
        let a = EmbeddedChannel(), b = EmbeddedChannel(), c = EmbeddedChannel(), d = EmbeddedChannel()
        guard case .admitted = registry.admit(a), case .admitted = registry.admit(b) else { Issue.record("not admitted"); return }
        registry.setBusy(a, true)
        guard case .admittedEvicting(let victim) = registry.admit(c) else { Issue.record("no room made"); return }
        #expect(victim === b)
        registry.setBusy(c, true)
        guard case .refused = registry.admit(d) else { Issue.record("a busy connection was evicted"); return }
        #expect(registry.open == 2)
        registry.remove(a)
        guard case .admitted = registry.admit(d) else { Issue.record("a freed slot was not reused"); return }
    }

    @Test func aHeadThatDoesNotArriveInTimeClosesTheConnection() throws {
        let shared = shared()
        let slow = try channel(shared), prompt = try channel(shared)
        try prompt.writeInbound(head(contentLength: 0))
        try prompt.writeInbound(HTTPRequestPart.end(nil))
        slow.embeddedEventLoop.advanceTime(by: .seconds(11))
        prompt.embeddedEventLoop.advanceTime(by: .seconds(11))
        #expect(!slow.isActive)
        #expect(prompt.isActive)
        #expect(shared.metrics.value(.headerTimeout) == 1)
    }

    @Test func aBodyThatDoesNotArriveInTimeFailsTheRequestAndCloses() throws {
        let shared = shared()
        let channel = try channel(shared)
        try channel.writeInbound(head(contentLength: 50))
        channel.embeddedEventLoop.advanceTime(by: .seconds(29))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
        #expect(throws: RequestCut.self) { try channel.throwIfErrorCaught() }
        #expect(shared.metrics.value(.bodyTimeout) == 1)
    }
}
