import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

/// Event-like record values: small JSON settings documents, varied but alike.
func eventLikeValue(_ i: Int, _ rng: inout SeededRandom) -> String {
    let themes = ["dark", "light", "solarized", "high-contrast"]
    let langs = ["en-US", "de-DE", "fr-FR", "ja-JP", "pt-BR"]
    return #"{"theme":"\#(themes.randomElement(using: &rng)!)","fontSize":\#(Int.random(in: 10...24, using: &rng)),"#
        + #""locale":"\#(langs.randomElement(using: &rng)!)","notifications":{"email":\#(Bool.random(using: &rng)),"push":\#(Bool.random(using: &rng))},"#
        + #""lastScreen":"screen-\#(Int.random(in: 1...40, using: &rng))","updatedAt":\#(1_800_000_000 + i * 37)}"#
}

@Suite struct DictionaryTests {
    @Test func aTrainedDictionaryShrinksSmallSegmentsAndTravelsWithThePool() async throws {
        var options = LedgerOptions()
        options.durable = false
        try await withLedger(options) { ledger in
            var rng = SeededRandom(state: 11)
            for i in 0..<600 {
                try await ledger.put(stream("settings", identity: "\(i % 60)"), ["prefs": eventLikeValue(i, &rng), "device": "phone-\(i % 7)"])
            }
            // Small segments (≈1 KiB: a few entries) without a dictionary…
            func ratio(_ ledger: Ledger) throws -> Double {
                var plain = 0, packed = 0
                for n in 0..<60 {
                    let segment = try #require(try ledger.streamSegment(stream("settings", identity: "\(n)"), after: 4, maxBytes: 1024))
                    let bytes = try segment.encoded()
                    plain += Int(try Segment.decode(bytes, dictionaries: ledger.dictionaryLookup).uncompressedSize)
                    packed += bytes.count
                }
                return Double(plain) / Double(packed)
            }
            let without = try ratio(ledger)
            let dictionary = try await ledger.trainDictionary(pool: stream().pool)
            #expect(dictionary.id != 0 && dictionary.bytes.count <= 16 << 10)
            let with = try ratio(ledger)
            #expect(with >= 1.5 * without, "dictionary ratio \(with) vs plain \(without)")
            // The segment names the dictionary; a ledger without it refuses clearly…
            let small = try #require(try ledger.streamSegment(stream("settings", identity: "3"), after: 0, maxBytes: 1024))
            #expect(small.dictionary?.id == dictionary.id)
            let bytes = try small.encoded()
            try await withLedger { other in
                let error = await expectLedgerError(.invalidParameter) { _ = try await other.merge(bytes: bytes) }
                #expect(error?.message.contains("dictionary \(dictionary.id)") == true)
                // …until it has the pool's configuration stream, which carries the dictionary.
                try await other.merge(try #require(try ledger.feedSegment(after: 0)))
                #expect(try other.dictionary(id: dictionary.id) == dictionary.bytes)
                #expect(try other.decodeSegment(bytes) == small)
            }
        }
    }

    @Test func tooFewEntriesCannotTrain() async throws {
        try await withLedger { ledger in
            try await ledger.put(stream(), ["a": "1"])
            await expectLedgerError(.invalidParameter) { _ = try await ledger.trainDictionary(pool: stream().pool) }
        }
    }
}
