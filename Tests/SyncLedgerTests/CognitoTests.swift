import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct CognitoSemanticsTests {
    @Test func syncCountRisesByOnePerUpdateAndRecordsCarryIt() async throws {
        try await withLedger { ledger in
            let s = stream()
            let first = try await ledger.put(s, ["a": "1", "b": "2", "c": "3"])
            #expect(first.syncCount == 1)
            #expect(first.records.map(\.syncCount) == [1, 1, 1])
            let second = try await ledger.put(s, ["a": "10"])
            #expect(second.syncCount == 2)
            #expect(second.records == [Record(key: "a", state: second.records[0].state)])
            #expect(second.records[0].syncCount == 2)
            let third = try await ledger.put(s, ["b": nil])
            #expect(third.syncCount == 3)
            #expect(third.records[0].value == nil)
            #expect(try ledger.values(s) == ["a": "10", "c": "3"])
            let d = try ledger.describeDataset(s)
            #expect(d.syncCount == 3 && d.numRecords == 2 && d.dataStorage == UInt64("a10c3".utf8.count))
        }
    }

    @Test func listRecordsAfterIsExclusiveAndReportsTombstones() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1", "b": "2"])       // 1
            try await ledger.put(s, ["a": "3"])                 // 2
            try await ledger.put(s, ["b": nil])                 // 3
            let after1 = try ledger.allRecords(s, after: 1)
            #expect(after1.records.map(\.key) == ["a", "b"])
            #expect(after1.records.map(\.syncCount) == [2, 3])
            #expect(after1.records[1].value == nil)
            #expect(after1.last.datasetSyncCount == 3 && after1.last.datasetExists)
            #expect(try ledger.allRecords(s, after: 3).records.isEmpty)
            #expect(try ledger.allRecords(s, after: 0).records.count == 2)
            // Both lookup strategies (log walk and record scan) agree.
            for after in 0...3 {
                let viaList = try ledger.allRecords(s, after: UInt64(after)).records
                let replay = try ledger.dataset(s, asOfSyncCount: 3).records.filter { $0.value.syncCount > after }
                #expect(Set(viaList.map { RecordKey($0.key) }) == Set(replay.keys))
            }
        }
    }

    @Test func unknownDatasetListsEmptyWithAToken() async throws {
        try await withLedger { ledger in
            let page = try ledger.listRecords(stream("never"))
            #expect(page.records.isEmpty && !page.datasetExists && page.datasetSyncCount == 0)
            #expect(!page.syncSessionToken.isEmpty)
            await expectLedgerError(.notFound) { _ = try ledger.describeDataset(stream("never")) }
        }
    }

    @Test func conflictWritesNothingAndNamesKeyAndCounts() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1", "b": "1"])       // 1
            try await ledger.put(s, ["a": "2"])                 // 2: a at 2, b at 1
            let token = try ledger.listRecords(s).syncSessionToken
            let error = await expectLedgerError(.conflict) {
                _ = try await ledger.updateRecords(s, patches: [
                    RecordPatch(op: .replace, key: "b", value: "ok", syncCount: 1),
                    RecordPatch(op: .replace, key: "a", value: "stale", syncCount: 1),
                ], sessionToken: token)
            }
            #expect(error?.conflicts == [LedgerError.Conflict(key: "a", expected: 1, actual: 2)])
            #expect(error?.message.contains("\"a\"") == true)
            #expect(try ledger.values(s) == ["a": "2", "b": "1"])
            #expect(try ledger.describeDataset(s).syncCount == 2)
            // A new record must be sent with 0.
            await expectLedgerError(.conflict) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "new", value: "x", syncCount: 5)], sessionToken: token)
            }
        }
    }

    @Test func sessionTokensAreRequiredBoundAndExpire() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        options.sessionLifetime = .seconds(60)
        try await withLedger(options) { ledger in
            let mine = stream("mine")
            let patch = [RecordPatch(op: .replace, key: "k", value: "v", syncCount: 0)]
            await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: nil) }
            await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: "forged.token") }
            let token = try ledger.listRecords(mine).syncSessionToken
            var tampered = Array(token.utf8)
            tampered[3] = tampered[3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: String(decoding: tampered, as: UTF8.self)) }
            let foreign = try ledger.listRecords(stream("mine", identity: "2")).syncSessionToken
            await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: foreign) }
            let otherDataset = try ledger.listRecords(stream("other")).syncSessionToken
            await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: otherDataset) }
            clock.advance(seconds: 61)
            let error = await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: token) }
            #expect(error?.message.contains("expired") == true)
            #expect(try ledger.streams().isEmpty, "nothing was written by refused updates")
            let fresh = try ledger.listRecords(mine).syncSessionToken
            #expect(try await ledger.updateRecords(mine, patches: patch, sessionToken: fresh).syncCount == 1)
            // A token from another ledger (another key) is refused.
            try await withLedger { other in
                let alien = try other.listRecords(mine).syncSessionToken
                await expectLedgerError(.invalidSessionToken) { _ = try await ledger.updateRecords(mine, patches: patch, sessionToken: alien) }
            }
        }
    }

    @Test func deleteDatasetHidesItAndCountsAreNeverReused() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1"])                 // 1
            try await ledger.put(s, ["b": "2"])                 // 2
            let before = try await ledger.deleteDataset(s)      // 3
            #expect(before.syncCount == 2 && before.numRecords == 2)
            await expectLedgerError(.notFound) { _ = try ledger.describeDataset(s) }
            #expect(try ledger.listDatasets(pool: s.pool, identity: s.identity).datasets.isEmpty)
            let page = try ledger.listRecords(s, after: 2)
            #expect(!page.datasetExists && page.datasetDeletedAfterRequestedSyncCount && page.datasetSyncCount == 3)
            #expect(page.records.isEmpty)
            await expectLedgerError(.notFound) { try await ledger.deleteDataset(s) }
            let again = try await ledger.put(s, ["c": "3"])     // 4
            #expect(again.syncCount == 4)
            #expect(try ledger.values(s) == ["c": "3"])
            let d = try ledger.describeDataset(s)
            #expect(d.syncCount == 4 && d.numRecords == 1)
            let after1 = try ledger.listRecords(s, after: 1)
            #expect(after1.datasetDeletedAfterRequestedSyncCount && after1.datasetExists)
            #expect(after1.records.map(\.key) == ["c"])
            #expect(!(try ledger.listRecords(s, after: 3)).datasetDeletedAfterRequestedSyncCount)
            #expect(try ledger.entries(in: s).map(\.offset) == [1, 2, 3, 4])
        }
    }

    @Test func limitsRefuseAndWriteNothing() async throws {
        var options = LedgerOptions()
        options.limits.maxDatasetBytes = 100
        options.limits.maxRecordsPerDataset = 3
        options.limits.maxDatasetsPerIdentity = 2
        options.limits.maxKeyLength = 10
        options.limits.maxValueLength = 50
        try await withLedger(options) { ledger in
            let s = stream("one")
            try await ledger.put(s, ["a": "1"])
            await expectLedgerError(.limitExceeded) { try await ledger.put(s, ["b": String(repeating: "x", count: 51)]) }
            await expectLedgerError(.limitExceeded) { try await ledger.put(s, ["b": String(repeating: "x", count: 50), "c": String(repeating: "y", count: 50)]) }
            await expectLedgerError(.limitExceeded) { try await ledger.put(s, ["b": "1", "c": "1", "d": "1"]) }
            await expectLedgerError(.invalidParameter) { try await ledger.put(s, ["12345678901": "1"]) }
            await expectLedgerError(.invalidParameter) { try await ledger.put(s, ["": "1"]) }
            #expect(try ledger.describeDataset(s).syncCount == 1)
            #expect(try ledger.values(s) == ["a": "1"])
            // Replacing a value is measured net of the old one; removing frees room.
            try await ledger.put(s, ["b": "1", "c": "1"])
            try await ledger.put(s, ["c": nil])
            try await ledger.put(s, ["d": "1"])
            // Datasets per identity.
            try await ledger.put(stream("two"), ["a": "1"])
            await expectLedgerError(.limitExceeded) { try await ledger.put(stream("three"), ["a": "1"]) }
            #expect(try ledger.streams().count == 2)
            try await ledger.deleteDataset(stream("two"))
            try await ledger.put(stream("three"), ["a": "1"])
            #expect(try ledger.listDatasets(pool: s.pool, identity: s.identity).datasets.map(\.stream.dataset.rawValue) == ["one", "three"])
        }
    }

    @Test func badPatchesAreInvalidParameters() async throws {
        try await withLedger { ledger in
            let s = stream()
            let token = try ledger.listRecords(s).syncSessionToken
            await expectLedgerError(.invalidParameter) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: nil, syncCount: 0)], sessionToken: token)
            }
            await expectLedgerError(.invalidParameter) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: "1", syncCount: 0), RecordPatch(op: .remove, key: "k", syncCount: 0)], sessionToken: token)
            }
            await expectLedgerError(.invalidParameter) { _ = try ledger.listRecords(s, maxResults: 0) }
            #expect(try ledger.streams().isEmpty)
        }
    }

    @Test func pagingIsCompleteAndTamperChecked() async throws {
        try await withLedger { ledger in
            let s = stream()
            for i in 0..<5 { try await ledger.put(s, Dictionary(uniqueKeysWithValues: (0..<7).map { ("k\(i)-\($0)", "v\($0)") })) }
            let all = try ledger.allRecords(s, pageSize: 3).records
            #expect(all.count == 35 && Set(all.map(\.key)).count == 35)
            let first = try ledger.listRecords(s, maxResults: 3)
            let token = try #require(first.nextToken)
            await expectLedgerError(.invalidParameter) { _ = try ledger.listRecords(s, maxResults: 3, nextToken: token + "x") }
            await expectLedgerError(.invalidParameter) { _ = try ledger.listRecords(s, after: 1, maxResults: 3, nextToken: token) }
            await expectLedgerError(.invalidParameter) { _ = try ledger.listRecords(stream("other"), maxResults: 3, nextToken: token) }
            // A write between pages: the changed record shows up later; nothing is missed.
            let second = try ledger.listRecords(s, maxResults: 3, nextToken: token)
            try await ledger.put(s, ["k0-0": "changed"])
            var seen = first.records.map(\.key) + second.records.map(\.key)
            var page = second
            while let next = page.nextToken {
                page = try ledger.listRecords(s, maxResults: 3, nextToken: next)
                seen += page.records.map(\.key)
            }
            #expect(Set(seen).count == 35)
            // Datasets paging.
            for i in 0..<5 { try await ledger.put(stream("d\(i)", identity: "9"), ["a": "1"]) }
            let p1 = try ledger.listDatasets(pool: s.pool, identity: try IdentityID("test:9"), maxResults: 2)
            #expect(p1.datasets.map(\.stream.dataset.rawValue) == ["d0", "d1"])
            let p2 = try ledger.listDatasets(pool: s.pool, identity: try IdentityID("test:9"), maxResults: 2, nextToken: p1.nextToken)
            let p3 = try ledger.listDatasets(pool: s.pool, identity: try IdentityID("test:9"), maxResults: 2, nextToken: p2.nextToken)
            #expect(p2.datasets.map(\.stream.dataset.rawValue) == ["d2", "d3"])
            #expect(p3.datasets.map(\.stream.dataset.rawValue) == ["d4"] && p3.nextToken == nil)
            await expectLedgerError(.invalidParameter) { _ = try ledger.listDatasets(pool: s.pool, identity: s.identity, nextToken: p1.nextToken) }
        }
    }

    @Test func usageAndSessionsPerPool() async throws {
        try await withLedger { ledger in
            let a = stream("a")
            let b = stream("b")
            let other = stream("x", pool: "test:1")
            try await ledger.put(a, ["k": "12345"])
            try await ledger.put(b, ["kk": "1"])
            try await ledger.put(other, ["z": "z"])
            let usage = try ledger.identityUsage(pool: a.pool, identity: a.identity)
            #expect(usage.datasetCount == 2 && usage.dataStorage == 6 + 3)
            let pool = try await ledger.poolUsage(a.pool)
            #expect(pool.dataStorage == 9)
            // Each put above listed records once (one session each) for pool test:0: 2 sessions.
            #expect(pool.syncSessionsCount == 2)
            for _ in 0..<70 { _ = try ledger.listRecords(a) }  // crosses the flush threshold
            #expect(try await ledger.poolUsage(a.pool).syncSessionsCount == 72)
            #expect(try await ledger.listPools().pools.map(\.pool.rawValue) == ["test:0", "test:1"])
            let firstPage = try await ledger.listPools(maxResults: 1)
            #expect(firstPage.pools.map(\.pool.rawValue) == ["test:0"])
            #expect(try await ledger.listPools(maxResults: 1, nextToken: firstPage.nextToken).pools.map(\.pool.rawValue) == ["test:1"])
            try await ledger.deleteDataset(a)
            #expect(try await ledger.poolUsage(a.pool).dataStorage == 3)
            #expect(try ledger.identityUsage(pool: a.pool, identity: a.identity).datasetCount == 1)
            await expectLedgerError(.notFound) { _ = try ledger.identityUsage(pool: a.pool, identity: try IdentityID("test:77")) }
            await expectLedgerError(.notFound) { _ = try await ledger.poolUsage(try IdentityPoolID("test:77")) }
        }
    }

    @Test func sessionCountsSurviveReopen() async throws {
        let dir = temporaryPath("sessions")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let ledger = try Ledger(directory: dir)
            for _ in 0..<5 { _ = try ledger.listRecords(stream()) }
            ledger.close()
        }
        let ledger = try Ledger(directory: dir)
        defer { ledger.close() }
        #expect(try await ledger.poolUsage(stream().pool).syncSessionsCount == 5)
    }

    /// Keys are compared byte for byte, as Cognito does: "é" and "e\u{301}" are two records,
    /// although Swift's String equality calls them equal.
    @Test func canonicallyEquivalentKeysAreDifferentRecords() async throws {
        try await withLedger { ledger in
            let s = stream()
            let composed = "\u{e9}"
            let decomposed = "e\u{301}"
            try await ledger.put(s, ["a": "0"])                                         // 1
            let token = try ledger.listRecords(s).syncSessionToken
            let both = try await ledger.updateRecords(s, patches: [
                RecordPatch(op: .replace, key: composed, value: "1", syncCount: 0),
                RecordPatch(op: .replace, key: decomposed, value: "2", syncCount: 0),
            ], sessionToken: token)                                                     // 2
            #expect(both.records.count == 2)
            _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: decomposed, value: "3", syncCount: 2)], sessionToken: token)  // 3
            for after in [UInt64(0), 1, 2] {  // record scan and log walk alike
                let keys = try ledger.allRecords(s, after: after).records.map { Array($0.key.utf8) }
                #expect(Set(keys).count == keys.count)
                #expect(keys.contains(Array(decomposed.utf8)), "after \(after)")
                #expect(keys.contains(Array(composed.utf8)) == (after < 2), "after \(after)")
            }
            #expect(try ledger.describeDataset(s).numRecords == 3)
            let replay = try ledger.dataset(s, asOfSyncCount: 3)
            #expect(replay.liveRecords[RecordKey(composed)] == "1" && replay.liveRecords[RecordKey(decomposed)] == "3")
            var changes = 0
            try ledger.history(of: decomposed, in: s) { _ in changes += 1; return true }
            #expect(changes == 2)
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func authorAndDeviceTimesAreKept() async throws {
        try await withLedger { ledger in
            let s = stream()
            let token = try ledger.listRecords(s).syncSessionToken
            let deviceTime = Timestamp(milliseconds: 1_700_000_000_123)
            _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: "v", syncCount: 0, deviceModified: deviceTime)], deviceID: "phone-1", sessionToken: token)
            let record = try #require(try ledger.allRecords(s).records.first)
            #expect(record.state.lastModifiedBy == "phone-1")
            #expect(record.state.deviceModified == deviceTime)
            let entry = try #require(try ledger.entries(in: s).first)
            #expect(entry.author == s.identity.rawValue, "the author is the caller, by default the identity")
            #expect(entry.device == "phone-1")
            #expect(entry.events == [.put(key: "k", value: "v", deviceModified: deviceTime)])
            _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .remove, key: "k", syncCount: 1)], caller: "admin", sessionToken: token)
            let last = try #require(try ledger.entries(in: s).last)
            #expect(last.author == "admin" && last.device == nil)
            #expect(try ledger.allRecords(s).records.first?.state.lastModifiedBy == "admin")
        }
    }
}
