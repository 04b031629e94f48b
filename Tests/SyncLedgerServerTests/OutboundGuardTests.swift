import HTTPTypes
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing
@testable import SyncLedgerServer

/// What a client that stops reading can hold: the write timeout and progress of
/// ``OutboundGuard``, eviction of stalled busy connections at the limit, the cap on pipelined
/// requests of ``RequestGuard``. On `EmbeddedChannel`, a write completes when it is flushed: a
/// write left unflushed is bytes the client has not taken.
@Suite struct OutboundGuardTests {
    private func shared(maxConnections: Int = 10, pipelined: Int = 16, outbound: Int = 1 << 20) -> TransportShared {
        // Heads and idleness are not timed here (the raw-byte tests send no complete request).
        var limits = HTTPLimits(idleTimeout: .seconds(3600), headerTimeout: .seconds(3600), bodyTimeout: .seconds(30), maxBodyBytes: 100)
        limits.writeTimeout = .seconds(30)
        limits.maxPipelined = pipelined
        limits.maxOutboundBytes = outbound
        return TransportShared(limits: limits, connections: ConnectionRegistry(maximum: maxConnections, stallGrace: limits.stallGrace),
                               budget: BodyBudget(capacity: 1000, connections: maxConnections, largestBody: 100), metrics: TransportMetrics())
    }

    /// Counts the reads asked of the socket.
    private final class ReadCounter: ChannelOutboundHandler {
        typealias OutboundIn = Any
        var reads = 0
        func read(context: ChannelHandlerContext) {
            reads += 1
            context.read()
        }
    }

    /// A connected channel with the raw-byte guards (no HTTP codec: the test writes bytes).
    private func raw(_ shared: TransportShared, reads: ReadCounter? = nil) throws -> (EmbeddedChannel, OutboundProgress) {
        let channel = EmbeddedChannel()
        let progress = OutboundProgress()
        if let reads { try channel.pipeline.syncOperations.addHandler(reads) }
        try channel.pipeline.syncOperations.addHandler(ConnectionGuard(shared: shared, progress: progress, logger: Logger(label: "test")))
        try channel.pipeline.syncOperations.addHandler(OutboundGuard(limits: shared.limits, metrics: shared.metrics, progress: progress, logger: Logger(label: "test")))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, progress)
    }

    @Test func bytesTheClientTakesNoneOfForTheWriteTimeoutCloseTheConnection() throws {
        let shared = shared()
        let (channel, progress) = try raw(shared)
        channel.write(ByteBuffer(repeating: 0x41, count: 1000), promise: nil)
        #expect(progress.stalledSince != nil)
        channel.embeddedEventLoop.advanceTime(by: .seconds(29))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
        #expect(shared.metrics.value(.writeTimeout) == 1)
        #expect(shared.connections.open == 0)
    }

    @Test func bytesThatKeepGoingOutNeverTimeOut() throws {
        let shared = shared()
        let (channel, progress) = try raw(shared)
        // A large answer goes out in slices: each slice that leaves is progress.
        channel.write(ByteBuffer(repeating: 0x41, count: 10 * OutboundGuard.progressSlice), promise: nil)
        for _ in 0..<10 {
            channel.embeddedEventLoop.advanceTime(by: .seconds(20))
            #expect(channel.isActive)
            channel.flush()
        }
        #expect(progress.stalledSince == nil)
        var total = 0
        while let piece = try channel.readOutbound(as: ByteBuffer.self) {
            #expect(piece.readableBytes <= OutboundGuard.progressSlice)
            total += piece.readableBytes
        }
        #expect(total == 10 * OutboundGuard.progressSlice)
        // Nothing waits: no timeout however long the client stays.
        channel.embeddedEventLoop.advanceTime(by: .seconds(45))
        #expect(channel.isActive)
        #expect(shared.metrics.value(.writeTimeout) == 0)
    }

    @Test func pastTheOutboundCapNothingMoreIsReadUntilTheBytesDrain() throws {
        let shared = shared(outbound: 1000)
        let reads = ReadCounter()
        let (channel, _) = try raw(shared, reads: reads)
        let before = reads.reads
        channel.read()
        #expect(reads.reads == before + 1)
        channel.write(ByteBuffer(repeating: 0x41, count: 1001), promise: nil)
        channel.read()
        #expect(reads.reads == before + 1)
        channel.flush()  // the client took them: the deferred read is made
        #expect(reads.reads == before + 2)
    }

    @Test func atTheLimitABusyConnectionStalledForTheGraceMakesRoomAndOneMakingProgressDoesNot() {
        let registry = ConnectionRegistry(maximum: 2, stallGrace: .seconds(1))
        let a = EmbeddedChannel(), b = EmbeddedChannel()
        let stalled = OutboundProgress(), reading = OutboundProgress()
        guard case .admitted = registry.admit(a, progress: stalled), case .admitted = registry.admit(b, progress: reading) else {
            Issue.record("not admitted")
            return
        }
        registry.update(a, .busy)
        registry.update(b, .busy)
        reading.waiting(since: .now())                       // bytes wait, but for less than the grace
        #expect(registry.admit(EmbeddedChannel()).isRefused)
        stalled.waiting(since: .now() - .seconds(5))
        #expect(registry.counts == (idle: 0, receiving: 0, busy: 2, stalled: 1))
        let newcomer = EmbeddedChannel()
        guard case .admittedEvicting(let victim, .stalled) = registry.admit(newcomer) else { Issue.record("no room made"); return }
        #expect(victim === a)
        registry.update(newcomer, .busy)
        reading.drained()
        #expect(registry.admit(EmbeddedChannel()).isRefused)
    }

    /// Stands in for the HTTP decoder: records the slices it is given, and refuses (as
    /// RequestGuard does) once it has seen `refuseAfter` bytes.
    private final class Refuser: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let connection: ConnectionGuard
        let refuseAfter: Int
        var slices: [Int] = []
        init(_ connection: ConnectionGuard, refuseAfter: Int) {
            self.connection = connection
            self.refuseAfter = refuseAfter
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            slices.append(unwrapInboundIn(data).readableBytes)
            if slices.reduce(0, +) >= refuseAfter { connection.discardInbound() }
        }
    }

    @Test func betweenRequestsBytesAreParsedASliceAtATimeAndNothingAfterARefusal() throws {
        let shared = shared()
        let channel = EmbeddedChannel()
        let connection = ConnectionGuard(shared: shared, progress: OutboundProgress(), logger: Logger(label: "test"))
        let refuser = Refuser(connection, refuseAfter: 1500)
        try channel.pipeline.syncOperations.addHandler(connection)
        try channel.pipeline.syncOperations.addHandler(refuser)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        // 300 pipelined requests in one read: after the refusal (in the second slice), the rest
        // never reaches the decoder, nor does what comes later.
        let request = "GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n"
        try channel.writeInbound(ByteBuffer(string: String(repeating: request, count: 300)))
        #expect(refuser.slices == [ConnectionGuard.headSlice, ConnectionGuard.headSlice])
        try channel.writeInbound(ByteBuffer(string: request))
        #expect(refuser.slices.count == 2)
    }

    @Test func anIdleConnectionWithBytesWaitingIsWritingNotIdle() {
        // Its last answer passed the request guard (idle), but its client has not taken it yet:
        // it is not cut for a newcomer until it has stalled for the grace.
        let registry = ConnectionRegistry(maximum: 1, stallGrace: .seconds(1))
        let reading = OutboundProgress()
        let a = EmbeddedChannel()
        guard case .admitted = registry.admit(a, progress: reading) else { Issue.record("not admitted"); return }
        registry.update(a, .idle(since: .now - .seconds(30)))
        reading.waiting(since: .now())
        #expect(registry.admit(EmbeddedChannel()).isRefused)
        reading.waiting(since: .now() - .seconds(2))
        #expect(registry.counts == (idle: 1, receiving: 0, busy: 0, stalled: 1))
        guard case .admittedEvicting(let victim, .stalled) = registry.admit(EmbeddedChannel()) else { Issue.record("no room made"); return }
        #expect(victim === a)
    }

    @Test func pipelinedRequestsPastTheCapAreRefusedAfterTheAnswersOwed() throws {
        let shared = shared(pipelined: 2)
        let channel = EmbeddedChannel()
        let connection = ConnectionGuard(shared: shared, progress: OutboundProgress(), logger: Logger(label: "test"))
        try channel.pipeline.syncOperations.addHandler(connection)
        try channel.pipeline.syncOperations.addHandler(RequestGuard(connection: connection, shared: shared, logger: Logger(label: "test")))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let get = HTTPRequestPart.head(HTTPRequest(method: .get, scheme: nil, authority: "127.0.0.1", path: "/health"))
        for _ in 0..<3 {
            try channel.writeParsed(get)
            try channel.writeParsed(HTTPRequestPart.end(nil))
        }
        // Two passed on; the third is not.
        var heads = 0
        while let part = try channel.readInbound(as: HTTPRequestPart.self) { if case .head = part { heads += 1 } }
        #expect(heads == 2)
        #expect(shared.metrics.value(.tooManyPipelined) == 1)
        #expect(try channel.readOutbound(as: HTTPResponsePart.self) == nil)
        // The two answers go first, then the refusal, which closes the connection.
        for _ in 0..<2 {
            try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
            try channel.writeOutbound(HTTPResponsePart.end(nil))
        }
        var statuses: [Int] = []
        while let part = try channel.readOutbound(as: HTTPResponsePart.self) {
            if case .head(let response) = part { statuses.append(response.status.code) }
        }
        #expect(statuses == [200, 200, 429])
    }
}

extension EmbeddedChannel {
    /// Passes a decoded HTTP part to the handlers after ``ConnectionGuard`` (which sees raw bytes
    /// only: in the server, the HTTP decoder sits between them), as `writeInbound` would.
    func writeParsed(_ part: HTTPRequestPart) throws {
        guard let context = try? pipeline.syncOperations.context(handlerType: ConnectionGuard.self) else {
            try writeInbound(part)  // closed: its handlers are gone
            return
        }
        context.fireChannelRead(NIOAny(part))
        context.fireChannelReadComplete()
        try throwIfErrorCaught()
    }
}

extension ConnectionRegistry.Admission {
    var isRefused: Bool {
        if case .refused = self { return true }
        return false
    }
}
