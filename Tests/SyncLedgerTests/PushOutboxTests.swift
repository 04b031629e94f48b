import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// The push outbox: derivation from the log, collapse, leases, retries, expiry, dead letters.
@Suite struct PushOutboxTests {
    static let arn = "arn:aws:sns:us-east-1:123456789012:app/APNS/MyApp"

    func withOutbox<T>(_ body: (PushOutbox) throws -> T) throws -> T {
        let path = temporaryPath("outbox")
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try body(try PushOutbox(directory: path, durable: false))
    }

    func note(_ device: String, sync: UInt64, at ms: Int64 = 1_000_000, dataset: String = "ds") -> PushNotification {
        PushNotification(pool: "test:0", identity: "test:1", dataset: dataset, deviceID: device, platform: .apns, token: "ab",
                         syncCount: sync, sequence: sync, committed: Timestamp(milliseconds: ms))
    }

    var policy: PushPolicy {
        var p = PushPolicy()
        p.initialBackoff = .seconds(1)
        p.maxBackoff = .seconds(8)
        p.maxAttempts = 3
        return p
    }

    @Test func derivesOneNotificationPerOtherSubscribedDevice() async throws {
        try await withLedger { ledger in
            let s = stream()
            _ = try await ledger.setPoolConfiguration(s.pool, pushSync: PushSyncConfiguration(applicationArns: [Self.arn]), cognitoStreams: nil, caller: "admin")
            let writer = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "AA")
            let other = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "fcm-1")
            let unsubscribed = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .adm, token: "adm-1")
            try await ledger.subscribe(s, deviceID: writer)
            try await ledger.subscribe(s, deviceID: other)
            let start = try ledger.lastSequence
            _ = try await ledger.put(s, ["a": "1"], device: writer)
            _ = try await ledger.put(s, ["b": "2"])
            let pass = try ledger.pushNotifications(after: start, limit: 100)
            #expect(pass.last == (try ledger.lastSequence))
            #expect(pass.skipped.isEmpty)
            // The writer's own change reaches only the other device; a change with no device
            // reaches both; the other device's two changes collapse into the newest.
            let notes = pass.notifications
            #expect(Set(notes.map(\.deviceID)) == [writer, other] && notes.count == 2)
            #expect(notes.allSatisfy { $0.syncCount == 2 })
            #expect(pass.collapsed == [.fcm: 1])
            #expect(!notes.contains { $0.deviceID == unsubscribed })
            #expect(notes[0].data == ["source": "cognito-sync", "identityPoolId": "test:0", "identityId": "test:1", "datasetName": "ds", "syncCount": "2"])
            // Only the writer's own change, read alone, reaches only the other device.
            let first = try ledger.pushNotifications(after: start, limit: 1).notifications
            #expect(first.map(\.deviceID) == [other] && first[0].syncCount == 1)
            // A disabled token is skipped and counted.
            #expect(try await ledger.disableToken(pool: s.pool, deviceID: other, token: "fcm-1", reason: "UNREGISTERED"))
            let before = try ledger.lastSequence
            _ = try await ledger.put(s, ["c": "3"])
            let again = try ledger.pushNotifications(after: before, limit: 100)
            #expect(again.notifications.map(\.deviceID) == [writer])
            #expect(again.collapsed.isEmpty)
            #expect(again.skipped == [.fcm: 1])
        }
    }

    @Test func theCacheForgetsAPoolWhoseDevicesOrSubscriptionsChange() async throws {
        try await withLedger { ledger in
            let s = stream()
            _ = try await ledger.setPoolConfiguration(s.pool, pushSync: PushSyncConfiguration(applicationArns: [Self.arn]), cognitoStreams: nil, caller: "admin")
            let cache = PushDerivationCache()
            let first = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "AA")
            try await ledger.subscribe(s, deviceID: first)
            _ = try await ledger.put(s, ["a": "1"])
            let one = try ledger.pushNotifications(after: 0, limit: 1000, cache: cache)
            #expect(one.notifications.map(\.deviceID) == [first])
            let second = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "BB")
            try await ledger.subscribe(s, deviceID: second)
            _ = try await ledger.put(s, ["a": "2"])
            let two = try ledger.pushNotifications(after: one.last, limit: 1000, cache: cache)
            #expect(Set(two.notifications.map(\.deviceID)) == [first, second])
        }
    }

    @Test func anOfflineMergeDoesNotNotifyTheDeviceItCameFrom() async throws {
        try await withLedger { server in
            try await withLedger { device in
                let s = stream("notes")
                _ = try await server.setPoolConfiguration(s.pool, pushSync: PushSyncConfiguration(applicationArns: [Self.arn]), cognitoStreams: nil, caller: "admin")
                let phone = try await server.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "AA")
                let tablet = try await server.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "BB")
                try await server.subscribe(s, deviceID: phone)
                try await server.subscribe(s, deviceID: tablet)
                _ = try await server.put(s, ["a": "1"])
                try await device.merge(try #require(try server.streamSegment(s, after: 0)))
                _ = try await device.put(s, ["b": "offline"], device: phone)
                let start = try server.lastSequence
                _ = try await server.mergeOffline(try #require(try device.streamSegment(s, after: 1)), deviceID: phone, sessionToken: try server.token(s))
                let pass = try server.pushNotifications(after: start, limit: 100)
                #expect(pass.notifications.map(\.deviceID) == [tablet])
                #expect(pass.notifications.first?.syncCount == 2)
            }
        }
    }

    @Test func poolsWithoutPushSyncGetNone() async throws {
        try await withLedger { ledger in
            let s = stream()
            let d = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "AA")
            try await ledger.subscribe(s, deviceID: d)
            _ = try await ledger.put(s, ["a": "1"])
            #expect(try ledger.pushNotifications(after: 0, limit: 100).notifications.isEmpty)
        }
    }

    @Test func aDeadTokenIsRevivedByAFreshRegistration() async throws {
        try await withLedger { ledger in
            let s = stream()
            let d = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "AABB")
            #expect(try ledger.device(pool: s.pool, id: d)?.token == "aabb")  // APNs tokens are case-insensitive hex
            try await ledger.subscribe(s, deviceID: d)
            // A report older than the registration is ignored; a newer one disables.
            #expect(try await ledger.disableToken(pool: s.pool, deviceID: d, token: "aabb", reason: "Unregistered", reportedAt: Timestamp(milliseconds: 0)) == false)
            #expect(try await ledger.disableToken(pool: s.pool, deviceID: d, token: "aabb", reason: "Unregistered", reportedAt: .now.adding(.seconds(5))))
            #expect(try ledger.device(pool: s.pool, id: d)?.isEnabled == false)
            let revived = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "CCDD")
            #expect(revived == d)
            let device = try #require(try ledger.device(pool: s.pool, id: d))
            #expect(device.isEnabled && device.token == "ccdd")
            #expect(try ledger.subscribers(of: s).map(\.id) == [d])
            // The old token no longer names the device; registering it again makes a new one.
            let fresh = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .apns, token: "aabb")
            #expect(fresh != d)
        }
    }

    @Test func collapsesToTheNewestSyncCount() throws {
        try withOutbox { outbox in
            try outbox.enqueue([note("d1", sync: 1), note("d1", sync: 3), note("d1", sync: 2), note("d2", sync: 1)], cursor: 3)
            #expect(try outbox.cursor() == 3)
            // One row per device and dataset: it stands for every change until it is sent (the
            // deliverer sends the dataset's sync count at sending time).
            let rows = try outbox.pendingRows()
            #expect(rows.count == 2)
            #expect(rows.first { $0.deviceID == "d1" }?.syncCount == 1)
            let counts = try outbox.status().transports.first { $0.transport == .apns }!.counts
            #expect(counts["pending"] == 2 && counts["queued"] == 4 && counts["collapsed"] == 2)
            // The cursor never goes back.
            try outbox.enqueue([], cursor: 1)
            #expect(try outbox.cursor() == 3)
        }
    }

    @Test func aNewerChangeDuringAnAttemptIsSentAfterIt() throws {
        try withOutbox { outbox in
            let now = Timestamp(milliseconds: 2_000_000)
            try outbox.enqueue([note("d1", sync: 1)], cursor: 1)
            let leased = try outbox.lease(now: now, limit: 10, policy: policy).leased
            #expect(leased.map(\.syncCount) == [1])
            #expect(try outbox.lease(now: now, limit: 10, policy: policy).leased.isEmpty)  // in flight: not leased twice
            try outbox.enqueue([note("d1", sync: 2)], cursor: 2)
            #expect(try outbox.settle([(leased[0], .delivered)], now: now, policy: policy) == [.delivered])
            let next = try outbox.lease(now: now, limit: 10, policy: policy).leased
            #expect(next.map(\.syncCount) == [2])
            #expect(try outbox.settle([(next[0], .delivered)], now: now, policy: policy) == [.delivered])
            #expect(try outbox.pendingRows().isEmpty)
            #expect(try outbox.status().transports.first { $0.transport == .apns }!.counts["delivered"] == 2)
        }
    }

    @Test func retriesBackOffThenGoToTheDeadLetters() throws {
        try withOutbox { outbox in
            var now = Timestamp(milliseconds: 2_000_000)
            try outbox.enqueue([note("d1", sync: 1)], cursor: 1)
            var delays: [Int64] = []
            for attempt in 1...3 {
                let leased = try outbox.lease(now: now, limit: 10, policy: policy).leased
                #expect(leased.count == 1 && leased[0].attempts == attempt)
                let settled = try outbox.settle([(leased[0], .retry(reason: "HTTP 503"))], now: now, policy: policy)
                if case .retrying(let at) = settled[0] {
                    delays.append(at.milliseconds - now.milliseconds)
                    #expect(try outbox.lease(now: now, limit: 10, policy: policy).leased.isEmpty)  // not due yet
                    now = at
                } else {
                    #expect(attempt == 3)
                    #expect(settled[0] == .dead(reason: "HTTP 503 (gave up after 3 attempts)"))
                }
            }
            // Exponential with jitter in the upper half: 0.5-1 s, then 1-2 s.
            #expect(delays.count == 2)
            #expect((500...1000).contains(delays[0]) && (1000...2000).contains(delays[1]))
            let dead = try outbox.deadLetters()
            #expect(dead.map(\.deviceID) == ["d1"] && dead[0].lastError?.contains("gave up") == true)
            #expect(try outbox.pendingRows().isEmpty)
            #expect(try outbox.retryDeadLetters(now: now) == 1)
            #expect(try outbox.deadLetters().isEmpty)
            let again = try outbox.lease(now: now, limit: 10, policy: policy).leased
            #expect(again.count == 1 && again[0].attempts == 1)
        }
    }

    @Test func aLongRetryAfterAndAnAnswerNeverToRetryAreDeadAtOnce() throws {
        try withOutbox { outbox in
            let now = Timestamp(milliseconds: 2_000_000)
            try outbox.enqueue([note("d1", sync: 1), note("d2", sync: 1)], cursor: 1)
            let leased = try outbox.lease(now: now, limit: 10, policy: policy).leased
            let settled = try outbox.settle([(leased[0], .retry(reason: "FCM 503", after: .seconds(600))), (leased[1], .failed(reason: "APNs 400 BadTopic"))], now: now, policy: policy)
            #expect(settled.allSatisfy { if case .dead = $0 { true } else { false } })
            #expect(try outbox.deadLetters().count == 2)
        }
    }

    @Test func expiredNotificationsAreDroppedUnsent() throws {
        try withOutbox { outbox in
            try outbox.setTimeToLive(pool: "test:0", .seconds(60))
            let committed: Int64 = 1_000_000
            try outbox.enqueue([note("d1", sync: 1, at: committed), note("d2", sync: 1, at: committed)], cursor: 1)
            // d1 is due within its time-to-live; d2 only after it.
            let first = try outbox.lease(now: Timestamp(milliseconds: committed + 1_000), limit: 1, policy: policy)
            #expect(first.leased.count == 1 && first.expired == 0)
            // A retry that could only happen after the time-to-live expires instead.
            #expect(try outbox.settle([(first.leased[0], .retry(reason: "HTTP 429", after: .seconds(100)))], now: Timestamp(milliseconds: committed + 1_000), policy: policy) == [.expired])
            let late = try outbox.lease(now: Timestamp(milliseconds: committed + 61_000), limit: 10, policy: policy)
            #expect(late.leased.isEmpty && late.expired == 1)
            #expect(try outbox.status().transports.first { $0.transport == .apns }!.counts["expired"] == 2)
            #expect(throws: LedgerError.self) { try outbox.setTimeToLive(pool: "test:0", .seconds(0)) }
        }
    }

    @Test func leasesOfAStoppedServerAreReleased() throws {
        try withOutbox { outbox in
            let now = Timestamp(milliseconds: 2_000_000)
            try outbox.enqueue([note("d1", sync: 1)], cursor: 1)
            #expect(try outbox.lease(now: now, limit: 10, policy: policy).leased.count == 1)
            #expect(try outbox.releaseLeases(now: now) == 1)
            let again = try outbox.lease(now: now, limit: 10, policy: policy).leased
            #expect(again.count == 1 && again[0].attempts == 2)
        }
    }

    @Test func rowsKeepEveryFieldThroughTheirEncoding() throws {
        var n = note("device-é", sync: 42, at: 1_234)
        n.attempts = 3
        n.nextAttempt = Timestamp(milliseconds: 99)
        n.inFlight = true
        n.deadSince = Timestamp(milliseconds: 7)
        n.retried = Timestamp(milliseconds: -5)
        n.lastError = "APNs 400 BadTopic"
        #expect(try PushOutbox.decode(PushOutbox.encode(n)) == n)
        let plain = note("d", sync: 1)
        #expect(try PushOutbox.decode(PushOutbox.encode(plain)) == plain)
        var truncated = PushOutbox.encode(n)
        truncated.removeLast()
        #expect(throws: LedgerError.self) { try PushOutbox.decode(truncated) }
    }

    @Test func applicationARNsNameTheirPlatform() {
        #expect(PushTransportConfiguration.platform(ofARN: Self.arn) == .apns)
        #expect(PushTransportConfiguration.platform(ofARN: "arn:aws:sns:eu-west-1:1:app/APNS_SANDBOX/x") == .apnsSandbox)
        #expect(PushTransportConfiguration.platform(ofARN: "arn:aws:sns:eu-west-1:1:app/GCM/x") == .gcm)
        #expect(PushTransportConfiguration.platform(ofARN: "arn:aws:sns:eu-west-1:1:app/WNS/x") == nil)
        #expect(PushTransportConfiguration.platform(ofARN: "arn:aws:sns:eu-west-1:1:topic/GCM/x") == nil)
        #expect(PushTransportConfiguration.platform(ofARN: "not an arn") == nil)
    }
}
