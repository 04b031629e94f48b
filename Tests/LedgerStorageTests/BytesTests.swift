import Foundation
import Testing
@testable import LedgerStorage

@Suite struct FrameWriterTests {
    /// A frame written in uneven pieces, across several staging-sized chunks, decompresses to
    /// the concatenated input, with or without a dictionary.
    @Test func piecesMakeOneFrame() throws {
        var random = SystemRandomNumberGenerator()
        let words = ["alpha", "beta", "gamma", "delta", "{\"theme\":\"dark\"}", "level", "42"]
        var input: [UInt8] = []
        while input.count < 700_000 { input += Array(words.randomElement(using: &random)!.utf8) + [UInt8.random(in: 0...255, using: &random)] }
        let samples = (0..<400).map { i in Array("{\"key\":\"k\(i % 13)\",\"value\":\"\(words[i % words.count])-\(i)\"}".utf8) }
        let dictionary = try Zstd.trainDictionary(samples: samples, capacity: 4096)
        for dict in [nil, dictionary] as [[UInt8]?] {
            let writer = try ZstdFrameWriter(level: 3, contentSize: input.count, dictionary: dict)
            var at = 0
            var sizes = [1, 0, 200_000, 77, 131_072, 5]
            while at < input.count {
                let size = min(sizes.isEmpty ? 50_000 : sizes.removeFirst(), input.count - at)
                try writer.compress(Array(input[at..<at + size]))
                at += size
            }
            let frame = try writer.finish()
            let plain = try dict.map { try Zstd.decompress(frame, limit: input.count, dictionary: $0) } ?? Zstd.decompress(frame, limit: input.count)
            #expect(plain == input)
        }
    }

    /// The declared size is a promise: less or more input is refused, not a damaged frame.
    @Test func wrongSizeIsRefused() throws {
        let short = try ZstdFrameWriter(level: 1, contentSize: 10)
        try short.compress([1, 2, 3])
        #expect(throws: ZstdError.self) { _ = try short.finish() }
        let long = try ZstdFrameWriter(level: 1, contentSize: 2)
        #expect(throws: ZstdError.self) { _ = try long.finish([1, 2, 3]) }
    }
}

@Suite struct BytesTests {
    @Test func asciiCheckSeesEveryByte() {
        let ascii = Array("0123456789abcdefghijklmnopqrstuvwxyz".utf8)
        #expect(Bytes.isASCII(ascii[...]))
        #expect(Bytes.isASCII([][...]))
        for i in ascii.indices {
            var bytes = ascii
            bytes[i] = 0x80 | bytes[i]
            #expect(!Bytes.isASCII(bytes[...]), "byte \(i)")
            #expect(Bytes.isASCII(bytes[(i + 1)...]), "slice after \(i)")
        }
    }

    @Test func equalityAndKeysCompareBytes() {
        let a: [UInt8] = [1, 2, 3, 4, 5]
        #expect(Bytes.equal(a[1..<3], [2, 3][...]))
        #expect(!Bytes.equal(a[1..<3], [2, 4][...]))
        #expect(!Bytes.equal(a[...], a[..<4]))
        #expect(Bytes.equal([][...], a[0..<0]))
        var seen: [ByteKey: Int] = [ByteKey(a[1..<3]): 1]
        #expect(seen[ByteKey([2, 3])] == 1)
        seen[ByteKey([2, 3, 0])] = 2
        #expect(seen.count == 2)
        // UTF-8 equality is byte equality: canonically equivalent strings differ.
        #expect(!Bytes.equalUTF8("\u{E9}", "e\u{301}"))
        #expect(Bytes.equalUTF8("café", "caf\u{E9}"))
        // Byte order: shorter first on a common prefix; bytes compare unsigned.
        let sorted = ["", "a", "ab", "b", "z", "\u{E9}", "e\u{301}"].sorted { Bytes.lessUTF8($0, $1) }
        #expect(sorted == ["", "a", "ab", "b", "e\u{301}", "z", "\u{E9}"])
        #expect(!Bytes.lessUTF8("a", "a"))
    }

    @Test func chainDigestIsSHA256OfTheConcatenation() {
        var hasher = ConcatenatingSHA256()
        let previous = [UInt8](repeating: 7, count: 32)
        let name = [UInt8](repeating: 0x41, count: 200)  // a two-byte varint length
        let body: [UInt8] = [1, 2, 3]
        let whole = previous + [0xC8, 0x01] + name + body
        #expect(hasher.digest(previous, lengthPrefixed: name, body[...]) == ConcatenatingSHA256.digest(whole[...]))
        // The SHA-256 of "abc" (FIPS 180-2).
        #expect(ConcatenatingSHA256.digest(Array("abc".utf8)[...]).map { String(format: "%02x", $0) }.joined()
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
