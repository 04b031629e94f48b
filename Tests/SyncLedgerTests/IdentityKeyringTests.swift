import Foundation
import Testing
@testable import SyncLedger
import SyncLedgerTestSupport

/// A cluster's OpenID signing keys: every node derives the same key of each generation from the
/// cluster secret, so a token one node signed verifies on another and every node serves the
/// same JWKS; a rotation keeps the previous key during the overlap and only then.
@Suite struct IdentityKeyringTests {
    let clock = TestClock()

    func options(secret: String) -> LedgerOptions {
        var options = LedgerOptions()
        options.clock = clock.read
        options.identityKeyring = IdentityKeyring(seed: ClusterKeys(secret: secret).identitySeed)
        return options
    }

    func kids(_ ledger: Ledger) throws -> [String] {
        try ((ledger.openIdKeys()["keys"] as? [[String: Any]]) ?? []).compactMap { $0["kid"] as? String }
    }

    func jwks(_ ledger: Ledger) throws -> Data {
        try JSONSerialization.data(withJSONObject: try ledger.openIdKeys(), options: [.sortedKeys])
    }

    @Test func twoNodesOfOneClusterShareTheKeyAndAnotherClusterDoesNot() async throws {
        try await withLedger(options(secret: "cluster-secret-0123456789")) { a in
            try await withLedger(options(secret: "cluster-secret-0123456789")) { b in
                try await withLedger(options(secret: "another-secret-0123456789")) { other in
                    let pool = try IdentityPoolID("us-east-1:00000000-0000-0000-0000-000000000001")
                    let token = try await a.openIdToken(pool: pool, identity: "us-east-1:x", logins: [], duration: .seconds(600))
                    #expect(try jwks(a) == jwks(b))
                    #expect(try kids(a).count == 1 && kids(a)[0].hasPrefix("g1-"))
                    #expect(try await b.verifyOpenIdToken(token)?.identity == "us-east-1:x")
                    #expect(try await other.verifyOpenIdToken(token) == nil)
                    #expect(try jwks(other) != jwks(a))
                    // A changed byte of the signed part is refused.
                    var bytes = Array(token.utf8)
                    let i = token.firstIndex(of: ".").map { token.utf8.distance(from: token.utf8.startIndex, to: $0) + 3 }!
                    bytes[i] = bytes[i] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
                    #expect(try await b.verifyOpenIdToken(String(decoding: bytes, as: UTF8.self)) == nil)
                }
            }
        }
    }

    @Test func aRotationKeepsThePreviousKeyDuringTheOverlapOnly() async throws {
        try await withLedger(options(secret: "cluster-secret-0123456789")) { a in
            try await withLedger(options(secret: "cluster-secret-0123456789")) { b in
                let pool = try IdentityPoolID("us-east-1:00000000-0000-0000-0000-000000000001")
                let old = try await a.openIdToken(pool: pool, identity: "us-east-1:x", logins: [], duration: .seconds(86_400))
                let rotated = IdentityKeyGeneration.first.rotated(at: clock.read(), overlap: .seconds(3600))
                // Node a has seen the rotation; node b not yet: b accepts the next generation's token.
                a.options.identityKeyring!.set(rotated)
                let new = try await a.openIdToken(pool: pool, identity: "us-east-1:y", logins: [], duration: .seconds(600))
                #expect(try await b.verifyOpenIdToken(new)?.identity == "us-east-1:y")
                b.options.identityKeyring!.set(rotated)
                #expect(try kids(a).map { $0.prefix(3) } == ["g2-", "g1-"])
                #expect(try jwks(a) == jwks(b))
                #expect(try await b.verifyOpenIdToken(old)?.identity == "us-east-1:x", "the previous key verifies during the overlap")
                clock.advance(seconds: 3601)
                #expect(try kids(a).map { $0.prefix(3) } == ["g2-"])
                #expect(try await b.verifyOpenIdToken(old) == nil, "not after it")
                #expect(try await b.verifyOpenIdToken(new) == nil, "expired after 600 s")
                let fresh = try await a.openIdToken(pool: pool, identity: "us-east-1:z", logins: [], duration: .seconds(600))
                #expect(try await b.verifyOpenIdToken(fresh)?.identity == "us-east-1:z")
            }
        }
    }

    @Test func aKidOfAGenerationNotInForceIsRefused() throws {
        let keyring = IdentityKeyring(seed: ClusterKeys(secret: "cluster-secret-0123456789").identitySeed,
                                      generation: IdentityKeyGeneration(current: 5))
        let now = clock.read()
        #expect(keyring.verifying(kid: keyring.keyID(5), at: now) != nil)
        #expect(keyring.verifying(kid: keyring.keyID(6), at: now) != nil, "the next generation: a node that saw the rotation first")
        for kid in [keyring.keyID(4), keyring.keyID(7), keyring.keyID(1), "g5-0000000000000000", "g5", "5-" + keyring.keyID(5), ""] {
            #expect(keyring.verifying(kid: kid, at: now) == nil, "\(kid)")
        }
    }
}
