import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct TokenTests {
    @Test func base64URLRoundTripsAndRefusesNonCanonicalText() {
        var rng = SeededRandom(state: 7)
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = Base64URL.encode(bytes)
            #expect(!text.contains(UInt8(ascii: "=")) && !text.contains(UInt8(ascii: "+")) && !text.contains(UInt8(ascii: "/")))
            #expect(Base64URL.decode(text[...]) == bytes)
        }
        #expect(Base64URL.decode(Array("QQ".utf8)[...]) == [0x41])
        #expect(Base64URL.decode(Array("QR".utf8)[...]) == nil, "non-zero leftover bits")
        #expect(Base64URL.decode(Array("Q".utf8)[...]) == nil, "impossible length")
        #expect(Base64URL.decode(Array("QQ==".utf8)[...]) == nil, "padding is not base64url here")
        #expect(Base64URL.decode(Array("a+b/".utf8)[...]) == nil)
    }
}
