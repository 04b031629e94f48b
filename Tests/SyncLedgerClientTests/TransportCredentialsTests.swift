import Foundation
@testable import SyncLedgerClient
import Synchronization
import Testing

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let now = Mutex(Date())
    func read() -> Date { now.withLock { $0 } }
    func advance(by seconds: TimeInterval) { now.withLock { $0 += seconds } }
}

/// Identity changes a provider reported.
final class ChangeLog: Sendable {
    private let changes = Mutex<[(String, String)]>([])
    func record(_ old: String, _ new: String) { changes.withLock { $0.append((old, new)) } }
    var all: [(String, String)] { changes.withLock { $0 } }
}

/// The credential providers; CognitoIdentityCredentials against the real server.
final class TransportCredentialsTests {
    let server: TestServer

    init() throws { server = try TestServer() }
    deinit { server.stop() }

    private func provider(pool: String, identity: String? = nil, clock: TestClock? = nil, changes: ChangeLog? = nil,
                          logins: @escaping CognitoIdentityCredentials.LoginsProvider = { [:] }) -> CognitoIdentityCredentials {
        CognitoIdentityCredentials(endpoint: server.url, pool: pool, identityID: identity, logins: logins,
                                   onIdentityChange: changes.map { log in { @Sendable old, new in log.record(old, new) } },
                                   httpClient: CognitoSyncTransport.defaultHTTPClient, timeout: .seconds(30), now: { clock?.read() ?? Date() })
    }

    @Test func staticAndEnvironmentCredentials() async throws {
        let fixed = StaticCredentials(accessKeyID: "AKID", secretAccessKey: "s3cret", identityID: "us-east-1:x")
        #expect(try await fixed.credentials().secretAccessKey == "s3cret")
        #expect(try await fixed.identityID() == "us-east-1:x")
        #expect(!"\(try await fixed.credentials())".contains("s3cret"), "a printed credential hides its secret")

        let read = try EnvironmentCredentials.fromEnvironment(identityID: "us-east-1:y", ["AWS_ACCESS_KEY_ID": "AKID2", "AWS_SECRET_ACCESS_KEY": "sec", "AWS_SESSION_TOKEN": "tok"])
        #expect(try await read.credentials() == AWSCredentials(accessKeyID: "AKID2", secretAccessKey: "sec", sessionToken: "tok"))
        #expect(try await read.identityID() == "us-east-1:y")
        let error = #expect(throws: SyncClientError.self) {
            try EnvironmentCredentials.fromEnvironment(identityID: "us-east-1:y", ["AWS_ACCESS_KEY_ID": "AKID2"])
        }
        #expect(error?.kind == "notAuthorized" && error?.description.contains("AWS_SECRET_ACCESS_KEY") == true)
    }

    @Test func getsAnIdentityAndCredentialsThatReachItsDatasets() async throws {
        let pool = try await server.createIdentityPool()
        let credentials = provider(pool: pool)
        let identity = try await credentials.identityID()
        #expect(identity.hasPrefix("us-east-1:"))
        let aws = try await credentials.credentials()
        #expect(aws.accessKeyID.hasPrefix("ASIA") && aws.sessionToken != nil)
        #expect(aws.expiration.map { $0.timeIntervalSinceNow > 3000 } == true)

        let transport = CognitoSyncTransport(endpoint: server.url, pool: pool, credentials: credentials)
        #expect(try await transport.identityID() == identity)
        let pull = try await transport.listUpdates(identity: identity, dataset: "prefs", after: 0)
        _ = try await transport.putRecords(identity: identity, dataset: "prefs", patches: newRecords(["a": "1"]), sessionToken: pull.syncSessionToken, deviceID: nil)
        #expect(try await transport.listUpdates(identity: identity, dataset: "prefs", after: 0).records.map(\.value) == ["1"])
        // The same server sees them under the admin's credential too.
        let admin = server.transport(pool: pool, identity: identity)
        #expect(try await admin.describeDataset(identity: identity, dataset: "prefs")?.records == 1)
    }

    @Test func refreshesWhenLessThanFiveMinutesRemain() async throws {
        let pool = try await server.createIdentityPool()
        let clock = TestClock()
        let credentials = provider(pool: pool, clock: clock)
        let first = try await credentials.credentials()
        let expiration = try #require(first.expiration)
        #expect(try await credentials.credentials() == first, "fresh credentials are reused")
        clock.advance(by: expiration.timeIntervalSince(clock.read()) - 301)
        #expect(try await credentials.credentials() == first, "5 min 1 s before the expiration they are still used")
        clock.advance(by: 2)
        let second = try await credentials.credentials()
        #expect(second.accessKeyID != first.accessKeyID, "4 min 59 s before the expiration they are refreshed")

        // Concurrent callers share one refresh: every one gets the same new credentials.
        clock.advance(by: 3600)
        let keys = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<16 { group.addTask { try await credentials.credentials().accessKeyID } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(keys.count == 1 && !keys.contains(second.accessKeyID))
        credentials.invalidate()
        #expect(try await credentials.credentials().accessKeyID != keys.first)
    }

    @Test func concurrentFirstCallersShareOneGetId() async throws {
        let pool = try await server.createIdentityPool()
        let credentials = provider(pool: pool)
        // Each answer with its caller's number: the group yields them in the order they finish.
        let answers = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for i in 0..<16 {
                group.addTask { (i, i.isMultiple(of: 2) ? try await credentials.identityID() : try await credentials.credentials().accessKeyID) }
            }
            return try await group.reduce(into: [(Int, String)]()) { $0.append($1) }
        }
        #expect(answers.count == 16)
        #expect(Set(answers.filter { $0.0.isMultiple(of: 2) }.map(\.1)).count == 1, "one identity for every caller")
        #expect(Set(answers.filter { !$0.0.isMultiple(of: 2) }.map(\.1)).count == 1, "one set of credentials for every caller")
        let listed = try await server.identityCall("ListIdentities", ["IdentityPoolId": pool, "MaxResults": 60])
        #expect((listed["Identities"] as? [Any])?.count == 1, "one GetId for all the callers")
    }

    @Test func anUnknownCachedIdentityIsReplacedOnce() async throws {
        let pool = try await server.createIdentityPool()
        let changes = ChangeLog()
        let stale = newID()
        let credentials = provider(pool: pool, identity: stale, changes: changes)
        _ = try await credentials.credentials()
        let identity = try await credentials.identityID()
        #expect(identity != stale)
        #expect(changes.all.map { [$0.0, $0.1] } == [[stale, identity]])

        let unknownPool = provider(pool: "us-east-1:\(UUID().uuidString.lowercased())")
        let error = await #expect(throws: SyncClientError.self) { try await unknownPool.credentials() }
        #expect(error?.kind == "notFound", "\(String(describing: error))")
    }

    @Test func aMergedIdentityIsReplacedByTheSurvivorAndReported() async throws {
        let provider = "login.client.test"
        let pool = try await server.createIdentityPool(developerProvider: provider)
        let (a, _) = try await server.developerToken(pool: pool, provider: provider, user: "u1")
        let (b, _) = try await server.developerToken(pool: pool, provider: provider, user: "u2")
        #expect(a != b)
        let merged = try await server.identityCall("MergeDeveloperIdentities", ["IdentityPoolId": pool, "DeveloperProviderName": provider,
                                                                                 "SourceUserIdentifier": "u1", "DestinationUserIdentifier": "u2"])
        #expect(merged["IdentityId"] as? String == b)
        // The app's backend signs u1 in again: its token is now for the survivor.
        let (afterMerge, token) = try await server.developerToken(pool: pool, provider: provider, user: "u1")
        #expect(afterMerge == b)

        // The server refuses credentials for the merged-away identity, even with the token.
        let refused = await #expect(throws: SyncClientError.self) {
            try await server.identityCall("GetCredentialsForIdentity", ["IdentityId": a, "Logins": ["cognito-identity.amazonaws.com": token]], signed: false)
        }
        #expect(refused?.kind == "notAuthorized", "\(String(describing: refused))")

        let changes = ChangeLog()
        let credentials = self.provider(pool: pool, identity: a, changes: changes, logins: { ["cognito-identity.amazonaws.com": token] })
        let aws = try await credentials.credentials()
        #expect(try await credentials.identityID() == b)
        #expect(changes.all.map { [$0.0, $0.1] } == [[a, b]])
        let transport = CognitoSyncTransport(endpoint: server.url, pool: pool, credentials: StaticCredentials(aws, identityID: b))
        #expect(try await transport.listDatasets(identity: b).isEmpty)

        // Without logins a disabled identity is not silently replaced.
        let anonymous = self.provider(pool: pool, identity: a)
        let error = await #expect(throws: SyncClientError.self) { try await anonymous.credentials() }
        #expect(error?.kind == "notAuthorized", "\(String(describing: error))")
    }
}
