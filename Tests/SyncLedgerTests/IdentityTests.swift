import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct IdentityTests {
    @Test func temporaryCredentialsWorkForTheirIdentityUntilTheyExpire() async throws {
        let clock = TestClock()
        var options = LedgerOptions()
        options.clock = clock.read
        try await withLedger(options) { ledger in
            let pool = try await ledger.createIdentityPool(region: "us-east-1", name: "App", allowUnauthenticatedIdentities: true,
                                                           developerProviderName: nil, supportedLoginProviders: [:], caller: "admin")
            let poolID = try IdentityPoolID(pool.id)
            let identity = try await ledger.newUnauthenticatedIdentity(pool: poolID)
            #expect(try ledger.poolOfIdentity(identity.id) == poolID)
            let issued = try ledger.credentialsForIdentity(pool: poolID, id: identity.id, lifetime: .seconds(60))
            let credential = try #require(try ledger.temporaryCredential(accessKeyID: issued.accessKeyID, sessionToken: issued.sessionToken))
            #expect(credential.secretAccessKey == issued.secretKey && credential.scope == .identity(pool: pool.id, identity: identity.id))
            #expect(credential.expires == issued.expiration)
            // Another key with this token, or no token: nothing.
            #expect(try ledger.temporaryCredential(accessKeyID: "ASIAAAAAAAAAAAAAAAAA", sessionToken: issued.sessionToken) == nil)
            #expect(try ledger.temporaryCredential(accessKeyID: issued.accessKeyID, sessionToken: nil) == nil)
            clock.advance(seconds: 61)
            #expect(try ledger.temporaryCredential(accessKeyID: issued.accessKeyID, sessionToken: issued.sessionToken) == nil, "expired")
            // The pool's own limit and switch.
            _ = try await ledger.updateIdentityPool(IdentityPoolDefinition(id: pool.id, name: "App", allowUnauthenticatedIdentities: false, created: .now), caller: "admin")
            await expectLedgerError(.notAuthorized) { _ = try await ledger.newUnauthenticatedIdentity(pool: poolID) }
            await expectLedgerError(.notFound) { _ = try await ledger.newUnauthenticatedIdentity(pool: try IdentityPoolID("us-east-1:0")) }
            // Identities are log entries of the pool's system stream, with their index.
            #expect(try ledger.entries(in: Ledger.identitiesStream(poolID)).count == 1)
            #expect(try ledger.verify().isValid)
        }
    }
}
