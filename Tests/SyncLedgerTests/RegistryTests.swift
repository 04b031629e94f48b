import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct RegistryTests {
    @Test func devicesAreIdempotentPerTokenAndPlatformAndATokenHasOneDevice() async throws {
        try await withLedger { ledger in
            let s = stream()
            let a = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "tok-1")
            let again = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "tok-1")
            #expect(a == again)
            let otherPlatform = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "tok-1")
            #expect(otherPlatform != a)
            let stored = try #require(try ledger.device(pool: s.pool, id: a))
            #expect(stored.identity == "test:1" && stored.platform == .gcm && stored.token == "tok-1" && stored.owner == "test:1")
            #expect(stored.registered != nil && stored.isEnabled)
            #expect(try ledger.device(pool: s.pool, id: "nope") == nil)
            // Registering the same device twice wrote one entry, not two.
            #expect(try ledger.entries(in: Ledger.systemStream(s.pool, "devices")).count == 2)
            // The same token registered by another identity is the same device, moved to it:
            // the first identity's datasets no longer reach it.
            try await ledger.subscribe(s, deviceID: a)
            let moved = try await ledger.registerDevice(pool: s.pool, identity: try IdentityID("test:2"), platform: .gcm, token: "tok-1")
            #expect(moved == a)
            #expect(try ledger.device(pool: s.pool, id: a)?.identity == "test:2")
            #expect(try ledger.subscribers(of: s).isEmpty)
            #expect(try ledger.devices(pool: s.pool, identity: s.identity).map(\.id) == [otherPlatform])
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func subscriptionsNeedTheIdentitysOwnDevice() async throws {
        try await withLedger { ledger in
            let s = stream()
            let mine = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apnsSandbox, token: "t")
            let theirs = try await ledger.registerDevice(pool: s.pool, identity: try IdentityID("test:2"), platform: .adm, token: "t")
            try await ledger.subscribe(s, deviceID: mine)
            try await ledger.subscribe(s, deviceID: mine)  // idempotent
            #expect(try ledger.subscribers(of: s).map(\.id) == [mine])
            await expectLedgerError(.notFound) { try await ledger.subscribe(s, deviceID: theirs) }
            await expectLedgerError(.notFound) { try await ledger.subscribe(s, deviceID: "unknown") }
            #expect(try ledger.subscribers(of: stream("other")).isEmpty)
            try await ledger.unsubscribe(s, deviceID: mine)
            #expect(try ledger.subscribers(of: s).isEmpty)
        }
    }

    @Test func configurationAndEventsAreVersionedInTheLog() async throws {
        try await withLedger { ledger in
            let pool = stream().pool
            #expect(try ledger.poolConfiguration(pool) == PoolConfiguration())
            let push = PushSyncConfiguration(applicationArns: ["arn:aws:sns:us-east-1:123456789012:app/GCM/MyApp"], roleArn: "arn:aws:iam::123456789012:role/Push")
            _ = try await ledger.setPoolConfiguration(pool, pushSync: push, cognitoStreams: nil, caller: "admin")
            let streams = StreamsConfiguration(streamName: "s", roleArn: "arn:aws:iam::123456789012:role/S", streamingStatus: "ENABLED")
            let both = try await ledger.setPoolConfiguration(pool, pushSync: nil, cognitoStreams: streams, caller: "admin")
            #expect(both == PoolConfiguration(pushSync: push, cognitoStreams: streams))
            #expect(try ledger.poolConfiguration(pool) == both)
            try await ledger.setCognitoEvents(pool, ["SyncTrigger": "arn:aws:lambda:us-east-1:123456789012:function:f"], caller: "admin")
            #expect(try ledger.cognitoEvents(pool) == ["SyncTrigger": "arn:aws:lambda:us-east-1:123456789012:function:f"])
            let history = try ledger.entries(in: Ledger.systemStream(pool, "configuration"))
            #expect(history.count == 3)
            #expect(history.allSatisfy { $0.author == "admin" })
            // The first version is still there to replay.
            let first = try ledger.dataset(Ledger.systemStream(pool, "configuration"), asOfSyncCount: 1)
            #expect(first.liveRecords["configuration"]?.contains("MyApp") == true)
            #expect(first.liveRecords["configuration"]?.contains("ENABLED") == false)
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func bulkPublishFollowsCognitosStatusMachine() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let pool = stream().pool
            #expect(try ledger.bulkPublishDetails(pool).status == "NOT_STARTED")
            await expectLedgerError(.invalidParameter) { try await ledger.beginBulkPublish(pool, caller: "admin") }
            _ = try await ledger.setPoolConfiguration(pool, pushSync: nil, cognitoStreams: StreamsConfiguration(streamName: "s", streamingStatus: "DISABLED"), caller: "admin")
            await expectLedgerError(.invalidParameter) { try await ledger.beginBulkPublish(pool, caller: "admin") }
            _ = try await ledger.setPoolConfiguration(pool, pushSync: nil, cognitoStreams: StreamsConfiguration(streamName: "s", streamingStatus: "ENABLED"), caller: "admin")
            try await ledger.beginBulkPublish(pool, caller: "admin")
            #expect(try ledger.bulkPublishDetails(pool).status == "IN_PROGRESS")
            await expectLedgerError(.duplicateRequest) { try await ledger.beginBulkPublish(pool, caller: "admin") }
            clock.advance(seconds: 5)
            try await ledger.completeBulkPublish(pool, caller: "admin")
            let done = try ledger.bulkPublishDetails(pool)
            #expect(done.status == "SUCCEEDED" && done.started != nil && done.completed!.milliseconds - done.started!.milliseconds == 5000)
            await expectLedgerError(.alreadyStreamed) { try await ledger.beginBulkPublish(pool, caller: "admin") }
            clock.advance(seconds: 86_400)
            try await ledger.beginBulkPublish(pool, caller: "admin")
            try await ledger.completeBulkPublish(pool, failure: "sink unreachable", caller: "admin")
            #expect(try ledger.bulkPublishDetails(pool).status == "FAILED")
            #expect(try ledger.bulkPublishDetails(pool).failureMessage == "sink unreachable")
            // A completion meant for an earlier run does not end a later one.
            clock.advance(seconds: 60)
            try await ledger.beginBulkPublish(pool, caller: "admin")
            let running = try #require(try ledger.bulkPublishDetails(pool).started)
            try await ledger.completeBulkPublish(pool, started: Timestamp(milliseconds: running.milliseconds - 1), caller: "stale")
            #expect(try ledger.bulkPublishDetails(pool).status == "IN_PROGRESS")
            #expect(try ledger.poolStreamSettings().first?.bulkPublishStarted == running)
            try await ledger.completeBulkPublish(pool, started: running, caller: "admin")
            #expect(try ledger.bulkPublishDetails(pool).status == "SUCCEEDED")
            #expect(try ledger.poolStreamSettings().first?.bulkPublishStarted == nil)
        }
    }

    @Test func theSystemIdentityIsReservedAndNotCountedAsData() async throws {
        try await withLedger { ledger in
            let reserved = StreamName(pool: stream().pool, identity: Ledger.systemIdentity, dataset: try DatasetName("devices"))
            await expectLedgerError(.invalidParameter) { _ = try ledger.listRecords(reserved) }
            await expectLedgerError(.invalidParameter) { _ = try ledger.describeDataset(reserved) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.registerDevice(pool: reserved.pool, identity: Ledger.systemIdentity, platform: .gcm, token: "t") }
            try await ledger.put(stream(), ["k": "v"])
            _ = try await ledger.registerDevice(pool: reserved.pool, identity: stream().identity, platform: .gcm, token: "a-long-token")
            #expect(try await ledger.poolUsage(reserved.pool).dataStorage == 2)
            #expect(try ledger.verify().isValid)
        }
    }
}
