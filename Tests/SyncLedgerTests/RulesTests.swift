import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// One rule set for every path into a user's stream: UpdateRecords, DeleteDataset, both
/// branches of an offline merge, and the bounds that keep one identity from piling up state.
@Suite struct RulesTests {
    /// A device that shares history with the server up to offset 1, then writes offline.
    private func offline(_ options: LedgerOptions = LedgerOptions(), _ change: @escaping (Ledger, StreamName) async throws -> Void,
                         then body: (Ledger, Segment, StreamName) async throws -> Void) async throws {
        try await withLedger(options) { server in
            try await withLedger { device in
                let s = stream("notes")
                try await server.put(s, ["a": "1"])
                try await device.merge(try #require(try server.streamSegment(s, after: 0)))
                try await change(device, s)
                try await body(server, try #require(try device.streamSegment(s, after: 1)), s)
            }
        }
    }

    /// The log core's append takes SyncLedger's own streams only: a user's dataset is reached
    /// through Cognito's rules, so a new path cannot skip them by calling the raw append.
    @Test func theRawAppendRefusesAUsersDataset() async throws {
        try await withLedger { ledger in
            let s = stream("d")
            let error = await expectLedgerError(.invalidParameter) {
                try await ledger.write { txn in _ = try ledger.append(txn, to: s, author: "t", events: [.put(key: "k", value: "v", deviceModified: nil)]) }
            }
            #expect(error?.message.contains("only through Cognito's rules") == true)
            #expect(try ledger.streams().isEmpty, "nothing was written")
            // The same change through the rules is taken; a system stream through the raw append too.
            try await ledger.write { txn in _ = try ledger.appendChange(txn, to: s, author: "t", events: [.put(key: "k", value: "v", deviceModified: nil)]) }
            let system = Ledger.systemStream(s.pool, "configuration")
            try await ledger.write { txn in _ = try ledger.append(txn, to: system, author: "t", events: [.put(key: "k", value: "v", deviceModified: nil)]) }
            #expect(try ledger.values(s) == ["k": "v"])
        }
    }

    @Test func aFastForwardObeysTheSameLimitsAsUpdateRecords() async throws {
        var options = LedgerOptions()
        options.limits.maxKeyLength = 8
        options.limits.maxValueLength = 16
        options.limits.maxRecordsPerDataset = 3
        // The device has no such limits; the server must apply its own to what it takes.
        try await offline(options, { device, s in try await device.put(s, ["a-key-too-long": "x"]) }, then: { server, segment, s in
            let error = await expectLedgerError(.invalidParameter) { _ = try await server.mergeOffline(segment, deviceID: "phone", sessionToken: try server.token(s)) }
            #expect(error?.message.contains("a-key-too-long") == true)
            let count = try server.describeDataset(s).syncCount
            #expect(count == 1)
        })
        try await offline(options, { device, s in try await device.put(s, ["v": String(repeating: "x", count: 17)]) }, then: { server, segment, s in
            await expectLedgerError(.limitExceeded) { _ = try await server.mergeOffline(segment, deviceID: "phone", sessionToken: try server.token(s)) }
            let count = try server.describeDataset(s).syncCount
            #expect(count == 1)
        })
        try await offline(options, { device, s in
            try await device.put(s, ["b": "1", "c": "1"])
            try await device.put(s, ["d": "1"])   // a fourth record: over the server's limit of 3
        }, then: { server, segment, s in
            await expectLedgerError(.limitExceeded) { _ = try await server.mergeOffline(segment, deviceID: "phone", sessionToken: try server.token(s)) }
            let (count, values) = (try server.describeDataset(s).syncCount, try server.values(s))
            #expect(count == 1, "all or nothing: the first entry is not kept either")
            #expect(values == ["a": "1"])
        })
    }

    @Test func theServerStampsEveryEntryItTakesFromADevice() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await offline(options, { device, s in try await device.put(s, ["b": "2"], device: "forged-author") }, then: { server, segment, s in
            let report = try await server.mergeOffline(segment, deviceID: "phone", caller: "test:1", sessionToken: try server.token(s))
            #expect(report.fastForward)
            let entry = try #require(try server.entries(in: s).last)
            #expect(entry.author == "test:1" && entry.device == "phone")
            #expect(entry.time == clock.read(), "the server's time, not the device's")
        })
    }

    @Test func theReservedIdentityAndDotNamesAreRefusedOnEveryPath() async throws {
        try await withLedger { ledger in
            let system = Ledger.systemStream(stream().pool, "devices")
            await expectLedgerError(.invalidParameter) { _ = try await ledger.updateRecords(system, patches: [], sessionToken: "x") }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.deleteDataset(system) }
            #expect(throws: LedgerError.self) { _ = try ledger.validateChange([.put(key: "k", value: "v", deviceModified: nil)], for: system) }
            for name in [".", ".."] {
                #expect(throws: LedgerError.self) { _ = try DatasetName(name) }
            }
            let dotted = try DatasetName("a.b")
            #expect(dotted.rawValue == "a.b")
            #expect(throws: LedgerError.self) { _ = try ChangeOrigin(author: "a", device: String(repeating: "d", count: 257)) }
            #expect(throws: LedgerError.self) { _ = try ChangeOrigin(author: "") }
        }
    }

    @Test func removedRecordMarkersAreBounded() async throws {
        var options = LedgerOptions()
        options.limits.maxTombstonesPerDataset = 5
        try await withLedger(options) { ledger in
            let s = stream()
            // Removing keys that never existed leaves markers too (devices must learn of them).
            try await ledger.put(s, Dictionary(uniqueKeysWithValues: (0..<5).map { ("gone\($0)", String?.none) }))
            #expect(try ledger.describeDataset(s).numRecords == 0)
            await expectLedgerError(.limitExceeded) { try await ledger.put(s, ["gone5": nil]) }
            // Putting a value on a marker turns it back into a record: allowed, and it frees one.
            try await ledger.put(s, ["gone0": "back"])
            try await ledger.put(s, ["other": nil])
            #expect(try ledger.verify().isValid)
            // Deleting the dataset clears them.
            try await ledger.deleteDataset(s)
            try await ledger.put(s, ["x0": nil, "x1": nil])
        }
    }

    @Test func datasetNamesAndDevicesPerIdentityAreBounded() async throws {
        var options = LedgerOptions()
        options.limits.maxDatasetNamesPerIdentity = 3
        options.limits.maxDevicesPerIdentity = 2
        try await withLedger(options) { ledger in
            for name in ["a", "b", "c"] {
                try await ledger.put(stream(name), ["k": "v"])
                try await ledger.deleteDataset(stream(name))
            }
            // Three names used (all deleted): a fourth name is refused, a used one comes back.
            await expectLedgerError(.limitExceeded) { try await ledger.put(stream("d"), ["k": "v"]) }
            try await ledger.put(stream("a"), ["k": "again"])
            let s = stream()
            _ = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "t1")
            _ = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "t2")
            _ = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "t1")  // known: fine
            await expectLedgerError(.limitExceeded) { _ = try await ledger.registerDevice(pool: s.pool, identity: s.identity, platform: .gcm, token: "t3") }
            _ = try await ledger.registerDevice(pool: s.pool, identity: try IdentityID("test:9"), platform: .gcm, token: "t3")
        }
    }

    @Test func aLoweredLimitStillLetsADatasetShrink() async throws {
        let dir = temporaryPath("lowered")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let ledger = try Ledger(directory: dir)
            defer { ledger.close() }
            try await ledger.put(stream(), ["a": "1", "b": "2", "c": "3"])
        }
        var options = LedgerOptions()
        options.limits.maxRecordsPerDataset = 2
        let ledger = try Ledger(directory: dir, options: options)
        defer { ledger.close() }
        await expectLedgerError(.limitExceeded) { try await ledger.put(stream(), ["d": "4"]) }
        try await ledger.put(stream(), ["c": nil])  // 3 → 2 records: shrinking is allowed
        try await ledger.put(stream(), ["a": "changed"])  // at the limit, not growing
    }

    @Test func listRecordsPagesThroughMarkersInSyncCountOrder() async throws {
        try await withLedger { ledger in
            let s = stream()
            for i in 0..<40 { try await ledger.put(s, ["k\(i % 13)": i % 4 == 0 ? nil : "v\(i)"]) }
            let all = try ledger.allRecords(s, after: 0, pageSize: 1000).records
            for pageSize in [1, 2, 5, 100] {
                for after in [0, 7, 30, 39, 40, 41] as [UInt64] {
                    let paged = try ledger.allRecords(s, after: after, pageSize: pageSize).records
                    #expect(paged.map(\.key) == all.filter { $0.syncCount > after }.map(\.key), "page \(pageSize) after \(after)")
                    #expect(zip(paged, paged.dropFirst()).allSatisfy { $0.syncCount <= $1.syncCount })
                }
            }
            // A page token is bound to its dataset and lastSyncCount.
            let first = try ledger.listRecords(s, after: 0, maxResults: 2)
            let token = try #require(first.nextToken)
            #expect(throws: LedgerError.self) { _ = try ledger.listRecords(s, after: 1, maxResults: 2, nextToken: token) }
            #expect(throws: LedgerError.self) { _ = try ledger.listRecords(stream("other"), after: 0, maxResults: 2, nextToken: token) }
        }
    }

    @Test func readsPastTheLastOffsetOrSequenceAreEmpty() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1"])
            #expect(try ledger.feedSegment(after: .max) == nil)
            #expect(try ledger.streamSegment(s, after: .max) == nil)
            var seen = 0
            try ledger.forEachCommit(after: .max) { _ in seen += 1; return true }
            try ledger.forEachEntry(in: s, from: .max) { _ in seen += 1; return true }
            #expect(seen == 0)
            #expect(try ledger.listRecords(s, after: .max).records.isEmpty)
            #expect(try ledger.dataset(s, asOfSyncCount: .max).liveRecords == ["a": "1"])
            #expect(Timestamp(milliseconds: .max).description.isEmpty == false)
            #expect(Timestamp(milliseconds: .min).description.isEmpty == false)
        }
    }

    @Test func emptyAndDeleteOnlyEntriesCannotMakeDatasets() async throws {
        var options = LedgerOptions()
        options.limits.maxDatasetNamesPerIdentity = 2
        try await withLedger(options) { server in
            try await withLedger { device in
                // A device's entries with no event, or only a delete, for datasets that do not exist.
                for name in ["e1", "e2", "e3"] {
                    let s = stream(name)
                    try await device.write { txn in
                        try device.forgeEntry(txn, to: s, author: "device", events: [])
                    }
                    let segment = try #require(try device.streamSegment(s, after: 0))
                    await expectLedgerError(.invalidParameter) { _ = try await server.mergeOffline(segment, sessionToken: try server.token(s)) }
                }
                let d = stream("d1")
                try await device.write { txn in
                    try device.forgeEntry(txn, to: d, author: "device", events: [.deleteDataset])
                }
                let deleteOnly = try #require(try device.streamSegment(d, after: 0))
                await expectLedgerError(.notFound) { _ = try await server.mergeOffline(deleteOnly, sessionToken: try server.token(d)) }
                #expect(try server.streams().isEmpty, "no stream was made")
            }
        }
    }

    @Test func offlineMergesNeedASessionTokenAndConflictWithALaterDelete() async throws {
        try await offline(LedgerOptions(), { device, s in try await device.put(s, ["b": "offline"]) }, then: { server, segment, s in
            await expectLedgerError(.invalidSessionToken) { _ = try await server.mergeOffline(segment, sessionToken: nil) }
            // The server deletes the dataset and writes it again after the device's base.
            try await server.deleteDataset(s)
            try await server.put(s, ["c": "new"])
            let error = await expectLedgerError(.conflict) { _ = try await server.mergeOffline(segment, sessionToken: try server.token(s), partial: true) }
            #expect(error?.message.contains("deleted") == true)
            #expect(try server.values(s) == ["c": "new"], "the device's stale edit did not come back")
        })
    }

    @Test func markerKeysAreBoundedInBytes() async throws {
        var options = LedgerOptions()
        options.limits.maxTombstoneBytesPerDataset = 100
        try await withLedger(options) { ledger in
            let s = stream()
            try await ledger.put(s, [String(repeating: "k", count: 90): nil])
            await expectLedgerError(.limitExceeded) { try await ledger.put(s, [String(repeating: "j", count: 20): nil]) }
            try await ledger.put(s, [String(repeating: "k", count: 90): "back"])  // frees the marker
            try await ledger.put(s, [String(repeating: "j", count: 20): nil])
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func deviceTimesAreBounded() async throws {
        try await withLedger { ledger in
            let s = stream()
            let token = try ledger.token(s)
            let far = Timestamp(milliseconds: .min)
            await expectLedgerError(.invalidParameter) {
                _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "k", value: "v", syncCount: 0, deviceModified: far)], sessionToken: token)
            }
        }
    }
}
