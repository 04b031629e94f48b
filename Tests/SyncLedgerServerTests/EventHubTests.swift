import Foundation
import Logging
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

/// The live event streams' hub, mailboxes and sessions over a real ledger: bounded queues,
/// scopes, system streams, and the join from the log to the hub without a gap or a duplicate.
@Suite struct EventHubTests {
    /// Fast mode: these tests are about ordering, not durability.
    private var fast: LedgerOptions {
        var options = LedgerOptions()
        options.durable = false
        return options
    }

    private func service(_ ledger: Ledger, capacity: Int = 1024, keepAlive: Duration = .seconds(30), perIdentity: Int = 8) -> EventService {
        var options = EventStreamOptions()
        options.keepAlive = keepAlive
        options.queueCapacity = capacity
        options.perIdentity = perIdentity
        return EventService(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: admin), options: options,
                            maxConnections: 100, logger: Logger(label: "test"))
    }

    /// The credential the sessions open with (the configured admin, so that the check at each
    /// keep-alive finds it).
    private let admin = Credential(accessKeyID: "AKIDTEST", secretAccessKey: "secret", scope: .admin)

    private func session(_ service: EventService, _ scope: EventScope, after start: UInt64) throws -> EventSession {
        let subscriber = EventSubscriber(id: service.hub.nextID(), scope: scope, capacity: service.options.queueCapacity)
        return EventSession(service: service, subscriber: subscriber, ticket: try service.admission.admit(scope.identityKey),
                            credential: admin, start: start)
    }

    private func scope(identity: String) -> EventScope {
        let s = stream(identity: identity)
        return EventScope(pool: s.pool, identity: s.identity)
    }

    /// Events from `session` until one of `dataset` reaches sync count `count` (the session's
    /// keep-alives are skipped).
    private func collect(_ session: inout EventSession, until count: Int, of dataset: String) async -> [StreamEvent] {
        var events: [StreamEvent] = []
        while true {
            let batch = await session.next()
            #expect(batch.ending == nil)
            if batch.ending != nil { return events }
            events += batch.events
            if events.contains(where: { $0.stream.dataset.rawValue == dataset && String(decoding: $0.json, as: UTF8.self).contains("\"syncCount\":\"\(count)\"") }) {
                return events
            }
        }
    }

    @Test func aMailboxPastItsCapacityEndsForOverflowAndDropsItsQueue() async throws {
        try await withLedger(fast) { ledger in
            try await ledger.put(stream(), ["k": "v"])
            let summary = try #require(try ledger.commitSummaries(after: 0, limit: 1).first)
            let subscriber = EventSubscriber(id: 1, scope: scope(identity: "1"), capacity: 2)
            _ = subscriber.deliver(StreamEvent(summary))
            _ = subscriber.deliver(StreamEvent(summary))
            #expect(subscriber.ending == nil)
            _ = subscriber.deliver(StreamEvent(summary))
            #expect(subscriber.ending == .overflow)
            let batch = await subscriber.next()
            #expect(batch.ending == .overflow && batch.events.isEmpty)
        }
    }

    @Test func anEventWrittenWhileCatchingUpIsNotQueuedAgain() async throws {
        try await withLedger(fast) { ledger in
            try await ledger.put(stream(), ["k": "1"])
            try await ledger.put(stream(), ["k": "2"])
            let summaries = try ledger.commitSummaries(after: 0, limit: 10)
            let subscriber = EventSubscriber(id: 1, scope: scope(identity: "1"), capacity: 10)
            subscriber.markCaughtUp(summaries[0].sequence)
            _ = subscriber.deliver(StreamEvent(summaries[0]))
            _ = subscriber.deliver(StreamEvent(summaries[1]))
            let batch = await subscriber.next()
            #expect(batch.events.map(\.sequence) == [summaries[1].sequence])
        }
    }

    @Test func summariesCarryTheDeviceAndTheDeleteButNoValues() async throws {
        try await withLedger(fast) { ledger in
            try await ledger.put(stream("d"), ["k": String(repeating: "x", count: 1000)], device: "phone")
            _ = try await ledger.deleteDataset(stream("d"), caller: "test")
            let summaries = try ledger.commitSummaries(after: 0, limit: 10)
            #expect(summaries.map(\.offset) == [1, 2])
            #expect(summaries.map(\.device) == ["phone", nil])
            #expect(summaries.map(\.deletesDataset) == [false, true])
            #expect(try ledger.commitSummaries(after: summaries[0].sequence, limit: 10) == [summaries[1]])
            #expect(try ledger.commitSummaries(after: UInt64.max, limit: 10).isEmpty)
        }
    }

    @Test func theHubDeliversToMatchingScopesOnlyAndNeverSystemStreams() async throws {
        try await withLedger(fast) { ledger in
            let service = service(ledger)
            let hub = Task { await service.run() }
            defer { hub.cancel() }
            let last = try ledger.lastSequence
            var mine = try session(service, scope(identity: "1"), after: last)
            var everything = try session(service, EventScope(), after: last)
            // Register a device first (a system-stream entry), then two users' changes.
            _ = try await ledger.registerDevice(pool: stream().pool, identity: stream().identity, platform: .apns, token: "token")
            try await ledger.put(stream(identity: "2"), ["k": "v"])
            try await ledger.put(stream(identity: "1"), ["k": "v"])
            let seen = await collect(&mine, until: 1, of: "ds")
            #expect(seen.map(\.stream) == [stream(identity: "1")])
            let all = await collect(&everything, until: 1, of: "ds")
            #expect(all.map(\.stream).contains(stream(identity: "2")))
            #expect(!all.contains { $0.stream.identity == Ledger.systemIdentity })
            mine.close(.disconnected)
            everything.close(.disconnected)
            #expect(service.hub.subscribers == 0)
        }
    }

    @Test func aStreamResumingWhileWritesGoOnSeesEveryEntryOnceInOrder() async throws {
        try await withLedger(fast) { ledger in
            // A small batch makes the stream read the log several times before it joins.
            let service = service(ledger)
            for i in 0..<700 {
                try await ledger.put(stream(identity: i % 2 == 0 ? "1" : "2"), ["k": "\(i)"])
            }
            let hub = Task { await service.run() }
            defer { hub.cancel() }
            let writer = Task {
                for i in 0..<300 { try await ledger.put(stream(identity: "1"), ["k": "w\(i)"]) }
            }
            var resumed = try session(service, scope(identity: "1"), after: 0)
            let events = await collect(&resumed, until: 650, of: "ds")
            try await writer.value
            let offsets = events.map { String(decoding: $0.json, as: UTF8.self) }.compactMap { text -> Int? in
                guard let range = text.range(of: "\"syncCount\":\"") else { return nil }
                return Int(text[range.upperBound...].prefix { $0 != "\"" })
            }
            #expect(offsets == Array(1...650))
            #expect(events.map(\.sequence) == events.map(\.sequence).sorted())
            resumed.close(.disconnected)
        }
    }

    @Test func aStreamThatDoesNotReadIsEndedForOverflowAndResumesFromTheLog() async throws {
        try await withLedger(fast) { ledger in
            let service = service(ledger, capacity: 3)
            let hub = Task { await service.run() }
            defer { hub.cancel() }
            let last = try ledger.lastSequence
            var slow = try session(service, scope(identity: "1"), after: last)
            // It joins the hub, then reads nothing while 5 changes come to its queue of 3.
            #expect(service.hub.join(slow.subscriber, after: last))
            for i in 0..<5 { try await ledger.put(stream(identity: "1"), ["k": "\(i)"]) }
            while slow.subscriber.ending == nil { await Task.yield() }
            #expect(await slow.next().ending == .overflow)
            slow.close(.overflow)
            #expect(service.hub.subscribers == 0)
            // Resuming from the start reads all five from the log.
            var resumed = try session(service, scope(identity: "1"), after: 0)
            #expect(await collect(&resumed, until: 5, of: "ds").count == 5)
            resumed.close(.disconnected)
        }
    }

    @Test func keepAliveTicksCarryTheHubsPosition() async throws {
        try await withLedger(fast) { ledger in
            let service = service(ledger, keepAlive: .milliseconds(100))
            try await ledger.put(stream(identity: "2"), ["k": "v"])
            let hub = Task { await service.run() }
            defer { hub.cancel() }
            var session = try session(service, scope(identity: "1"), after: 0)
            var batch = await session.next()
            while batch.keepAlive == nil, batch.ending == nil { batch = await session.next() }
            #expect(batch.ending == nil)
            #expect(batch.events.isEmpty)
            #expect(batch.keepAlive! >= 1)
            session.close(.disconnected)
        }
    }

    @Test func aSessionWhoseCredentialIsRevokedEndsAtTheNextKeepAlive() async throws {
        try await withLedger(fast) { ledger in
            let service = service(ledger, keepAlive: .milliseconds(50))
            let hub = Task { await service.run() }
            defer { hub.cancel() }
            let stored = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
            try ledger.secrets.store(stored)
            var session = EventSession(service: service, subscriber: EventSubscriber(id: service.hub.nextID(), scope: scope(identity: "1"), capacity: 8),
                                       ticket: try service.admission.admit(nil), credential: stored, start: try ledger.lastSequence)
            #expect(await session.next().keepAlive != nil)
            try ledger.secrets.revoke(accessKeyID: stored.accessKeyID)
            var batch = await session.next()
            for _ in 0..<100 where batch.ending == nil { batch = await session.next() }
            #expect(batch.ending == .revoked)
            session.close(.revoked)
        }
    }

    @Test func theBoundsCountPerIdentityAndInAllAndGiveBackWhenDropped() async throws {
        try await withLedger(fast) { ledger in
            let admission = EventAdmission(perIdentity: 2, total: 3, metrics: EventMetrics())
            let one = IdentityKey(stream(identity: "1"))
            var tickets = [try admission.admit(one), try admission.admit(one)]
            #expect(throws: WireError.self) { try admission.admit(one) }
            tickets.append(try admission.admit(nil))
            #expect(throws: WireError.self) { try admission.admit(IdentityKey(stream(identity: "2"))) }
            #expect(admission.open == 3)
            tickets.removeAll()
            #expect(admission.open == 0)
            _ = try admission.admit(one)
        }
    }
}
