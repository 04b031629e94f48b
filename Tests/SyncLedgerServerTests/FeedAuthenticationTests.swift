import Testing
@testable import SyncLedgerServer

/// The signature of the leader's feed answers (docs/replication.md).
@Suite struct FeedAuthenticationTests {
    private let answer = FeedAuthentication.Answer(
        nonce: "00112233445566778899aabbccddeeff", status: 200, after: 41,
        ledgerID: "fedd6ef009eaff3db4dab40419ed9479", lastSequence: 57, body: Array("SLSEG01\nbody".utf8))
    private let secret = "wire-test-admin-secret/0123456789abcdefABCDEF"

    /// Vectors computed with Python's hmac/hashlib from the document, not from this code.
    @Test func theSignatureIsTheDocumentedHMAC() {
        #expect(FeedAuthentication.signature(answer, secret: secret) == "9b72628f730ceabad1ca0f2d2d9c8aa1f484c9dab92b1837b8686134ac574a85")
        let empty = FeedAuthentication.Answer(nonce: "0123456789abcdef", status: 204, after: 0, ledgerID: "ab", lastSequence: 0, body: [])
        #expect(FeedAuthentication.signature(empty, secret: "s") == "63ded80d8dbeb392833cc23740b5900bc454b9f7be67326b7302d253682f9be9")
    }

    @Test func changingAnyCoveredFieldBreaksTheSignature() {
        let signature = FeedAuthentication.signature(answer, secret: secret)
        #expect(FeedAuthentication.verify(signature, answer, secret: secret))
        #expect(FeedAuthentication.verify(signature.uppercased(), answer, secret: secret))
        var changed: [FeedAuthentication.Answer] = []
        var a = answer; a.nonce = "00112233445566778899aabbccddeef0"; changed.append(a)
        a = answer; a.status = 204; changed.append(a)
        a = answer; a.after = 40; changed.append(a)
        a = answer; a.ledgerID = "fedd6ef009eaff3db4dab40419ed9478"; changed.append(a)
        a = answer; a.lastSequence = 58; changed.append(a)
        a = answer; a.body[3] ^= 1; changed.append(a)
        for other in changed { #expect(!FeedAuthentication.verify(signature, other, secret: secret)) }
        #expect(!FeedAuthentication.verify(signature, answer, secret: secret + "x"))
        #expect(!FeedAuthentication.verify(String(signature.dropLast()), answer, secret: secret))
    }

    @Test func noncesAreFreshHexAndOnlyWellFormedOnesAreSigned() {
        let a = FeedAuthentication.makeNonce(), b = FeedAuthentication.makeNonce()
        #expect(a != b && a.count == 32)
        #expect(FeedAuthentication.isWellFormed(nonce: a))
        for bad in ["", "0123456789abcde", "0123456789ABCDEF", "0123456789abcdeg", String(repeating: "a", count: 65), "0123456789abcdef\n"] {
            #expect(!FeedAuthentication.isWellFormed(nonce: bad), "\(bad)")
        }
    }
}
