import Testing
import Foundation
import NATS

@Suite("JetStream on one server")
struct JetStreamTests {
    static func setUp() async throws -> (NATSServerProcess, NATSClient, JetStreamContext) {
        let server = try await NATSServerProcess.start(jetstream: true)
        let client = try await connectClient([server.url])
        let js = JetStreamContext(client: client, timeout: .seconds(3))
        _ = try await eventually("JetStream ready") { try await js.accountInfo() }
        return (server, client, js)
    }

    @Test func streamLifecycle() async throws {
        let (server, client, js) = try await Self.setUp()
        var config = StreamConfig(name: "LIFE", subjects: ["life.>"])
        config.maxAge = .seconds(3600)
        config.duplicateWindow = .seconds(60)
        let created = try await js.createStream(config)
        #expect(created.config.name == "LIFE")
        #expect(created.config.maxAge == .seconds(3600))
        #expect(created.config.duplicateWindow == .seconds(60))
        _ = try await js.publish("life.a", payload: bytes("x"))
        let info = try await js.streamInfo("LIFE")
        #expect(info?.state.messages == 1)
        #expect(info?.state.lastSeq == 1)
        #expect(try await js.streamInfo("NOPE") == nil)
        config.maxMsgs = 100
        let updated = try await js.updateStream(config)
        #expect(updated.config.maxMsgs == 100)
        try await js.deleteStream("LIFE")
        #expect(try await js.streamInfo("LIFE") == nil)
        await #expect(throws: NATSError.noResponders) { _ = try await js.publish("life.a", payload: []) }
        await client.close()
        _ = server
    }

    @Test func streamListingFiltersBySubjectAndReadsEveryPage() async throws {
        let (server, client, js) = try await Self.setUp()
        // More than the server's 256 streams a page, and some it must leave out.
        for i in 0..<300 {
            var config = StreamConfig(name: "LIST_\(i)", subjects: ["list.\(i)"])
            config.storage = .memory
            _ = try await js.createStream(config)
        }
        var other = StreamConfig(name: "OTHER", subjects: ["other.>"])
        other.storage = .memory
        _ = try await js.createStream(other)
        _ = try await js.publish("list.7", payload: bytes("x"))
        _ = try await js.publish("list.7", payload: bytes("y"))
        let listed = try await js.streams(subject: "list.>")
        #expect(listed.count == 300)
        #expect(Set(listed.map(\.config.name)) == Set((0..<300).map { "LIST_\($0)" }))
        #expect(listed.first { $0.config.name == "LIST_7" }?.state.lastSeq == 2)
        #expect(try await js.streams().count == 301)
        #expect(try await js.streams(subject: "nothing.>").isEmpty)
        await client.close()
        _ = server
    }

    @Test func publishDedupeAndExpectations() async throws {
        let (server, client, js) = try await Self.setUp()
        try await js.createStream(StreamConfig(name: "PUB", subjects: ["pub.>"]))
        let first = try await js.publish("pub.a", payload: bytes("1"), messageID: "id-1")
        #expect(first.sequence == 1 && !first.duplicate && first.stream == "PUB")
        let again = try await js.publish("pub.a", payload: bytes("1"), messageID: "id-1")
        #expect(again.sequence == 1 && again.duplicate)
        let second = try await js.publish("pub.b", payload: bytes("2"), expectedLastSequence: 1)
        #expect(second.sequence == 2)
        do {
            _ = try await js.publish("pub.a", payload: bytes("3"), expectedLastSequence: 1)
            Issue.record("expected a wrong-last-sequence error")
        } catch let e as JetStreamAPIError {
            #expect(e.errorCode == 10071 && e.isWrongLastSequence)
            #expect(e.currentLastSequence == 2)
        }
        #expect(try await js.streamInfo("PUB")?.state.messages == 2)
        // Subject sequence: the last message on pub.a is 1.
        await #expect(throws: JetStreamAPIError.self) {
            _ = try await js.publish("pub.a", payload: [], expectedLastSubjectSequence: 2)
        }
        let third = try await js.publish("pub.a", payload: bytes("3"), expectedLastSubjectSequence: 1)
        #expect(third.sequence == 3)
        let fresh = try await js.publish("pub.c", payload: [], expectedLastSubjectSequence: 0)
        #expect(fresh.sequence == 4)
        await #expect(throws: JetStreamAPIError.self) {
            _ = try await js.publish("pub.a", payload: [], expectedStream: "OTHER")
        }
        #expect(try await js.streamInfo("PUB")?.state.messages == 4)
        await client.close()
        _ = server
    }

    @Test func getDirectGetAndLastBySubject() async throws {
        let (server, client, js) = try await Self.setUp()
        var config = StreamConfig(name: "GET", subjects: ["get.>"])
        config.allowDirect = true
        try await js.createStream(config)
        var h = NATSHeaders()
        h["X-App"] = "v"
        _ = try await js.publish("get.a", payload: bytes("one"), headers: h)
        _ = try await js.publish("get.b", payload: bytes("two"))
        _ = try await js.publish("get.a", payload: bytes("three"))
        let m1 = try await js.getMessage(stream: "GET", sequence: 1)
        #expect(m1?.subject == "get.a" && m1?.payload == bytes("one") && m1?.headers?["X-App"] == "v")
        #expect(m1.map { abs($0.time.timeIntervalSinceNow) < 600 } == true)
        #expect(try await js.getMessage(stream: "GET", sequence: 99) == nil)
        let d2 = try await js.directGet(stream: "GET", sequence: 2)
        #expect(d2?.subject == "get.b" && d2?.sequence == 2 && d2?.payload == bytes("two"))
        let d1 = try await js.directGet(stream: "GET", sequence: 1)
        #expect(d1?.headers?["X-App"] == "v")
        #expect(try await js.directGet(stream: "GET", sequence: 99) == nil)
        let last = try await js.getLastMessage(stream: "GET", subject: "get.a")
        #expect(last?.sequence == 3 && last?.payload == bytes("three"))
        #expect(try await js.getLastMessage(stream: "GET", subject: "get.zzz") == nil)
        let dlast = try await js.directGetLast(stream: "GET", subject: "get.b")
        #expect(dlast?.sequence == 2)
        await client.close()
        _ = server
    }

    @Test func durablePullConsumerAckAndNak() async throws {
        let (server, client, js) = try await Self.setUp()
        try await js.createStream(StreamConfig(name: "WORK", subjects: ["work.>"]))
        for i in 1...5 { _ = try await js.publish("work.item", payload: bytes("w\(i)")) }
        var config = ConsumerConfig(durableName: "worker", deliverPolicy: .all, ackPolicy: .explicit)
        config.ackWait = .seconds(30)
        let info = try await js.createConsumer(stream: "WORK", config: config)
        #expect(info.name == "worker")
        #expect(info.config.ackWait == .seconds(30))
        let firstBatch = try await js.fetch(stream: "WORK", consumer: "worker", batch: 3, expires: .seconds(2))
        #expect(firstBatch.map(\.metadata.streamSequence) == [1, 2, 3])
        #expect(firstBatch.first?.metadata.stream == "WORK" && firstBatch.first?.metadata.delivered == 1)
        for m in firstBatch { try await m.ackSync() }
        let rest = try await js.fetch(stream: "WORK", consumer: "worker", batch: 5, expires: .seconds(1))
        #expect(rest.map(\.metadata.streamSequence) == [4, 5])
        try await rest[0].nak()
        try await rest[1].ackSync()
        let redelivered = try await js.fetch(stream: "WORK", consumer: "worker", batch: 1, expires: .seconds(2))
        #expect(redelivered.first?.metadata.streamSequence == 4)
        #expect(redelivered.first?.metadata.delivered == 2)
        #expect(redelivered.first.map { String(decoding: $0.payload, as: UTF8.self) } == "w4")
        try await redelivered[0].ackSync()
        let empty = try await js.fetch(stream: "WORK", consumer: "worker", batch: 2, expires: .milliseconds(300))
        #expect(empty.isEmpty)
        let after = try await js.consumerInfo(stream: "WORK", consumer: "worker")
        #expect(after?.numAckPending == 0)
        try await js.deleteConsumer(stream: "WORK", consumer: "worker")
        #expect(try await js.consumerInfo(stream: "WORK", consumer: "worker") == nil)
        await client.close()
        _ = server
    }

    /// An ordered consumer keeps one pull request open and is handed messages as they arrive:
    /// a stream written one message at a time, each read before the next is published, costs a
    /// few pull requests, not one or two per message. The requests are counted on the wire, by
    /// a second connection subscribed to the consumer API's pull subject.
    @Test func orderedConsumerServesManyMessagesFromOnePullRequest() async throws {
        let (server, client, js) = try await Self.setUp()
        try await js.createStream(StreamConfig(name: "QUIET", subjects: ["quiet.>"]))
        let spy = try await connectClient([server.url])
        let pulls = try await spy.subscribe("$JS.API.CONSUMER.MSG.NEXT.QUIET.>")
        try await spy.flush(timeout: .seconds(5))
        let counted = Collector<String>()
        let counter = Task { for try await request in pulls { await counted.append(String(decoding: request.payload, as: UTF8.self)) } }
        defer { counter.cancel() }

        var tail = js.orderedMessages(stream: "QUIET", startSequence: 1).makeAsyncIterator()
        for i in 1...40 {
            _ = try await js.publish("quiet.a", payload: bytes("\(i)"))
            let m = try await tail.next()
            #expect(m?.sequence == UInt64(i))
        }
        try await spy.flush(timeout: .seconds(5))
        let requests = await counted.items
        #expect(!requests.isEmpty && requests.count <= 3, "pull requests for 40 messages: \(requests)")
        #expect(requests.allSatisfy { $0.contains("\"batch\":256") })
        await spy.close()
        await client.close()
        _ = server
    }

    /// A reader slower than a pull request's expiry (its messages and the server's 408 wait in
    /// the reply buffer) keeps its consumer: the request's deadline counts only while the
    /// consumer waits for a reply and hears nothing. Consumer creations are counted on the wire.
    @Test func aSlowOrderedReaderKeepsItsConsumer() async throws {
        let (server, client, js) = try await Self.setUp()
        try await js.createStream(StreamConfig(name: "SLOW", subjects: ["slow.>"]))
        for i in 1...3 { _ = try await js.publish("slow.a", payload: bytes("\(i)")) }
        let spy = try await connectClient([server.url])
        let creates = try await spy.subscribe("$JS.API.CONSUMER.CREATE.SLOW.>")
        try await spy.flush(timeout: .seconds(5))
        let created = Collector<String>()
        let counter = Task { for try await request in creates { await created.append(request.subject) } }
        defer { counter.cancel() }

        var tail = js.orderedMessages(stream: "SLOW", startSequence: 1, pullExpiry: .seconds(1)).makeAsyncIterator()
        #expect(try await tail.next()?.sequence == 1)
        // Slower than the request's expiry and its deadline (1 s + 1 s): the reader is busy, so
        // nothing is given up.
        try await Task.sleep(for: .seconds(3))
        #expect(try await tail.next()?.sequence == 2)
        #expect(try await tail.next()?.sequence == 3)
        _ = try await js.publish("slow.a", payload: bytes("4"))
        #expect(try await tail.next()?.sequence == 4)
        try await spy.flush(timeout: .seconds(5))
        let consumers = await created.items
        #expect(consumers.count == 1, "consumers created: \(consumers)")
        await spy.close()
        await client.close()
        _ = server
    }

    @Test func orderedConsumerNoGapsNoRepeatsAcrossRestart() async throws {
        let (server, client, js) = try await Self.setUp()
        try await js.createStream(StreamConfig(name: "TAIL", subjects: ["tail.>"]))
        for i in 1...20 { _ = try await js.publish("tail.\(i % 3)", payload: bytes("\(i)")) }
        let events = client.events
        let collector = Collector<UInt64>()
        let stream = js.orderedMessages(stream: "TAIL", startSequence: 5)
        let reader = Task {
            do {
                for try await m in stream {
                    #expect(String(decoding: m.payload, as: UTF8.self) == String(m.sequence))
                    await collector.append(m.sequence)
                }
            } catch { await collector.fail(error) }
        }
        defer { reader.cancel() }
        _ = try await eventually("messages 5...20") { await collector.count >= 16 ? true : nil }
        for i in 21...30 { _ = try await js.publish("tail.\(i % 3)", payload: bytes("\(i)")) }
        _ = try await eventually("messages 21...30") { await collector.count >= 26 ? true : nil }

        server.stop(signal: SIGTERM)
        _ = try await waitForEvent(events) { $0 == .disconnected }
        try await server.launch()
        _ = try await waitForEvent(events) { if case .reconnected = $0 { true } else { false } }
        for i in 31...40 {
            let ack = try await eventually("publish \(i) after restart") {
                try await js.publish("tail.\(i % 3)", payload: bytes("\(i)"), messageID: "m\(i)")
            }
            #expect(ack.sequence == UInt64(i))
        }
        _ = try await eventually("messages 31...40", timeout: .seconds(20)) { await collector.count >= 36 ? true : nil }
        #expect(await collector.failure == nil)
        #expect(await collector.items == Array(5...40).map(UInt64.init))

        // A filtered ordered consumer sees only its subject, in order.
        let filtered = Collector<UInt64>()
        let fstream = js.orderedMessages(stream: "TAIL", startSequence: 1, filterSubject: "tail.0")
        let freader = Task { for try await m in fstream { await filtered.append(m.sequence) } }
        defer { freader.cancel() }
        let expected = (1...40).filter { $0 % 3 == 0 }.map(UInt64.init)
        _ = try await eventually("filtered") { await filtered.count >= expected.count ? true : nil }
        #expect(await filtered.items == expected)
        await client.close()
    }
}
