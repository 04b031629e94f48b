import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

/// A request signed by botocore 1.43 (SigV4Auth, service cognito-sync, us-east-1) at
/// 20261122T094717Z with AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY.
private let botocoreBody = Array(#"{"SyncSessionToken":"t","RecordPatches":[{"Op":"replace","Key":"k","Value":"v","SyncCount":0}]}"#.utf8)
private let botocoreRequest = WireRequest(
    method: "POST",
    rawPath: "/identitypools/us-east-1%3A0000-aaaa/identities/us-east-1%3A1111-bbbb/datasets/settings",
    rawQuery: "x=a%20b&a=1",
    headers: [
        ("Content-Type", "application/json"),
        ("host", "127.0.0.1:8080"),
        ("X-Amz-Date", "20261122T094717Z"),
        ("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/cognito-sync/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=58ddd80da4fa644f1930df774a170477228c88d8aefb1c97d716a3e908dd05a3"),
    ],
    body: botocoreBody)

private func authenticator(_ ledger: Ledger, at amzDate: String = "20261122T094717Z") -> Authenticator {
    let now = SigV4.parseAmzDate(amzDate)!
    var a = Authenticator(ledger: ledger, configuredAdmin: Credential(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", scope: .admin))
    a.now = { now }
    return a
}

private func expectNotAuthorized(_ body: () throws -> Void) {
    do {
        try body()
        Issue.record("accepted a request that should be refused")
    } catch let error as WireError {
        #expect(error.type == "NotAuthorizedException" && error.status == 403)
    } catch {
        Issue.record("unexpected \(error)")
    }
}

@Suite struct SigV4Tests {
    @Test func acceptsBotocoresSignature() async throws {
        try await withLedger { ledger in
            let auth = authenticator(ledger)
            let credential = try auth.authenticate(botocoreRequest, queryPairs: SigV4.queryPairs(botocoreRequest.rawQuery)!)
            #expect(credential.accessKeyID == "AKIDEXAMPLE")
        }
    }

    @Test func refusesAnyChange() async throws {
        try await withLedger { ledger in
            let auth = authenticator(ledger)
            var body = botocoreRequest
            body.body[body.body.count - 3] = UInt8(ascii: "1")
            expectNotAuthorized { _ = try auth.authenticate(body, queryPairs: SigV4.queryPairs(body.rawQuery)!) }
            var path = botocoreRequest
            path.rawPath = path.rawPath.replacingOccurrences(of: "settings", with: "other")
            expectNotAuthorized { _ = try auth.authenticate(path, queryPairs: SigV4.queryPairs(path.rawQuery)!) }
            var query = botocoreRequest
            query.rawQuery = "x=a%20c&a=1"
            expectNotAuthorized { _ = try auth.authenticate(query, queryPairs: SigV4.queryPairs(query.rawQuery)!) }
            var method = botocoreRequest
            method.method = "DELETE"
            expectNotAuthorized { _ = try auth.authenticate(method, queryPairs: SigV4.queryPairs(method.rawQuery)!) }
            // 20 minutes later the same signature is too old.
            let late = authenticator(ledger, at: "20261122T100717Z")
            expectNotAuthorized { _ = try late.authenticate(botocoreRequest, queryPairs: SigV4.queryPairs(botocoreRequest.rawQuery)!) }
            // Unsigned.
            var unsigned = botocoreRequest
            unsigned.headers.removeAll { $0.0 == "Authorization" }
            expectNotAuthorized { _ = try auth.authenticate(unsigned, queryPairs: []) }
        }
    }

    @Test func signerAndVerifierAgreeAndTokensAreChecked() async throws {
        try await withLedger { ledger in
            let identity = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"), withSessionToken: true)
            try ledger.secrets.store(identity)
            let now = Date()
            var auth = Authenticator(ledger: ledger, configuredAdmin: Credential.generate(scope: .admin))
            auth.now = { now }
            func request(_ signer: SigV4Signer) -> WireRequest {
                let body = Array("{}".utf8)
                let headers = signer.sign(method: "POST", host: "h:1", rawPath: "/identitypools/test%3A0/identity/test%3A1/device", rawQuery: nil, body: body, date: now)
                return WireRequest(method: "POST", rawPath: "/identitypools/test%3A0/identity/test%3A1/device", rawQuery: nil, headers: [("host", "h:1")] + headers, body: body)
            }
            let good = SigV4Signer(accessKeyID: identity.accessKeyID, secretAccessKey: identity.secretAccessKey, sessionToken: identity.sessionToken)
            #expect(try auth.authenticate(request(good), queryPairs: []).accessKeyID == identity.accessKeyID)
            let noToken = SigV4Signer(accessKeyID: identity.accessKeyID, secretAccessKey: identity.secretAccessKey)
            expectNotAuthorized { _ = try auth.authenticate(request(noToken), queryPairs: []) }
            let wrongToken = SigV4Signer(accessKeyID: identity.accessKeyID, secretAccessKey: identity.secretAccessKey, sessionToken: "nope")
            expectNotAuthorized { _ = try auth.authenticate(request(wrongToken), queryPairs: []) }
            let wrongSecret = SigV4Signer(accessKeyID: identity.accessKeyID, secretAccessKey: "x", sessionToken: identity.sessionToken)
            expectNotAuthorized { _ = try auth.authenticate(request(wrongSecret), queryPairs: []) }
            let unknown = SigV4Signer(accessKeyID: "AKIAUNKNOWN", secretAccessKey: "x")
            expectNotAuthorized { _ = try auth.authenticate(request(unknown), queryPairs: []) }
            let otherService = SigV4Signer(accessKeyID: identity.accessKeyID, secretAccessKey: identity.secretAccessKey, sessionToken: identity.sessionToken, service: "s3")
            expectNotAuthorized { _ = try auth.authenticate(request(otherService), queryPairs: []) }
        }
    }
}

/// Expects the refusal every credential failure shares (unknown key, wrong secret, wrong token).
private func expectMismatch(_ body: () throws -> Void) {
    do {
        try body()
        Issue.record("accepted a request that should be refused")
    } catch let error as WireError {
        #expect(error.status == 403 && error.message == Authenticator.signatureMismatch.message, "\(error.message)")
    } catch {
        Issue.record("unexpected \(error)")
    }
}

@Suite struct AuthenticationAbuseTests {
    private func signed(_ signer: SigV4Signer, method: String = "POST", now: Date) -> WireRequest {
        let body = Array("{}".utf8)
        let path = "/identitypools/test%3A0/identity/test%3A1/device"
        let headers = signer.sign(method: method, host: "h:1", rawPath: path, rawQuery: nil, body: body, date: now)
        return WireRequest(method: method, rawPath: path, rawQuery: nil, headers: [("host", "h:1")] + headers, body: body)
    }

    @Test func anUnknownKeyAndAWrongSecretGetTheSameAnswer() async throws {
        try await withLedger { ledger in
            let known = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"), withSessionToken: true)
            try ledger.secrets.store(known)
            let now = Date()
            var auth = Authenticator(ledger: ledger, configuredAdmin: nil)
            auth.now = { now }
            expectMismatch { _ = try auth.authenticate(signed(SigV4Signer(accessKeyID: "AKIAUNKNOWNKEY000000", secretAccessKey: "x"), now: now), queryPairs: []) }
            expectMismatch { _ = try auth.authenticate(signed(SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: "x", sessionToken: known.sessionToken), now: now), queryPairs: []) }
            expectMismatch { _ = try auth.authenticate(signed(SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: known.secretAccessKey), now: now), queryPairs: []) }
            expectMismatch { _ = try auth.authenticate(signed(SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: known.secretAccessKey, sessionToken: "other"), now: now), queryPairs: []) }
        }
    }

    @Test func nothingIsCachedBeforeTheSignatureChecksOut() async throws {
        try await withLedger { ledger in
            let known = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
            try ledger.secrets.store(known)
            let now = Date()
            var auth = Authenticator(ledger: ledger, configuredAdmin: nil)
            auth.now = { now }
            for i in 0..<200 {
                // A known key id with a wrong secret, and a region the server does not serve.
                let bad = SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: "wrong-\(i)")
                expectMismatch { _ = try auth.authenticate(signed(bad, now: now), queryPairs: []) }
                let region = SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: known.secretAccessKey, region: String(repeating: "x", count: 1000) + "\(i)")
                expectNotAuthorized { _ = try auth.authenticate(signed(region, now: now), queryPairs: []) }
            }
            #expect(auth.signingKeys.count == 0)
            _ = try auth.authenticate(signed(SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: known.secretAccessKey), now: now), queryPairs: [])
            #expect(auth.signingKeys.count == 1)
        }
    }

    @Test func regionsAreTheServers() async throws {
        try await withLedger { ledger in
            let known = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
            try ledger.secrets.store(known)
            let now = Date()
            var auth = Authenticator(ledger: ledger, configuredAdmin: nil, regions: ["eu-west-1"])
            auth.now = { now }
            let signer = { (region: String) in SigV4Signer(accessKeyID: known.accessKeyID, secretAccessKey: known.secretAccessKey, region: region) }
            expectNotAuthorized { _ = try auth.authenticate(signed(signer("us-east-1"), now: now), queryPairs: []) }
            #expect(try auth.authenticate(signed(signer("eu-west-1"), now: now), queryPairs: []).accessKeyID == known.accessKeyID)
        }
    }

    @Test func temporaryCredentialsExpire() async throws {
        try await withLedger { ledger in
            let start = Date()
            let temporary = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"), withSessionToken: true, lifetime: .seconds(60), now: Timestamp(start))
            try ledger.secrets.store(temporary)
            var auth = Authenticator(ledger: ledger, configuredAdmin: nil)
            let signer = SigV4Signer(accessKeyID: temporary.accessKeyID, secretAccessKey: temporary.secretAccessKey, sessionToken: temporary.sessionToken)
            auth.now = { start.addingTimeInterval(30) }
            #expect(try auth.authenticate(signed(signer, now: start.addingTimeInterval(30)), queryPairs: []).accessKeyID == temporary.accessKeyID)
            auth.now = { start.addingTimeInterval(61) }
            do {
                _ = try auth.authenticate(signed(signer, now: start.addingTimeInterval(61)), queryPairs: [])
                Issue.record("an expired credential was accepted")
            } catch let error as WireError {
                #expect(error.status == 403 && error.message.contains("expired"))
            }
        }
    }

    @Test func theGeneratedAdminStopsWorkingOnceAnOperatorSetsOne() async throws {
        try await withLedger { ledger in
            let (generated, _) = try ledger.secrets.generatedAdminCredential()
            let now = Date()
            let signer = SigV4Signer(accessKeyID: generated.accessKeyID, secretAccessKey: generated.secretAccessKey)
            var alone = Authenticator(ledger: ledger, configuredAdmin: nil)
            alone.now = { now }
            #expect(try alone.authenticate(signed(signer, now: now), queryPairs: []).scope == .admin)
            var configured = Authenticator(ledger: ledger, configuredAdmin: Credential.generate(scope: .admin))
            configured.now = { now }
            expectMismatch { _ = try configured.authenticate(signed(signer, now: now), queryPairs: []) }
        }
    }

    @Test func anUnsignedPayloadIsForReadsOnly() async throws {
        try await withLedger { ledger in
            let known = Credential.generate(scope: .identity(pool: "test:0", identity: "test:1"))
            try ledger.secrets.store(known)
            let now = Date()
            var auth = Authenticator(ledger: ledger, configuredAdmin: nil)
            auth.now = { now }
            func presigned(_ method: String, body: [UInt8]) -> WireRequest {
                let amzDate = SigV4.amzDate(now)
                let day = String(amzDate.prefix(8))
                let path = "/identitypools/test%3A0/identities/test%3A1/datasets/d"
                var query: [(String, String)] = [("X-Amz-Algorithm", SigV4.algorithm), ("X-Amz-Credential", "\(known.accessKeyID)/\(day)/us-east-1/cognito-sync/aws4_request"),
                                                 ("X-Amz-Date", amzDate), ("X-Amz-Expires", "300"), ("X-Amz-SignedHeaders", "host")]
                let canonical = SigV4.canonicalRequest(method: method, canonicalURI: SigV4.canonicalURI(rawPath: path), canonicalQuery: SigV4.canonicalQuery(query),
                                                       headers: [("host", "h:1")], signedHeaders: ["host"], payloadHash: "UNSIGNED-PAYLOAD")
                let signature = SigV4.signature(secret: known.secretAccessKey, date: day, region: "us-east-1", service: "cognito-sync",
                                                stringToSign: SigV4.stringToSign(amzDate: amzDate, scope: "\(day)/us-east-1/cognito-sync/aws4_request", canonicalRequest: canonical))
                query.append(("X-Amz-Signature", signature))
                let raw = query.map { "\(SigV4.uriEncode($0.0))=\(SigV4.uriEncode($0.1))" }.joined(separator: "&")
                return WireRequest(method: method, rawPath: path, rawQuery: raw, headers: [("host", "h:1")], body: body)
            }
            let get = presigned("GET", body: [])
            #expect(try auth.authenticate(get, queryPairs: SigV4.queryPairs(get.rawQuery)!).accessKeyID == known.accessKeyID)
            let post = presigned("POST", body: Array(#"{"SyncSessionToken":"x"}"#.utf8))
            expectMismatch { _ = try auth.authenticate(post, queryPairs: SigV4.queryPairs(post.rawQuery)!) }
        }
    }
}

@Suite struct JSONTests {
    @Test func parsesAndRefusesWithPositions() throws {
        let json = try JSONParser.parse(Array(#" {"a": [1, -2.5e3, true, null, "x\u00e9\ud83d\ude00\n"], "b": {}} "#.utf8))
        #expect(json["a"] == .array([.number("1"), .number("-2.5e3"), .bool(true), .null, .string("xé😀\n")]))
        #expect(json["b"] == .object([]))
        for bad in ["", "{", "{\"a\"}", "[1,]", "01", "\"\\ud800\"", "{\"a\":1} x", "tru", "\"a\u{01}\"", String(repeating: "[", count: 100)] {
            #expect(throws: JSONSyntaxError.self, "\(bad)") { _ = try JSONParser.parse(Array(bad.utf8)) }
        }
    }

    @Test func writerRoundTrips() throws {
        var w = JSONWriter()
        w.beginObject()
        w.member("s", "q\"\\\n\u{01}é")
        w.member("n", int: 42)
        w.member("d", date: 1_700_000_000_120)
        w.key("list"); w.beginArray(); w.string("a"); w.beginObject(); w.endObject(); w.int(1); w.endArray()
        w.member("t", bool: true)
        w.endObject()
        let parsed = try JSONParser.parse(w.bytes)
        #expect(parsed["s"] == .string("q\"\\\n\u{01}é"))
        #expect(parsed["d"] == .number("1700000000.12"))
        #expect(parsed["list"] == .array([.string("a"), .object([]), .number("1")]))
        #expect(String(decoding: w.bytes, as: UTF8.self).hasPrefix(#"{"s":"q\"\\\n\u0001é","n":42,"d":1700000000.12,"list":["a",{},1],"t":true}"#))
    }
}

@Suite struct RouteTests {
}
