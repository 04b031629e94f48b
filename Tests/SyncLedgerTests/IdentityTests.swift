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
            let issued = try await ledger.credentialsForIdentity(pool: poolID, id: identity.id, lifetime: .seconds(60))
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

    /// ListIdentities pages by seeking to the token's identity: every identity once, in id
    /// order; a run of disabled identities longer than a page's reading bound ends the page
    /// early, with a token; tokens of another pool or altered are refused.
    @Test func identityPagesSeekAndBoundWhatTheyRead() async throws {
        var options = LedgerOptions()
        options.durable = false
        try await withLedger(options) { ledger in
            func makePool(_ name: String) async throws -> IdentityPoolID {
                try IdentityPoolID(try await ledger.createIdentityPool(region: "us-east-1", name: name, allowUnauthenticatedIdentities: true,
                                                                       developerProviderName: nil, supportedLoginProviders: [:], caller: "admin").id)
            }
            let pool = try await makePool("A")
            let other = try await makePool("B")
            _ = try await ledger.newUnauthenticatedIdentity(pool: other)
            let bound = Ledger.identitiesPageScanLimit
            var made: [String] = []
            for _ in 0..<(bound + 3) { made.append(try await ledger.newUnauthenticatedIdentity(pool: pool).id) }
            made.sort()
            func all(hideDisabled: Bool, pageSize: Int) throws -> (ids: [String], pages: [Int]) {
                var ids: [String] = [], pages: [Int] = [], token: String?
                repeat {
                    let page = try ledger.identities(pool: pool, maxResults: pageSize, nextToken: token, hideDisabled: hideDisabled)
                    ids += page.identities.map(\.id)
                    pages.append(page.identities.count)
                    token = page.nextToken
                } while token != nil
                return (ids, pages)
            }
            let listed = try all(hideDisabled: false, pageSize: 60)
            #expect(listed.ids == made)
            #expect(listed.pages.dropLast().allSatisfy { $0 == 60 })
            // Disable all but the last two: a hidden run longer than what one page reads.
            for id in made.dropLast(2) { try await ledger.disableIdentity(pool: pool, identity: id, reason: "test", caller: "admin") }
            let shown = try all(hideDisabled: true, pageSize: 60)
            #expect(shown.ids == Array(made.suffix(2)))
            #expect(shown.pages.first == 0 && shown.pages.count == 2, "the first page ends after \(bound) reads, with a token")
            // Tokens: another pool's, an altered one, another call's.
            let token = try #require(try ledger.identities(pool: pool, maxResults: 5, nextToken: nil).nextToken)
            let otherError = #expect(throws: LedgerError.self) { _ = try ledger.identities(pool: other, maxResults: 5, nextToken: token) }
            #expect(otherError?.code == .invalidParameter && otherError?.message.contains("another identity pool") == true)
            var altered = Array(token.utf8)
            altered[3] = altered[3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            let alteredError = #expect(throws: LedgerError.self) { _ = try ledger.identities(pool: pool, maxResults: 5, nextToken: String(decoding: altered, as: UTF8.self)) }
            #expect(alteredError?.code == .invalidParameter)
            let poolsToken = try #require(try ledger.identityPools(maxResults: 1, nextToken: nil).nextToken)
            #expect(throws: LedgerError.self) { _ = try ledger.identities(pool: pool, maxResults: 5, nextToken: poolsToken) }
            // ListIdentityPools' and ListIdentityPoolUsage's tokens are kinds of their own: neither opens the other.
            await #expect(throws: LedgerError.self) { _ = try await ledger.listPools(maxResults: 1, nextToken: poolsToken) }
            if let usageToken = try await ledger.listPools(maxResults: 1).nextToken {
                #expect(throws: LedgerError.self) { _ = try ledger.identityPools(maxResults: 1, nextToken: usageToken) }
            }
            // Identity pools, one a page, each once.
            var pools: [String] = [], next: String? = nil
            repeat {
                let page = try ledger.identityPools(maxResults: 1, nextToken: next)
                pools += page.pools.map(\.id)
                next = page.nextToken
            } while next != nil
            #expect(pools == [pool.rawValue, other.rawValue].sorted())
        }
    }
}
