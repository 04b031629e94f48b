import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// Cognito Streams: the record format, batches read from the feed, where a target starts, and
/// the cursor store.
@Suite struct StreamRecordsTests {
    func enable(_ ledger: Ledger, _ pool: IdentityPoolID, _ on: Bool, name: String = "s1") async throws {
        _ = try await ledger.setPoolConfiguration(pool, pushSync: nil, cognitoStreams: StreamsConfiguration(
            streamName: name, streamingStatus: on ? "ENABLED" : "DISABLED"), caller: "admin")
    }

    func object(_ r: StreamRecord) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(r.json)) as? [String: Any])
    }

    @Test func recordsCarryCognitosStreamJSONAndStopAtTheConfiguration() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await enable(ledger, s.pool, true)
            let start = try ledger.streamStartSequence(pool: s.pool, streamName: "s1")
            let feedEnd = try ledger.lastSequence
            #expect(start == feedEnd)
            _ = try await ledger.put(s, ["a": "1", "b": "2"])
            _ = try await ledger.put(s, ["a": nil])
            _ = try await ledger.put(stream("other", pool: "test:9"), ["x": "1"])
            _ = try await ledger.deleteDataset(s)
            try await enable(ledger, s.pool, false)
            _ = try await ledger.put(s, ["c": "3"])
            let batch = try ledger.streamBatch(pool: s.pool, after: start)
            #expect(batch.records.count == 3)
            let objects = try batch.records.map(object)
            #expect(objects.map { $0["syncCount"] as? Int } == [1, 2, 3])
            #expect(objects.map { $0["operation"] as? String } == ["replace", "replace", "remove"])
            let first = try #require(objects[0]["kinesisSyncRecords"] as? [[String: Any]])
            #expect(Set(first.compactMap { $0["key"] as? String }) == ["a", "b"] && first.allSatisfy { $0["op"] as? String == "replace" })
            let removed = try #require(objects[1]["kinesisSyncRecords"] as? [[String: Any]])
            #expect(removed.count == 1 && removed[0]["op"] as? String == "remove" && removed[0]["value"] is NSNull)
            #expect((objects[2]["kinesisSyncRecords"] as? [Any])?.isEmpty == true)
            #expect(objects.allSatisfy { $0["payloadType"] as? String == "Inline" && $0["identityPoolId"] as? String == s.pool.rawValue })
            #expect(batch.records[0].partitionKey == "\(s.identity.rawValue)/ds")
            // The batch ended before the DISABLED entry; alone, that entry is a batch of no records.
            let disabled = try ledger.streamBatch(pool: s.pool, after: batch.last)
            #expect(disabled.records.isEmpty && disabled.last == batch.last + 1)
            let paused = try ledger.poolStreamSettings().first { $0.pool == s.pool }
            #expect(paused?.enabled == false)
            // Enabled again, the change made while paused follows.
            try await enable(ledger, s.pool, true)
            let resumed = try ledger.streamBatch(pool: s.pool, after: disabled.last)
            let resumedObject = try object(try #require(resumed.records.first))
            #expect(resumed.records.count == 1 && resumedObject["syncCount"] as? Int == 4)
        }
    }

    @Test func batchesHoldAtMostTheLimits() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await enable(ledger, s.pool, true)
            let start = try ledger.lastSequence
            for i in 0..<7 { _ = try await ledger.put(s, ["k\(i)": String(repeating: "v", count: 100)]) }
            let two = try ledger.streamBatch(pool: s.pool, after: start, maxRecords: 2)
            #expect(two.records.count == 2 && two.last == two.records[1].sequence)
            let small = try ledger.streamBatch(pool: s.pool, after: start, maxBytes: 10)
            #expect(small.records.count == 1)
            let all = try ledger.streamBatch(pool: s.pool, after: start)
            let last = try ledger.lastSequence
            #expect(all.records.count == 7 && all.last == last)
        }
    }

    @Test func cursorsMoveForwardOnlyAndCount() throws {
        let path = temporaryPath("streams")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try StreamCursorStore(directory: path, durable: false)
        #expect(try store.target(pool: "p", streamName: "s") == nil)
        #expect(try store.start(pool: "p", streamName: "s", at: 10).cursor == 10)
        #expect(try store.start(pool: "p", streamName: "s", at: 99).cursor == 10)
        try store.recordFailure(pool: "p", streamName: "s", reason: "503")
        var t = try store.acknowledge(pool: "p", streamName: "s", through: 20, records: 3)
        #expect(t.cursor == 20 && t.delivered == 3 && t.batches == 1 && t.failures == 1 && t.lastError == nil)
        t = try store.acknowledge(pool: "p", streamName: "s", through: 15, records: 0)
        #expect(t.cursor == 20 && t.batches == 1)
        #expect(try store.remove(streamName: "s") == 1)
        #expect(try store.all().isEmpty)
    }

    @Test func bulkPublishBatchesWalkEveryLiveDatasetOnceInPages() async throws {
        try await withLedger { ledger in
            let pool = stream().pool
            var expected: [String: [String: String]] = [:]  // "identity/dataset" -> live records
            for i in 0..<7 {
                for d in ["a", "b", "c"] {
                    let s = stream(d, identity: "\(i)")
                    _ = try await ledger.put(s, ["k1": "v\(i)\(d)", "k2": "w\(i)\(d)"])
                    expected["\(s.identity.rawValue)/\(d)"] = ["k1": "v\(i)\(d)", "k2": "w\(i)\(d)"]
                }
            }
            let removed = stream("a", identity: "1"), deleted = stream("b", identity: "2")
            _ = try await ledger.put(removed, ["k2": nil])
            expected["\(removed.identity.rawValue)/a"] = ["k1": "v1a"]
            _ = try await ledger.deleteDataset(deleted)
            expected["\(deleted.identity.rawValue)/b"] = nil
            _ = try await ledger.put(stream("x", identity: "9", pool: "test:9"), ["other": "pool"])  // another pool
            try await enable(ledger, pool, true)  // a system stream of the pool: passed over

            var seen: [String: [String: String]] = [:]
            var after: StreamName?
            var calls = 0
            repeat {
                let batch = try ledger.bulkPublishBatch(pool: pool, after: after, maxRecords: 4, scanLimit: 5)
                #expect(batch.records.count <= 4)
                for r in batch.records {
                    let o = try object(r)
                    #expect(o["bulkPublish"] as? Bool == true && o["operation"] as? String == "replace" && o["identityPoolId"] as? String == pool.rawValue)
                    let items = try #require(o["kinesisSyncRecords"] as? [[String: Any]])
                    let key = "\(o["identityId"] as? String ?? "")/\(o["dataSetName"] as? String ?? "")"
                    #expect(seen[key] == nil, "\(key) published twice")
                    seen[key] = Dictionary(uniqueKeysWithValues: items.map { ($0["key"] as? String ?? "", $0["value"] as? String ?? "") })
                    #expect(r.partitionKey == key)
                }
                calls += 1
                if batch.finished { break }
                after = batch.last
            } while calls < 100
            #expect(seen == expected)
            #expect(calls >= 5)  // 20 live datasets, 4 a page
            // The record's sync counts and sequence are the dataset's last entry's.
            let last = try ledger.bulkPublishBatch(pool: pool, after: nil, maxRecords: 1).records[0]
            let o = try object(last)
            let first = try #require(try ledger.entries(in: stream("a", identity: "0"), from: 1, limit: 1).first)
            #expect(o["syncCount"] as? Int == 1 && last.sequence == first.sequence)
            // A cursor of another pool is refused.
            #expect(throws: LedgerError.self) { try ledger.bulkPublishBatch(pool: pool, after: stream("x", identity: "9", pool: "test:9")) }
        }
    }

    @Test func largeRecordsGoByReferenceToASignedExpiringPayload() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let s = stream()
            try await enable(ledger, s.pool, true)
            let start = try ledger.lastSequence
            _ = try await ledger.put(s, ["small": "1"])
            _ = try await ledger.put(s, ["big": String(repeating: "é\"", count: 200), "small": "2"])
            let expires = Timestamp(milliseconds: clock.read().milliseconds + 60_000)
            let reference = StreamPayloadReference(inlineLimit: 600) { _, sequence, bulk in
                "https://sync.example/streams/payload/" + ledger.streamPayloadToken(sequence: sequence, bulk: bulk, expires: expires)
            }
            let inline = try ledger.streamBatch(pool: s.pool, after: start).records.map(object)
            let batch = try ledger.streamBatch(pool: s.pool, after: start, reference: reference)
            let objects = try batch.records.map(object)
            #expect(objects[0]["payloadType"] as? String == "Inline" && objects[0]["kinesisSyncRecordsURL"] is NSNull)
            #expect(objects[1]["payloadType"] as? String == "S3Url" && objects[1]["kinesisSyncRecords"] is NSNull)
            #expect(batch.records[1].json.count <= 600)
            let url = try #require(objects[1]["kinesisSyncRecordsURL"] as? String)
            let token = String(url.dropFirst("https://sync.example/streams/payload/".count))
            // The payload is exactly the records the inline form carries.
            let payload = try JSONSerialization.jsonObject(with: Data(try ledger.streamPayload(token: token))) as? [[String: Any]]
            #expect(payload.map { NSArray(array: $0) } == (inline[1]["kinesisSyncRecords"] as? [[String: Any]]).map { NSArray(array: $0) })
            // A bulk record by reference answers the dataset's live records as of its entry.
            let bulkInline = try object(try ledger.bulkPublishBatch(pool: s.pool, after: nil).records[0])
            let bulk = try object(try ledger.bulkPublishBatch(pool: s.pool, after: nil, reference: reference).records[0])
            let bulkURL = try #require(bulk["kinesisSyncRecordsURL"] as? String)
            _ = try await ledger.put(s, ["later": "3"])  // after the bulk record: not in its payload
            let bulkPayload = try JSONSerialization.jsonObject(with: Data(try ledger.streamPayload(token: String(bulkURL.dropFirst(37))))) as? [[String: Any]]
            #expect(bulkPayload.map { NSArray(array: $0) } == (bulkInline["kinesisSyncRecords"] as? [[String: Any]]).map { NSArray(array: $0) })
            // Altered, foreign, oversized and expired tokens are refused.
            var altered = Array(token.utf8)
            altered[2] = altered[2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            await expectLedgerError(.notAuthorized) { _ = try ledger.streamPayload(token: String(decoding: altered, as: UTF8.self)) }
            await expectLedgerError(.notAuthorized) { _ = try ledger.streamPayload(token: "") }
            await expectLedgerError(.notAuthorized) { _ = try ledger.streamPayload(token: token + String(repeating: "A", count: 300)) }
            await expectLedgerError(.notFound) {
                _ = try ledger.streamPayload(token: ledger.streamPayloadToken(sequence: 1_000_000, bulk: false, expires: expires))
            }
            clock.advance(seconds: 61)
            await expectLedgerError(.notAuthorized) { _ = try ledger.streamPayload(token: token) }
        }
    }
}
