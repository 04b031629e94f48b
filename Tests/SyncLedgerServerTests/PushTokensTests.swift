import Crypto
import Foundation
import JWTKit
import SyncLedger
import Testing
import _CryptoExtras
@testable import SyncLedgerServer

/// The push services' tokens as jwt-kit makes them, checked with swift-crypto directly: the
/// header and claims APNs and Google's token endpoint read, NumericDates as JSON integers, and
/// a signature by the configured key (ES256 as raw r ‖ s, RS256 PKCS #1 v1.5).
@Suite struct PushTokensTests {
    static func parts(_ token: String) -> (header: [String: Any], claims: [String: Any], claimsText: String, input: [UInt8], signature: [UInt8]) {
        let p = token.split(separator: ".", omittingEmptySubsequences: false)
        #expect(p.count == 3)
        func decoded(_ s: Substring) -> [UInt8] { Base64URL.decode(Array(s.utf8)[...]) ?? [] }
        func object(_ s: Substring) -> [String: Any] { (try? JSONSerialization.jsonObject(with: Data(decoded(s)))) as? [String: Any] ?? [:] }
        return (object(p[0]), object(p[1]), String(decoding: decoded(p[1]), as: UTF8.self), Array("\(p[0]).\(p[1])".utf8), decoded(p[2]))
    }

    @Test func theAPNsProviderTokenIsES256WithKidIssAndWholeSecondIat() async throws {
        let key = P256.Signing.PrivateKey()
        let now = Date(timeIntervalSince1970: 1_800_000_000.75)
        let token = try await PushTokens.apns(key: ES256PrivateKey(backing: key), keyID: "ABC123DEFG", teamID: "TEAM123456", now: now)
        let t = Self.parts(token)
        #expect(t.header["alg"] as? String == "ES256" && t.header["kid"] as? String == "ABC123DEFG")
        #expect(t.claims["iss"] as? String == "TEAM123456")
        #expect(t.claimsText == #"{"iat":1800000000,"iss":"TEAM123456"}"#)
        #expect(t.signature.count == 64)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: t.signature)
        #expect(key.publicKey.isValidSignature(signature, for: t.input))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(signature, for: t.input))
    }

    @Test(arguments: ["key-1", nil]) func theGoogleGrantIsRS256ForTheTokenEndpointForAnHour(kid: String?) async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let token = try await PushTokens.googleGrant(key: JWTKit.Insecure.RSA.PrivateKey(backing: key), keyID: kid, clientEmail: "push@p.iam.gserviceaccount.com",
                                                     scope: "https://www.googleapis.com/auth/firebase.messaging", tokenURI: "https://oauth2.example/token",
                                                     now: Date(timeIntervalSince1970: 1_800_000_000.5))
        let t = Self.parts(token)
        #expect(t.header["alg"] as? String == "RS256" && t.header["typ"] as? String == "JWT")
        #expect(t.header["kid"] as? String == kid)
        #expect(t.claimsText == #"{"aud":"https://oauth2.example/token","exp":1800003600,"iat":1800000000,"iss":"push@p.iam.gserviceaccount.com","scope":"https://www.googleapis.com/auth/firebase.messaging"}"#)
        let valid = key.publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: t.signature), for: SHA256.hash(data: t.input), padding: .insecurePKCS1v1_5)
        #expect(valid)
    }
}
