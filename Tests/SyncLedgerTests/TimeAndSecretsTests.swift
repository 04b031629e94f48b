import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

@Suite struct TimeTests {
    @Test func aClockStepBackDoesNotBackdateAStream() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let s = stream(), other = stream("other")
            try await ledger.put(s, ["a": "1"])
            let first = try #require(try ledger.entries(in: s).last).time
            clock.advance(seconds: -3600)  // the host's clock steps back an hour
            try await ledger.put(s, ["a": "2"])
            try await ledger.put(other, ["b": "1"])
            let second = try #require(try ledger.entries(in: s).last).time
            #expect(second == first, "clamped to its predecessor's time")
            #expect(try ledger.entries(in: other).last?.time == clock.read(), "a stream of its own keeps the clock")
            // verify holds (the pool's last-modified is the latest of its datasets') and replay by
            // time is exact.
            #expect(try ledger.verify().isValid)
            #expect(try ledger.dataset(s, asOf: first).liveRecords == ["a": "2"])
            let usage = try await ledger.poolUsage(s.pool)
            #expect(usage.lastModified == first)
        }
    }

    @Test func aBackdatedMergeIsRefused() async throws {
        let clock = TestClock()
        var deviceOptions = LedgerOptions()
        deviceOptions.clock = clock.read
        try await withLedger { server in
            try await withLedger(deviceOptions) { source in
                let s = stream()
                try await source.put(s, ["a": "1"])
                // A forged history: the second entry is older than the first.
                let segment = try #require(try source.streamSegment(s, after: 0))
                try await server.merge(segment)
                clock.advance(seconds: -10)
                // `source` clamps its own entries, so write the backdated one by hand.
                let body = LogEntry.encodeBody(offset: 2, time: clock.read(), author: "x", events: [.put(key: "a", value: "2", deviceModified: nil)])
                let forged = try await source.write { txn in
                    let head = try #require(try source.head(txn, s))
                    let hash = LogEntry.chainHash(previous: head.hash, stream: s, body: body)
                    let entry = LogEntry(stream: s, offset: 2, sequence: try source.nextSequence(txn), time: clock.read(), author: "x", events: [.put(key: "a", value: "2", deviceModified: nil)], hash: hash)
                    var view = try StoredDatasetView(txn: txn, schema: source.schema, stream: s, streamID: head.id)
                    try apply(entry, to: &view)
                    try source.store(txn, entry, body: body, streamID: head.id, newStream: false, view: view)
                    return true
                }
                #expect(forged)
                #expect(try source.verify().problem?.message.contains("time goes backwards") == true)
                let tail = try #require(try source.streamSegment(s, after: 1))
                await expectLedgerError(.invalidParameter) { try await server.merge(tail) }
                #expect(try server.describeDataset(s).syncCount == 1)
                // Within one segment too, into a ledger that has none of it: refused whole.
                try await withLedger { fresh in
                    let whole = try #require(try source.streamSegment(s, after: 0))
                    await expectLedgerError(.invalidParameter) { try await fresh.merge(whole) }
                    #expect(try fresh.streams().isEmpty, "nothing was applied")
                }
            }
        }
    }
}

extension TimeTests {
    @Test func aMigratedLedgerWithBackwardTimesStillVerifies() async throws {
        // Format 1 did not clamp: a clock step back left an entry older than its predecessor.
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        let dir = temporaryPath("legacy-times")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let s = stream()
        do {
            let ledger = try Ledger(directory: dir, options: options)
            defer { ledger.close() }
            try await ledger.put(s, ["a": "1"])
            clock.advance(seconds: -60)
            // What format 1 wrote: an entry 60 s older than its predecessor.
            try await ledger.write { txn in
                let head = try #require(try ledger.head(txn, s))
                let events: [Event] = [.put(key: "a", value: "2", deviceModified: nil)]
                let body = LogEntry.encodeBody(offset: 2, time: clock.read(), author: "old", events: events)
                let entry = LogEntry(stream: s, offset: 2, sequence: try ledger.nextSequence(txn), time: clock.read(), author: "old", events: events,
                                     hash: LogEntry.chainHash(previous: head.hash, stream: s, body: body))
                var view = try StoredDatasetView(txn: txn, schema: ledger.schema, stream: s, streamID: head.id)
                try apply(entry, to: &view)
                try ledger.store(txn, entry, body: body, streamID: head.id, newStream: false, view: view)
                try txn.put(ledger.schema.meta, key: Array("format".utf8), value: .bigEndian(1))
            }
            #expect(try ledger.verify().problem?.message.contains("time goes backwards") == true)
        }
        let migrated = try Ledger(directory: dir, options: options)
        defer { migrated.close() }
        let report = try migrated.verify()
        #expect(report.isValid, "entries written before the rule are exempt; the pool's last-modified has one definition: \(report)")
        clock.advance(seconds: 1)
        try await migrated.put(s, ["a": "3"])  // written now: clamped to its predecessor
        #expect(try migrated.verify().isValid)
    }
}

@Suite struct SecretsTests {
    private func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test func theDataDirectoryIsPrivateAndHoldsNoSecret() async throws {
        let dir = temporaryPath("private")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let credential = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
        do {
            let ledger = try Ledger(directory: dir)
            defer { ledger.close() }
            try ledger.secrets.store(credential)
            try await ledger.put(stream(), ["k": "v"])
            _ = try ledger.listRecords(stream())  // a session token: the token key exists
        }
        #expect(try mode(dir) == 0o700)
        #expect(try mode(dir + "/secrets") == 0o700)
        for file in ["data.mdb", "lock.mdb", "secrets/data.mdb", "secrets/lock.mdb"] {
            #expect(try mode(dir + "/" + file) == 0o600, "\(file)")
        }
        // The ledger's own file (what a backup or `export` copies) holds no secret.
        let data = try Data(contentsOf: URL(fileURLWithPath: dir + "/data.mdb"))
        #expect(data.range(of: Data(credential.secretAccessKey.utf8)) == nil)
        #expect(data.range(of: Data(credential.accessKeyID.utf8)) == nil)
        let secrets = try Data(contentsOf: URL(fileURLWithPath: dir + "/secrets/data.mdb"))
        #expect(secrets.range(of: Data(credential.secretAccessKey.utf8)) != nil)
    }

    @Test func aFormatOneDirectoryIsMigrated() async throws {
        let dir = temporaryPath("format1")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let credential = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
        let s = stream()
        var token = ""
        do {
            let ledger = try Ledger(directory: dir)
            defer { ledger.close() }
            try await ledger.put(s, ["a": "1", "b": nil])
            token = try ledger.listRecords(s).syncSessionToken
            // Make it look like format 1: secrets in the ledger's own file, no tombstone count,
            // no records-by-sync-count view.
            let key = try #require(try ledger.secrets.environment.read { txn in try txn.get(ledger.secrets.keys, key: Array("session-token-key".utf8)) })
            try await ledger.write { txn in
                try txn.put(ledger.schema.meta, key: Array("format".utf8), value: .bigEndian(1))
                try txn.put(ledger.schema.meta, key: Array("hmac-key".utf8), value: key)
                try txn.put(ledger.schema.legacyCredentials, key: Array(credential.accessKeyID.utf8), value: Array(Ledger.json(credential).utf8))
                try txn.removeAll(ledger.schema.recordsBySyncCount)
            }
        }
        try FileManager.default.removeItem(atPath: dir + "/secrets")
        let ledger = try Ledger(directory: dir)
        defer { ledger.close() }
        #expect(try ledger.secrets.credential(accessKeyID: credential.accessKeyID) == credential)
        let legacy = try ledger.read { txn in (try txn.get(ledger.schema.meta, key: Array("hmac-key".utf8)), try txn.count(ledger.schema.legacyCredentials)) }
        #expect(legacy.0 == nil && legacy.1 == 0, "the secrets left the ledger's file")
        // The token key moved with them: a session token issued before still works.
        _ = try await ledger.updateRecords(s, patches: [RecordPatch(op: .replace, key: "c", value: "3", syncCount: 0)], sessionToken: token)
        #expect(try ledger.verify().isValid, "the views were rebuilt")
        #expect(try ledger.allRecords(s, after: 0).records.map(\.key).sorted() == ["a", "b", "c"])
    }

    @Test func credentialsAreListedRevokedAndRotated() async throws {
        try await withLedger { ledger in
            let store = ledger.secrets
            let plain = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
            let temporary = Credential.generate(scope: .admin, withSessionToken: true)
            try store.store(plain)
            try store.store(temporary)
            #expect(temporary.expires != nil && plain.expires == nil)
            #expect(Set(try store.list().map(\.accessKeyID)) == [plain.accessKeyID, temporary.accessKeyID])
            let fresh = try store.rotate(accessKeyID: plain.accessKeyID)
            #expect(fresh.scope == plain.scope && fresh.accessKeyID != plain.accessKeyID)
            #expect(try store.credential(accessKeyID: plain.accessKeyID) == nil)
            let graced = try store.rotate(accessKeyID: fresh.accessKeyID, grace: .seconds(60))
            #expect(try store.credential(accessKeyID: fresh.accessKeyID)?.expires != nil, "the old key lasts its grace period")
            #expect(try store.credential(accessKeyID: graced.accessKeyID) != nil)
            try store.revoke(accessKeyID: temporary.accessKeyID)
            #expect(throws: LedgerError.self) { try store.revoke(accessKeyID: temporary.accessKeyID) }
            let (admin, created) = try store.generatedAdminCredential()
            let generated = try store.generatedAdminAccessKeyID()
            #expect(created && generated == admin.accessKeyID)
            #expect(throws: LedgerError.self) { try store.store(Credential(accessKeyID: "short", secretAccessKey: "x", scope: .admin)) }
        }
    }

    @Test func aMistypedDirectoryIsNotALedger() throws {
        var options = LedgerOptions()
        options.createIfMissing = false
        let missing = temporaryPath("missing")
        #expect(throws: LedgerError.self) { _ = try Ledger(directory: missing, options: options) }
        #expect(!FileManager.default.fileExists(atPath: missing), "nothing was created")
    }
}

@Suite struct DictionaryMissTests {
    @Test func anUnknownDictionaryIsLookedUpOnceUntilOneArrives() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["a": "1"])
            #expect(try ledger.dictionary(id: 4242) == nil)
            #expect(ledger.dictionaries.isKnownMiss(4242))
            // A change of any pool's configuration forgets the misses.
            try await ledger.setCognitoEvents(s.pool, [:], caller: "admin")
            #expect(!ledger.dictionaries.isKnownMiss(4242))
        }
    }
}
