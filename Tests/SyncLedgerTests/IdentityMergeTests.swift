import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// Links and merges of identities (issue 11, part 2), on the ledger's API with logins taken as
/// verified (token verification has its own tests).
@Suite struct IdentityMergeTests {
    func pool(_ ledger: Ledger, unauthenticated: Bool = true) async throws -> IdentityPoolID {
        let pool = try await ledger.createIdentityPool(region: "us-east-1", name: "App", allowUnauthenticatedIdentities: unauthenticated,
                                                       developerProviderName: "login.app", supportedLoginProviders: [:], caller: "admin")
        return try IdentityPoolID(pool.id)
    }

    func stream(_ pool: IdentityPoolID, _ identity: String, _ dataset: String) throws -> StreamName {
        try StreamName(pool: pool.rawValue, identity: identity, dataset: dataset)
    }

    @Test func aLoginOfAnotherIdentityMergesTheNamedOneIntoIt() async throws {
        try await withLedger { ledger in
            let pool = try await pool(ledger)
            let google = Login(provider: "accounts.example.com", subject: "alice")
            // Alice signed in on her phone: an authenticated identity with data.
            let phone = try await ledger.signIn(pool: pool, identity: nil, proven: nil, logins: [google], caller: "t")
            #expect(phone.created && phone.merge == nil)
            try await ledger.put(try stream(pool, phone.identity, "settings"), ["theme": "dark", "font": "big"])
            // On a tablet she used the app signed out first: an unauthenticated identity with data.
            let tablet = try await ledger.newUnauthenticatedIdentity(pool: pool)
            try await ledger.put(try stream(pool, tablet.id, "settings"), ["theme": "light", "lang": "fr"])
            try await ledger.put(try stream(pool, tablet.id, "drafts"), ["d1": "hello"])
            // Signing in on the tablet merges the tablet's identity into the phone's.
            let result = try await ledger.signIn(pool: pool, identity: tablet.id, proven: nil, logins: [google], caller: "t")
            #expect(result.identity == phone.identity && !result.created)
            let merge = try #require(result.merge)
            #expect(merge.merged == [tablet.id])
            #expect(Set(merge.datasets.map(\.child)) == ["settings.\(tablet.id)", "drafts.\(tablet.id)"])
            // The copies hold the records; the survivor's own dataset is untouched.
            #expect(try ledger.values(try stream(pool, phone.identity, "settings")) == ["theme": "dark", "font": "big"])
            #expect(try ledger.values(try stream(pool, phone.identity, "settings.\(tablet.id)")) == ["theme": "light", "lang": "fr"])
            #expect(try ledger.values(try stream(pool, phone.identity, "drafts.\(tablet.id)")) == ["d1": "hello"])
            // The source keeps its history, and is disabled.
            #expect(try ledger.values(try stream(pool, tablet.id, "settings")) == ["theme": "light", "lang": "fr"])
            let disabled = try #require(try ledger.identity(pool: pool, id: tablet.id))
            #expect(!disabled.isEnabled && disabled.mergedInto == phone.identity)
            await expectLedgerError(.notAuthorized) { _ = try await ledger.credentialsForIdentity(pool: pool, id: tablet.id) }
            // ListRecords of the root reports the copies; of a root the survivor never had, too.
            #expect(try ledger.listRecords(try stream(pool, phone.identity, "settings")).mergedDatasetNames == ["settings.\(tablet.id)"])
            let drafts = try ledger.listRecords(try stream(pool, phone.identity, "drafts"))
            #expect(drafts.mergedDatasetNames == ["drafts.\(tablet.id)"] && !drafts.datasetExists)
            // A device that pushes every key with SyncCount 0 after the switch gets a conflict.
            let token = try ledger.listRecords(try stream(pool, phone.identity, "settings")).syncSessionToken
            let error = await expectLedgerError(.conflict) {
                _ = try await ledger.updateRecords(try stream(pool, phone.identity, "settings"), patches: [
                    RecordPatch(op: .replace, key: "theme", value: "light", syncCount: 0),
                    RecordPatch(op: .replace, key: "lang", value: "fr", syncCount: 0),
                ], sessionToken: token)
            }
            #expect(error?.conflicts.map(\.key) == ["theme"])
            #expect(try ledger.values(try stream(pool, phone.identity, "settings")) == ["theme": "dark", "font": "big"])
            // Deleting the copy ends the report; so does deleting the root.
            _ = try await ledger.deleteDataset(try stream(pool, phone.identity, "drafts.\(tablet.id)"))
            #expect(try ledger.listRecords(try stream(pool, phone.identity, "drafts")).mergedDatasetNames == [])
            _ = try await ledger.deleteDataset(try stream(pool, phone.identity, "settings"))
            try await ledger.put(try stream(pool, phone.identity, "settings"), ["theme": "blue"])
            #expect(try ledger.listRecords(try stream(pool, phone.identity, "settings")).mergedDatasetNames == [])
            #expect(try ledger.merges(pool: pool, identity: phone.identity).count == 2, "the merge records stay")
            #expect(try ledger.verify().isValid)
            // Views rebuilt from the log give the same answers.
            try await ledger.rebuildViews()
            #expect(try ledger.values(try stream(pool, phone.identity, "settings.\(tablet.id)")) == ["theme": "light", "lang": "fr"])
        }
    }

    @Test func linkingConflictsAndLimitsWriteNothing() async throws {
        try await withLedger { ledger in
            let pool = try await pool(ledger)
            let alice = Login(provider: "accounts.example.com", subject: "alice")
            let bob = Login(provider: "accounts.example.com", subject: "bob")
            let a = try await ledger.signIn(pool: pool, identity: nil, proven: nil, logins: [alice], caller: "t").identity
            let entries = try ledger.entries(in: Ledger.identitiesStream(pool)).count
            // A returning user changes nothing, and writes nothing.
            #expect(try await ledger.signIn(pool: pool, identity: nil, proven: nil, logins: [alice], caller: "t").identity == a)
            #expect(try await ledger.signIn(pool: pool, identity: a, proven: nil, logins: [alice], caller: "t").identity == a)
            #expect(try ledger.entries(in: Ledger.identitiesStream(pool)).count == entries)
            // A second user of the same provider on one identity: ResourceConflict.
            await expectLedgerError(.notAuthorized) { _ = try await ledger.signIn(pool: pool, identity: a, proven: nil, logins: [bob], caller: "t") }
            await expectLedgerError(.conflict) { _ = try await ledger.signIn(pool: pool, identity: nil, proven: nil, logins: [alice, bob], caller: "t") }
            await expectLedgerError(.conflict) { _ = try await ledger.signIn(pool: pool, identity: a, proven: a, logins: [bob], caller: "t") }
            #expect(try ledger.entries(in: Ledger.identitiesStream(pool)).count == entries)
            // Two identities with different users of one provider cannot be merged.
            let b = try await ledger.signIn(pool: pool, identity: nil, proven: nil, logins: [bob], caller: "t").identity
            await expectLedgerError(.conflict) { _ = try await ledger.mergeIdentities(pool: pool, source: a, into: b, caller: "t") }
            await expectLedgerError(.conflict) { _ = try await ledger.mergeIdentities(pool: pool, source: a, into: a, caller: "t") }
            await expectLedgerError(.notFound) { _ = try await ledger.mergeIdentities(pool: pool, source: "us-east-1:00000000-0000-0000-0000-000000000000", into: a, caller: "t") }
            // An authenticated identity named without a login of its own is refused.
            await expectLedgerError(.notAuthorized) {
                _ = try await ledger.signIn(pool: pool, identity: a, proven: nil, logins: [Login(provider: "other.example.com", subject: "x")], caller: "t")
            }
            #expect(try ledger.identity(pool: pool, id: a)?.isEnabled == true)
        }
    }

    @Test func developerMergesCarryEveryUserAndPassTheDatasetLimit() async throws {
        var options = LedgerOptions()
        options.limits.maxDatasetsPerIdentity = 3
        try await withLedger(options) { ledger in
            let pool = try await pool(ledger)
            let (a, _) = try await ledger.developerIdentityToken(pool: pool, identity: nil, provider: "login.app", user: "u1", duration: .seconds(60))
            let (b, _) = try await ledger.developerIdentityToken(pool: pool, identity: nil, provider: "login.app", user: "u2", duration: .seconds(60))
            for name in ["one", "two", "three"] {
                try await ledger.put(try stream(pool, a, name), ["k": "a"])
                try await ledger.put(try stream(pool, b, name), ["k": "b"])
            }
            #expect(try await ledger.mergeDeveloperIdentities(pool: pool, provider: "login.app", source: "u1", destination: "u2", caller: "t") == b)
            // Six datasets past a limit of three: they count, so no new one.
            #expect(try ledger.listDatasets(pool: pool, identity: try IdentityID(b)).datasets.count == 6)
            await expectLedgerError(.limitExceeded) { try await ledger.put(try stream(pool, b, "four"), ["k": "b"]) }
            #expect(try ledger.lookupDeveloperIdentity(pool: pool, identity: b, user: nil).users == ["u1", "u2"])
            #expect(try ledger.lookupDeveloperIdentity(pool: pool, identity: nil, user: "u1").identity == b)
            // The developer token of u1 now signs in as b.
            #expect(try await ledger.developerIdentityToken(pool: pool, identity: nil, provider: "login.app", user: "u1", duration: .seconds(60)).identity == b)
            await expectLedgerError(.invalidParameter) {
                _ = try await ledger.mergeDeveloperIdentities(pool: pool, provider: "other", source: "u1", destination: "u2", caller: "t")
            }
            await expectLedgerError(.notFound) {
                _ = try await ledger.mergeDeveloperIdentities(pool: pool, provider: "login.app", source: "nobody", destination: "u2", caller: "t")
            }
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func longDatasetNamesGetCopiesThatFitAndDiffer() {
        let source = "us-east-1:" + UUID().uuidString.lowercased()
        let a = Ledger.mergedDatasetName(String(repeating: "a", count: 120) + "x", source: source)
        let b = Ledger.mergedDatasetName(String(repeating: "a", count: 120) + "y", source: source)
        #expect(a.utf8.count == 128 && b.utf8.count == 128 && a != b && a.hasSuffix("." + source))
        #expect(Ledger.mergedDatasetName("short", source: source) == "short." + source)
        #expect((try? DatasetName(a)) != nil)
    }
}
