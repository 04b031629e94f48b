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
            connections: ConnectionRegistry(maximum: maxConnections),
            budget: BodyBudget(capacity: budget, connections: maxConnections, largestBody: maxBody), metrics: TransportMetrics())
    }

    private func body(_ count: Int) -> HTTPRequestPart { .body(ByteBuffer(repeating: 0x20, count: count)) }

    /// Writes a whole response, as Hummingbird would.
    private func respond(_ channel: EmbeddedChannel) throws {
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
        while try channel.readOutbound(as: HTTPResponsePart.self) != nil {}
    }

    private func states(_ registry: ConnectionRegistry) -> [Int] {
        let counts = registry.counts
        return [counts.idle, counts.receiving, counts.busy]
    }

    /// A connected channel with both guards, as GuardedHTTP1Channel installs them (the HTTP
    /// codec between them is left out: the test writes HTTP parts).
    private func channel(_ shared: TransportShared) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        let connection = ConnectionGuard(shared: shared, progress: OutboundProgress(), logger: Logger(label: "test"))
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
        try channel.writeParsed(head(contentLength: 1000))
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)
        let (status, fields, body) = try #require(try refusal(channel))
        #expect(status == 413)
        #expect(fields[HTTPField.Name("x-amzn-ErrorType")!] == "InvalidParameterException")
        #expect(fields[.connection] == "close")
        #expect(body.contains("1000") && body.contains("100 bytes"))
        // What the client still sends is dropped; nothing was taken from the budget.
        try channel.writeParsed(HTTPRequestPart.body(ByteBuffer(string: "xyz")))
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)
        #expect(shared.budget.inUse == 0)
        #expect(shared.metrics.value(.bodyTooLarge) == 1)
    }

    @Test func aBodyWithoutALengthIsCountedAndCutPastTheLimit() throws {
        let shared = shared()
        let channel = try channel(shared)
        try channel.writeParsed(head(contentLength: nil))
        try channel.writeParsed(HTTPRequestPart.body(ByteBuffer(repeating: 0x20, count: 60)))
        #expect(shared.budget.inUse == 60)
        #expect(throws: RequestCut.self) { try channel.writeParsed(HTTPRequestPart.body(ByteBuffer(repeating: 0x20, count: 60))) }
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

    @Test func theBodyBudgetIsTakenAsBytesArriveAndGivenBackWithTheResponse() throws {
        // 150 bytes: each of 10 connections may hold 3 of its own, the other 120 are pooled.
        let shared = shared(maxBody: 100, budget: 150, maxConnections: 10)
        #expect(shared.budget.share == 3 && shared.budget.poolCapacity == 120)
        let first = try channel(shared), second = try channel(shared)
        try first.writeParsed(head(contentLength: 100))
        #expect(shared.budget.inUse == 0)  // a declared length takes nothing
        try first.writeParsed(body(90))
        #expect(shared.budget.inUse == 90 && shared.budget.poolInUse == 87)
        try second.writeParsed(head(contentLength: 60))
        try second.writeParsed(body(20))
        #expect(shared.budget.inUse == 110)
        // 30 more would take 134 of the 120 pooled bytes: refused, and its 20 go back.
        #expect(throws: RequestCut.self) { try second.writeParsed(body(30)) }
        guard case .head? = try second.readInbound(as: HTTPRequestPart.self), case .body? = try second.readInbound(as: HTTPRequestPart.self) else {
            Issue.record("the head and the first chunk should have been passed on")
            return
        }
        #expect(try second.readInbound(as: HTTPRequestPart.self) == nil)
        let (status, fields, _) = try #require(try refusal(second))
        #expect(status == 429 && fields[HTTPField.Name("x-amzn-ErrorType")!] == "TooManyRequestsException")
        #expect(shared.budget.inUse == 90)
        #expect(shared.metrics.value(.bodyBudgetExhausted) == 1)
        // The first request ends and is answered: its bytes go back, and the same request now fits.
        try first.writeParsed(body(10))
        try first.writeParsed(HTTPRequestPart.end(nil))
        #expect(shared.budget.inUse == 100)
        try respond(first)
        #expect(shared.budget.inUse == 0 && shared.budget.poolInUse == 0)
        let third = try channel(shared)
        try third.writeParsed(head(contentLength: 60))
        try third.writeParsed(body(60))
        #expect(shared.budget.inUse == 60)
        // A closed connection gives back what it held.
        try third.close().wait()
        #expect(shared.budget.inUse == 0 && shared.budget.poolInUse == 0)
    }

    @Test func bodiesDeclaredButNeverSentHoldNoBudget() throws {
        let shared = shared(maxBody: 100, budget: 150, maxConnections: 10)
        // Nine connections each declare the largest body and send nothing (before the fix,
        // the first one took 100 of the 150 bytes and every other body got 429).
        var idle = [EmbeddedChannel]()
        for _ in 0..<9 {
            let channel = try channel(shared)
            try channel.writeParsed(head(contentLength: 100))
            #expect(try channel.readOutbound(as: HTTPResponsePart.self) == nil)
            idle.append(channel)
        }
        #expect(shared.budget.inUse == 0)
        let honest = try channel(shared)
        try honest.writeParsed(head(contentLength: 100))
        try honest.writeParsed(body(100))
        try honest.writeParsed(HTTPRequestPart.end(nil))
        #expect(try honest.readOutbound(as: HTTPResponsePart.self) == nil)  // no refusal
        #expect(shared.budget.inUse == 100)
        #expect(shared.metrics.value(.bodyBudgetExhausted) == 0)
    }

    @Test func aBodyWithinItsConnectionsShareFitsWhenThePoolIsFull() throws {
        // 400 bytes over 10 connections: 10 bytes of each connection's own, 300 pooled.
        let shared = shared(maxBody: 100, budget: 400, maxConnections: 10)
        #expect(shared.budget.share == 10 && shared.budget.poolCapacity == 300)
        var holders = [EmbeddedChannel]()
        for size in [100, 100, 100, 40] {
            let channel = try channel(shared)
            try channel.writeParsed(head(contentLength: 100))
            try channel.writeParsed(body(size))
            holders.append(channel)
        }
        #expect(shared.budget.poolInUse == 300 && shared.budget.inUse == 340)
        // 10 bytes come from the connection's own share: served though the pool is full.
        let small = try channel(shared)
        try small.writeParsed(head(contentLength: 10))
        try small.writeParsed(body(10))
        try small.writeParsed(HTTPRequestPart.end(nil))
        #expect(try small.readOutbound(as: HTTPResponsePart.self) == nil)
        // 11 need one pooled byte: refused.
        let larger = try channel(shared)
        try larger.writeParsed(head(contentLength: 11))
        #expect(throws: RequestCut.self) { try larger.writeParsed(body(11)) }
        #expect(try refusal(larger)?.0 == 429)
        #expect(shared.budget.inUse == 350)
    }

    @Test func theRestOfABodyAnsweredBeforeItWasReadIsPassedOnUncharged() throws {
        // Hummingbird answers /health without reading a body, then discards the rest of it.
        let shared = shared()
        let channel = try channel(shared)
        try channel.writeParsed(head(contentLength: nil))
        try channel.writeParsed(body(10))
        try respond(channel)
        #expect(shared.budget.inUse == 0)
        try channel.writeParsed(body(20))  // before the fix: an index out of range (a crash)
        try channel.writeParsed(HTTPRequestPart.end(nil))
        #expect(shared.budget.inUse == 0)
        #expect(channel.isActive)
        // Past --max-body-bytes it is cut, without a second answer.
        try channel.writeParsed(head(contentLength: nil))
        try respond(channel)
        #expect(throws: RequestCut.self) { try channel.writeParsed(body(150)) }
        #expect(try channel.readOutbound(as: HTTPResponsePart.self) == nil)
        #expect(!channel.isActive)
    }

    @Test func atTheLimitTheLongestIdleThenTheOldestReceivingMakesRoomButNoBusyOneThatProgresses() {
        let registry = ConnectionRegistry(maximum: 3)
        let a = EmbeddedChannel(), b = EmbeddedChannel(), c = EmbeddedChannel(), d = EmbeddedChannel(), e = EmbeddedChannel()
        guard case .admitted = registry.admit(a), case .admitted = registry.admit(b), case .admitted = registry.admit(c) else {
            Issue.record("not admitted")
            return
        }
        let t = ContinuousClock.now
        registry.update(a, .receiving(since: t - .seconds(30)))
        registry.update(b, .idle(since: t - .seconds(1)))
        registry.update(c, .receiving(since: t - .seconds(60)))
        // An idle connection goes first, however long ago the others' requests started.
        guard case .admittedEvicting(let first, .idle) = registry.admit(d) else { Issue.record("no room made"); return }
        #expect(first === b)
        registry.update(d, .busy)
        // Then the one whose unfinished request started the longest ago.
        guard case .admittedEvicting(let second, .receiving) = registry.admit(e) else { Issue.record("no room made"); return }
        #expect(second === c)
        registry.update(e, .busy)
        guard case .admittedEvicting(let third, .receiving) = registry.admit(EmbeddedChannel()) else { Issue.record("no room made"); return }
        #expect(third === a)
        #expect(registry.counts == (idle: 1, receiving: 0, busy: 2, stalled: 0))
    }

    @Test func aConnectionIsRefusedOnlyWhenEveryConnectionHasARequestReadAndInProgress() throws {
        let shared = shared(maxConnections: 2)
        let registry = shared.connections
        // One receiving a body that never comes, one whose request was read and is being handled.
        let waiting = try channel(shared), handled = try channel(shared)
        #expect(states(registry) == [2, 0, 0])
        try waiting.writeParsed(head(contentLength: 1))
        try handled.writeParsed(head(contentLength: 0))
        #expect(states(registry) == [0, 2, 0])
        try handled.writeParsed(HTTPRequestPart.end(nil))
        #expect(states(registry) == [0, 1, 1])
        // A newcomer takes the place of the one still receiving (before the fix: refused).
        let newcomer = try channel(shared)
        #expect(!waiting.isActive)
        #expect(newcomer.isActive && handled.isActive)
        #expect(shared.metrics.value(.connectionEvicted) == 1)
        try newcomer.writeParsed(head(contentLength: 0))
        try newcomer.writeParsed(HTTPRequestPart.end(nil))
        #expect(states(registry) == [0, 0, 2])
        // Both are busy: the next one is closed at once.
        let refused = try channel(shared)
        #expect(!refused.isActive && handled.isActive && newcomer.isActive)
        #expect(shared.metrics.value(.connectionRefused) == 1)
        // A response being written keeps a connection busy until its end; then it is idle.
        try handled.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        #expect(states(registry) == [0, 0, 2])
        try handled.writeOutbound(HTTPResponsePart.end(nil))
        #expect(states(registry) == [1, 0, 1])
        let last = try channel(shared)
        #expect(last.isActive && !handled.isActive && newcomer.isActive)
    }

    @Test func aRequestHeadStillArrivingCountsAsReceiving() throws {
        // ConnectionGuard alone, on raw bytes (no HTTP decoder, no RequestGuard).
        let shared = shared()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ConnectionGuard(shared: shared, progress: OutboundProgress(), logger: Logger(label: "test")))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(states(shared.connections) == [1, 0, 0])
        try channel.writeInbound(ByteBuffer(string: "GET /he"))
        #expect(states(shared.connections) == [0, 1, 0])
        // It is still cut at the header timeout.
        channel.embeddedEventLoop.advanceTime(by: .seconds(11))
        #expect(!channel.isActive)
        #expect(states(shared.connections) == [0, 0, 0])
    }

    @Test func aHeadThatDoesNotArriveInTimeClosesTheConnection() throws {
        let shared = shared()
        let slow = try channel(shared), prompt = try channel(shared)
        try prompt.writeParsed(head(contentLength: 0))
        try prompt.writeParsed(HTTPRequestPart.end(nil))
        slow.embeddedEventLoop.advanceTime(by: .seconds(11))
        prompt.embeddedEventLoop.advanceTime(by: .seconds(11))
        #expect(!slow.isActive)
        #expect(prompt.isActive)
        #expect(shared.metrics.value(.headerTimeout) == 1)
    }

    @Test func aBodyThatDoesNotArriveInTimeFailsTheRequestAndCloses() throws {
        let shared = shared()
        let channel = try channel(shared)
        try channel.writeParsed(head(contentLength: 50))
        channel.embeddedEventLoop.advanceTime(by: .seconds(29))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
        #expect(throws: RequestCut.self) { try channel.throwIfErrorCaught() }
        #expect(shared.metrics.value(.bodyTimeout) == 1)
    }
}
