import Foundation
import Testing
import SyncLedgerWire

/// botocore 1.43's signature of an UpdateRecords request (SigV4Auth, service cognito-sync,
/// us-east-1) at 20261122T094717Z with AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY
/// (the same request the server's authenticator tests accept).
private let botocoreSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
private let botocoreSignature = "58ddd80da4fa644f1930df774a170477228c88d8aefb1c97d716a3e908dd05a3"

/// A request as it arrives: its parts as sent, headers in any case.
private struct SignedRequest {
    var method = "POST"
    var rawPath = "/identitypools/us-east-1%3A0000-aaaa/identities/us-east-1%3A1111-bbbb/datasets/settings"
    var rawQuery: String? = "x=a%20b&a=1"
    var headers: [(String, String)] = [("Content-Type", "application/json"), ("host", "127.0.0.1:8080"), ("X-Amz-Date", "20261122T094717Z")]
    var body = Array(#"{"SyncSessionToken":"t","RecordPatches":[{"Op":"replace","Key":"k","Value":"v","SyncCount":0}]}"#.utf8)

    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name }?.1 }

    /// The signature a verifier computes for this request from the Authorization header's scope
    /// and signed headers, with `secret`: the steps of the server's check, from the same parts.
    func expectedSignature(authorization: String, secret: String) throws -> String {
        var fields: [String: String] = [:]
        for part in authorization.dropFirst(SigV4.algorithm.count + 1).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            fields[String(pair[0])] = String(pair[1])
        }
        let scope = try #require(fields["Credential"]).split(separator: "/").map(String.init)
        let signed = try #require(fields["SignedHeaders"]).split(separator: ";").map(String.init)
        let amzDate = try #require(header("x-amz-date"))
        let canonical = SigV4.canonicalRequest(
            method: method, canonicalURI: SigV4.canonicalURI(rawPath: rawPath),
            canonicalQuery: SigV4.canonicalQuery(try #require(SigV4.queryPairs(rawQuery))), headers: headers,
            signedHeaders: signed, payloadHash: SigV4.sha256Hex(body))
        let toSign = SigV4.stringToSign(amzDate: amzDate, scope: scope[1...].joined(separator: "/"), canonicalRequest: canonical)
        return SigV4.signature(secret: secret, date: scope[1], region: scope[2], service: scope[3], stringToSign: toSign)
    }
}

@Suite struct SigV4WireTests {
    @Test func verifiesBotocoresSignatureAndRefusesAnyChangedByte() throws {
        let authorization = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/cognito-sync/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=\(botocoreSignature)"
        let request = SignedRequest()
        #expect(try request.expectedSignature(authorization: authorization, secret: botocoreSecret) == botocoreSignature)
        // Each byte of the body, the path, the query, a signed header or the secret matters.
        for i in request.body.indices {
            var changed = request
            changed.body[i] ^= 0x01
            #expect(try changed.expectedSignature(authorization: authorization, secret: botocoreSecret) != botocoreSignature, "body byte \(i)")
        }
        var path = request
        path.rawPath = path.rawPath.replacingOccurrences(of: "settings", with: "settingt")
        var query = request
        query.rawQuery = "x=a%20c&a=1"
        var header = request
        header.headers[0].1 = "application/jsoN"
        var method = request
        method.method = "PUT"
        for (what, changed) in [("path", path), ("query", query), ("content-type", header), ("method", method)] {
            #expect(try changed.expectedSignature(authorization: authorization, secret: botocoreSecret) != botocoreSignature, "\(what)")
        }
        #expect(try request.expectedSignature(authorization: authorization, secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEz") != botocoreSignature)
    }

    @Test func signerAndVerifierAgree() throws {
        let signer = SigV4Signer(accessKeyID: "AKIDEXAMPLE", secretAccessKey: botocoreSecret, sessionToken: "token", region: "eu-west-1")
        var request = SignedRequest()
        request.headers = [("content-type", "application/json")]
        let date = try #require(SigV4.parseAmzDate("20261122T094717Z"))
        let added = signer.sign(method: request.method, host: "h:1", rawPath: request.rawPath, rawQuery: request.rawQuery,
                                headers: request.headers, body: request.body, date: date)
        request.headers += [("host", "h:1")] + added
        let authorization = try #require(request.header("authorization"))
        #expect(authorization.contains("Credential=AKIDEXAMPLE/20261122/eu-west-1/cognito-sync/aws4_request"))
        #expect(authorization.contains("SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token"))
        #expect(request.header("x-amz-security-token") == "token")
        #expect(request.header("x-amz-content-sha256") == SigV4.sha256Hex(request.body))
        let signature = String(try #require(authorization.split(separator: "Signature=").last))
        #expect(try request.expectedSignature(authorization: authorization, secret: botocoreSecret) == signature)
        var changed = request
        changed.body[changed.body.count - 3] = UInt8(ascii: "1")
        #expect(try changed.expectedSignature(authorization: authorization, secret: botocoreSecret) != signature)
        var otherToken = request
        otherToken.headers = otherToken.headers.map { $0.0 == "x-amz-security-token" ? ($0.0, "other") : $0 }
        #expect(try otherToken.expectedSignature(authorization: authorization, secret: botocoreSecret) != signature)
    }

    @Test func canonicalFormsMatchTheSpec() {
        #expect(SigV4.uriEncode("a b/c:~") == "a%20b%2Fc%3A~")
        // The path as sent, not normalized: a signature for one path is not one for another
        // that normalizes to it.
        #expect(SigV4.canonicalURI(rawPath: "/a%3Ab//c/./d/../e") == "/a%253Ab//c/./d/../e")
        #expect(SigV4.canonicalURI(rawPath: "/a/b") != SigV4.canonicalURI(rawPath: "/a/x/../b"))
        #expect(SigV4.canonicalQuery([("b", "2"), ("a", "x y"), ("a", "1")]) == "a=1&a=x%20y&b=2")
        #expect(SigV4.percentDecode("%zz") == nil)
        #expect(SigV4.percentDecode("%+1") == nil && SigV4.percentDecode("%-1") == nil, "two hex digits, no sign")
        #expect(SigV4.percentDecode("%2e%2E") == "..")
        #expect(SigV4.percentDecode("a%3Ab+c") == "a:b+c")
        #expect(SigV4.trimAll("  a   b  ") == "a b")
        #expect(SigV4.amzDate(SigV4.parseAmzDate("20261122T094717Z")!) == "20261122T094717Z")
        #expect(SigV4.parseAmzDate("20261322T094717Z") == nil)
    }
}
