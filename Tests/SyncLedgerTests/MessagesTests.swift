import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct MessagesTests {
    let pool = try! IdentityPoolID("test:0")
    let alice = try! IdentityID("test:1")
    let bob = try! IdentityID("test:2")

    func device(_ ledger: Ledger, _ identity: IdentityID) async throws -> String {
        try await ledger.syncDevice(pool: pool, caller: .identity(identity), code: nil, info: DeviceInfo(platform: .gcm))
    }

    func message(_ id: String, ttl: Int64 = 3600, sentAt: Timestamp? = nil, _ data: [String: String] = ["k": "v"]) -> DeviceMessage {
        DeviceMessage(messageId: id, timeToLive: ttl, sentAt: sentAt, data: data)
    }

    @Test func aResendIsAnsweredFromTheStoredAcknowledgementAfterAReopenToo() async throws {
        let dir = temporaryPath("messages")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var ledger = try Ledger(directory: dir)
        let code = try await device(ledger, alice)
        let first = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
        #expect(!first.replayed)
        let again = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
        #expect(again.replayed && again.sequence == first.sequence)
        ledger.close()
        ledger = try Ledger(directory: dir)
        defer { ledger.close() }
        let afterRestart = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
        #expect(afterRestart.replayed && afterRestart.sequence == first.sequence)
        let stream = Ledger.messageStream(pool: pool, identity: alice)
        #expect(try ledger.entries(in: stream).count == 1)
        // Another body under the used id is refused, and nothing is appended.
        await expectLedgerError(.idempotencyConflict) {
            _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1", ["k": "other"]))
        }
        // The same id from another device is another message.
        let other = try await device(ledger, alice)
        let fromOther = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: other, message: message("m1"))
        #expect(!fromOther.replayed && fromOther.sequence != first.sequence)
        #expect(try ledger.entries(in: stream).count == 2)
        let entry = try #require(try ledger.entries(in: stream).first)
        #expect(entry.author == alice.rawValue && entry.device == code)
        #expect(try ledger.verify().isValid)
    }

    @Test func theStoredFormIsJSONEncodersWhicheverWayItIsWritten() {
        let samples = [
            message("m-1", ["a": "1", "B": "2", "_": "", "z9": "x y"]),
            message("uuid-0b7f", ttl: 0, sentAt: Timestamp(milliseconds: -5), ["k": String(repeating: "v", count: 300)]),
            message("m", sentAt: Timestamp(milliseconds: 1_800_000_000_123), [:]),
            message("slash/id", ["k": "v"]), message("q\"uote", ["k": "v"]), message("m", ["é": "ü"]), message("m", ["k": "back\\slash"]),
            message("m", ["k": "tab\t"]),
        ]
        for m in samples {
            #expect(m.canonical == Ledger.json(m))
            if let fast = m.fastCanonical() { #expect(fast == Ledger.json(m)) }
        }
        #expect(samples.prefix(3).allSatisfy { $0.fastCanonical() != nil })
        #expect(samples.dropFirst(3).allSatisfy { $0.fastCanonical() == nil }, "strings JSONEncoder escapes take its own path")
        #expect(Ledger.hasControlCharacter("a\u{85}b") && Ledger.hasControlCharacter("\u{7f}") && !Ledger.hasControlCharacter("é✓"))
    }

    @Test func badMessagesAndForeignDevicesWriteNothing() async throws {
        try await withLedger { ledger in
            let code = try await device(ledger, alice)
            let before = try ledger.lastSequence
            await expectLedgerError(.notFound) { _ = try await ledger.postMessage(pool: pool, identity: bob, deviceCode: code, message: message("m")) }
            await expectLedgerError(.notFound) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: "0000", message: message("m")) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: "bad code!", message: message("m")) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("")) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("a\u{0}b")) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m", ttl: -1)) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m", ttl: 2_419_201)) }
            await expectLedgerError(.limitExceeded) {
                _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m", ["k": String(repeating: "x", count: 4096)]))
            }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m", ["": "x"])) }
            // Sent an hour ago with a minute to live: expired on arrival.
            let late = Timestamp(milliseconds: Timestamp.now.milliseconds - 3_600_000)
            await expectLedgerError(.expired) { _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m", ttl: 60, sentAt: late)) }
            #expect(try ledger.lastSequence == before)
            // Bob may send from it while he is logged in on it, not after his logout (the
            // answer to "who may send" follows the device's record at once).
            try await ledger.login(pool: pool, identity: bob, code: code, subscribeAll: nil)
            _ = try await ledger.postMessage(pool: pool, identity: bob, deviceCode: code, message: message("b1"))
            try await ledger.logout(pool: pool, caller: .identity(bob), code: code)
            await expectLedgerError(.notFound) { _ = try await ledger.postMessage(pool: pool, identity: bob, deviceCode: code, message: message("b2")) }
            _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("a1"))
            // A user's write cannot reach the message stream, nor name it.
            await expectLedgerError(.invalidParameter) { _ = try await ledger.put(Ledger.messageStream(pool: pool, identity: alice), ["k": "v"]) }
            #expect(throws: LedgerError.self) { try DatasetName("_syncledger.messages") }
        }
    }

    @Test func consumersReadAgainWhatTheyDidNotAcknowledgeAndCountExpiry() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let code = try await device(ledger, alice)
            let short = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("short", ttl: 10))
            let long = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("long", ttl: 3600))
            let first = try ledger.messages(for: "app", limit: 10).1
            #expect(first.messages.map(\.message.messageId) == ["short", "long"])
            #expect(first.messages.first?.deviceCode == code && first.messages.first?.identity == alice)
            // Not acknowledged: the same ones again (a consumer that crashed).
            #expect(try ledger.messages(for: "app", limit: 10).1.messages.map(\.sequence) == [short.sequence, long.sequence])
            // Acknowledge the first: only the second is left.
            var state = try await ledger.acknowledgeMessages(consumer: "app", through: short.sequence)
            #expect(state.cursor == short.sequence && state.acknowledged == 1 && state.expired == 0)
            #expect(try ledger.messages(for: "app", limit: 10).1.messages.map(\.sequence) == [long.sequence])
            // A minute later a second consumer finds the short one expired, skips and counts it.
            clock.advance(seconds: 60)
            let late = try ledger.messages(for: "audit", limit: 10).1
            #expect(late.messages.map(\.message.messageId) == ["long"] && late.skippedExpired == 1 && late.last == long.sequence)
            state = try await ledger.acknowledgeMessages(consumer: "audit", through: late.last)
            #expect(state.acknowledged == 1 && state.expired == 1)
            // An acknowledgement behind the cursor changes nothing; one beyond the feed is refused.
            #expect(try await ledger.acknowledgeMessages(consumer: "audit", through: 1) == state)
            await expectLedgerError(.invalidParameter) { _ = try await ledger.acknowledgeMessages(consumer: "audit", through: 1_000_000) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.acknowledgeMessages(consumer: "no spaces", through: 1) }
            #expect(try ledger.consumers().map(\.name) == ["app", "audit"])
        }
    }

    @Test func idempotencyKeysArePurgedAfterFourWeeks() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        options.durable = false
        try await withLedger(options) { ledger in
            let code = try await device(ledger, alice)
            let s = stream()
            for i in 0..<300 {
                _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m\(i)", sentAt: clock.read()))
            }
            let token = try ledger.token(s)
            _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: "v", syncCount: 0)], sessionToken: token, idempotencyKey: "u1")
            await expectLedgerError(.invalidParameter) { _ = try await ledger.purgeIdempotencyKeys(retention: .seconds(86_400)) }
            #expect(try await ledger.purgeIdempotencyKeys() == IdempotencyPurge())
            let full = try ledger.idempotencyFootprint()
            #expect(full.first { $0.name == "message-ids" }?.entries == 300)
            clock.advance(seconds: 29 * 86_400)
            let purged = try await ledger.purgeIdempotencyKeys(batch: 128)
            #expect(purged == IdempotencyPurge(messageKeys: 300, messageKeysKept: 0, updateKeys: 1))
            #expect(try ledger.idempotencyFootprint().allSatisfy { $0.entries == 0 })
            // A resend with SentAt after the purge has expired: refused, nothing stored.
            await expectLedgerError(.expired) {
                _ = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m0", sentAt: Timestamp(milliseconds: clock.read().milliseconds - 29 * 86_400_000)))
            }
            // The log keeps every message; consumers no longer see them (they had expired).
            #expect(try ledger.entries(in: Ledger.messageStream(pool: pool, identity: alice)).count == 300)
            #expect(try ledger.messages(after: 0, limit: 10).messages.isEmpty)
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func keysAreViewsThatRebuildAndReplicate() async throws {
        try await withLedger { leader in
            let code = try await device(leader, alice)
            let ack = try await leader.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
            _ = try await leader.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m2"))
            let maintained = try leader.viewContents()
            try await leader.rebuildViews()
            let rebuilt = try leader.viewContents()
            #expect(maintained.count == rebuilt.count)
            for (m, r) in zip(maintained, rebuilt) {
                #expect(m.map(\.key) == r.map(\.key) && m.map(\.value) == r.map(\.value))
            }
            #expect(maintained.contains { !$0.isEmpty && $0.count == 2 && $0.allSatisfy { $0.value.count == 40 } }, "the message keys are among the views")
            // A follower that merged the feed answers a resend as the leader would.
            try await withLedger { follower in
                let segment = try #require(try leader.feedSegment(after: 0))
                _ = try await follower.merge(bytes: segment.encoded())
                let resent = try await follower.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
                #expect(resent.replayed && resent.sequence == ack.sequence)
                #expect(try follower.messages(after: 0, limit: 10).messages.map(\.message.messageId) == ["m1", "m2"])
            }
        }
    }

    @Test func aMessageWithoutSentAtKeepsItsKeySoALateResendIsNotTakenAgain() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        options.durable = false
        try await withLedger(options) { ledger in
            let code = try await device(ledger, alice)
            let first = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("late", ttl: 3600))
            let dated = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("dated", ttl: 3600, sentAt: clock.read()))
            clock.advance(seconds: 29 * 86_400)
            let purged = try await ledger.purgeIdempotencyKeys()
            #expect(purged.messageKeys == 1 && purged.messageKeysKept == 1)
            // Its place for consumers went (it expired); its key stays, and answers the resend.
            #expect(try ledger.messages(after: 0, limit: 10).messages.isEmpty)
            let resent = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("late", ttl: 3600))
            #expect(resent.replayed && resent.sequence == first.sequence)
            #expect(try ledger.entries(in: Ledger.messageStream(pool: pool, identity: alice)).count == 2)
            // A second purge finds nothing more to do; the kept key is no consumer's.
            #expect(try await ledger.purgeIdempotencyKeys() == IdempotencyPurge())
            #expect(try ledger.idempotencyFootprint().first { $0.name == "message-ids" }?.entries == 1)
            _ = dated
        }
    }

    @Test func aMessageTakenAgainAfterItsKeyWasPurgedIsIndexedOnEveryReplica() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        options.durable = false
        try await withLedger(options) { leader in
            try await withLedger(options) { follower in
                let code = try await device(leader, alice)
                let first = try await leader.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
                _ = try await follower.merge(bytes: try #require(try leader.feedSegment(after: 0)).encoded())
                // Four weeks on, the leader has lost its key (as an earlier version's purge
                // dropped it; the follower's is there): a resend without SentAt is taken as a
                // new message.
                clock.advance(seconds: 29 * 86_400)
                let key = Ledger.messageKey(pool: pool, identity: alice, device: code, messageId: "m1")
                _ = try await leader.write { txn in try txn.delete(leader.schema.messageIDs, key: key) }
                _ = try await leader.purgeIdempotencyKeys()
                let again = try await leader.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
                #expect(!again.replayed && again.sequence > first.sequence)
                _ = try await follower.merge(bytes: try #require(try leader.feedSegment(after: first.sequence)).encoded())
                // Both show it to consumers (the first had expired), and both answer a resend with it.
                for ledger in [leader, follower] {
                    #expect(try ledger.messages(after: 0, limit: 10).messages.map(\.sequence) == [again.sequence])
                    let resent = try await ledger.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
                    #expect(resent.replayed && resent.sequence == again.sequence)
                }
                // The follower's purge of the first entry's row leaves the key, which names the second.
                #expect(try await follower.purgeIdempotencyKeys() == IdempotencyPurge(messageKeys: 0, messageKeysKept: 1, updateKeys: 0))
                let afterPurge = try await follower.postMessage(pool: pool, identity: alice, deviceCode: code, message: message("m1"))
                #expect(afterPurge.replayed && afterPurge.sequence == again.sequence)
                #expect(try follower.verify().isValid)
            }
        }
    }

    @Test func updateRecordsWithAnIdempotencyKeyIsAppliedOnce() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let s = stream()
            let token = try ledger.token(s)
            let patches = [RecordPatch(op: .replace, key: "k", value: "v1", syncCount: 0)]
            let first = try await ledger.updateRecords(s, patches: patches, deviceID: "d", sessionToken: token, idempotencyKey: "req-1")
            #expect(!first.replayed && first.syncCount == 1)
            // The session expired since: the retry still gets the first answer, and nothing new.
            clock.advance(seconds: 3600)
            let retry = try await ledger.updateRecords(s, patches: patches, deviceID: "d", sessionToken: token, idempotencyKey: "req-1")
            #expect(retry.replayed && retry.syncCount == 1 && retry.records == first.records)
            #expect(try ledger.entries(in: s).count == 1)
            let fresh = try ledger.token(s)
            await expectLedgerError(.idempotencyConflict) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: "v2", syncCount: 1)], deviceID: "d", sessionToken: fresh, idempotencyKey: "req-1")
            }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.updateRecords(s, patches: patches, sessionToken: fresh, idempotencyKey: "") }
            // The key is per dataset: another dataset may use it.
            let other = stream("other")
            let there = try await ledger.updateRecords(other, patches: patches, deviceID: "d", sessionToken: try ledger.token(other), idempotencyKey: "req-1")
            #expect(!there.replayed)
            #expect(try ledger.entries(in: s).count == 1)
        }
    }
}
