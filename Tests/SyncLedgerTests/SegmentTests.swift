import Crypto
import Foundation
import LedgerStorage
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct SegmentTests {
    /// A ledger with a few streams, deletes and system records.
    private func populate(_ ledger: Ledger) async throws {
        for i in 0..<30 {
            try await ledger.put(stream("d\(i % 3)", identity: "\(i % 2)"), ["k\(i % 7)": "v\(i)", "n": "\(i)"])
        }
        try await ledger.deleteDataset(stream("d1", identity: "0"))
        try await ledger.put(stream("d1", identity: "0"), ["again": "yes"])
        _ = try await ledger.registerDevice(pool: stream().pool, identity: stream().identity, platform: .gcm, token: "t")
    }

    @Test func encodeDecodeRoundTrips() async throws {
        try await withLedger { ledger in
            try await populate(ledger)
            let feed = try #require(try ledger.feedSegment(after: 0))
            let bytes = try feed.encoded()
            let decoded = try Segment.decode(bytes)
            #expect(decoded == feed)
            #expect(decoded.entries.count == Int(try ledger.lastSequence))
            #expect(decoded.compressedSize < decoded.uncompressedSize)
            let s = stream("d1", identity: "0")
            let tail = try #require(try ledger.streamSegment(s, after: 3))
            #expect(tail.entries.map(\.offset) == Array(4...UInt64(tail.entries.count + 3)))
            #expect(try Segment.decode(try tail.encoded()) == tail)
            #expect(try ledger.streamSegment(s, after: 99) == nil)
        }
    }

    @Test func exportAndMergeReproduceTheLedgerAndMergingTwiceChangesNothing() async throws {
        try await withLedger { leader in
            try await populate(leader)
            try await withLedger { follower in
                var after: UInt64 = 0
                while let segment = try leader.feedSegment(after: after, maxBytes: 600) {
                    let report = try await follower.merge(bytes: try segment.encoded())
                    #expect(report.applied == segment.entries.count && report.skipped == 0)
                    after = report.lastSourceSequence
                }
                #expect(try follower.digest() == leader.digest())
                #expect(try follower.verify().isValid)
                #expect(try follower.values(stream("d1", identity: "0")) == ["again": "yes"])
                // Again: everything is skipped, nothing changes.
                let all = try #require(try leader.feedSegment(after: 0))
                let again = try await follower.merge(all)
                #expect(again.applied == 0 && again.skipped == all.entries.count)
                #expect(try follower.lastSequence == leader.lastSequence)
                // The leader moves on; the overlap is skipped, the rest applied.
                try await leader.put(stream("d0", identity: "0"), ["late": "1"])
                let overlap = try #require(try leader.feedSegment(after: after - 2))
                let report = try await follower.merge(overlap)
                #expect(report.applied == 1 && report.skipped == 2)
                #expect(try follower.digest() == leader.digest())
            }
        }
    }

    @Test func gapsDivergenceAndBrokenChainsAreRefusedWhole() async throws {
        try await withLedger { leader in
            try await populate(leader)
            let s = stream("d0", identity: "0")
            try await withLedger { follower in
                // A stream segment that starts past the follower's head: a gap.
                let late = try #require(try leader.streamSegment(s, after: 2))
                let gap = await expectLedgerError(.invalidParameter) { try await follower.merge(late) }
                #expect(gap?.message.contains("gap") == true)
                #expect(try follower.lastSequence == 0)
                // A feed segment whose later entry has a gap: nothing of it is applied.
                let feed = try #require(try leader.feedSegment(after: 0))
                var holey = feed.entries
                holey.remove(at: 5)
                await expectLedgerError(.invalidParameter) { try await follower.merge(Segment(scope: .feed, entries: holey)) }
                #expect(try follower.lastSequence == 0)
                // Diverged history: the follower wrote its own entry at offset 1.
                try await follower.put(s, ["mine": "1"])
                let diverged = await expectLedgerError(.invalidParameter) { try await follower.merge(feed) }
                #expect(diverged?.message.contains("diverged") == true)
                #expect(try follower.entries(in: s).count == 1)
            }
            // A tampered body makes a self-consistent but different history: a ledger that holds
            // the original refuses it as diverged, and nothing changes.
            let segment = try #require(try leader.streamSegment(s, after: 0))
            var entries = segment.entries
            let victim = entries[1]
            var body = Array(victim.body)
            body[body.count - 1] ^= 1
            var r = ByteReader(body)
            let decoded = try #require(try? LogEntry.decodeBody(&r), "the altered body still decodes (one character of a value changed)")
            _ = decoded
            // Re-chain from the altered entry on, as a forger would.
            var previous = victim.previous
            for i in 1..<entries.count {
                let e = entries[i]
                let entryBody = i == 1 ? body[...] : e.body
                let hash = LogEntry.chainHash(previous: previous, stream: s, body: entryBody)
                entries[i] = Segment.Entry(stream: s, sequence: e.sequence, offset: e.offset, previous: previous, hash: hash, body: entryBody)
                previous = hash
            }
            let rewritten = try Segment.decode(try Segment(scope: .stream(s), entries: entries).encoded())
            #expect(rewritten.entries[1].hash != victim.hash, "the hash follows the body")
            let before = try leader.lastSequence
            let error = await expectLedgerError(.invalidParameter) { try await leader.merge(rewritten) }
            #expect(error?.message.contains("diverged") == true)
            #expect(try leader.lastSequence == before)
        }
    }

    /// Segments written by format version 1 (fixed-width header fields) still decode:
    /// a stream segment of offsets 2–3 and a feed of two streams, written by the version-1 code
    /// from `put`s at a test clock (the digest is the source ledger's).
    @Test func version1SegmentsStillDecodeAndMerge() async throws {
        let stream1 = "U0xTRUcwMQoAAQEDAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAADAAAAAAAAAAIAAAAAAAAAAwAAAAAAAAACAAAAAAAAAEQAAAAAAAAATQAWdGVzdDowAHRlc3Q6NwBzZXR0aW5nc5tFDnfH8qJHtcAVHSTDg017QyocAhU59mR9B6uvbgQnD7BbmQXiG54BkvN0XvteZ+QKT/qVbX+6OM4xAmivz1IotS/9IEQhAgACIwECkI7jheNoBnRhYmxldAICBHNpemUBBXRoZW1lBWxpZ2h0Ax0BA6Dc44XjaAVwaG9uZQEBBWNhZsOpBm91dmVydGd06ionbWKSIU6N7+qFaBL+4Ybo2Z1AswkeGimW96t0"
        let feed1 = "U0xTRUcwMQoAAQIDAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAABAAAAAAAAAAEAAAAAAAAABAAAAAAAAAAEAAAAAAAAAVsAAAAAAAAA7gAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIk4c7qr3lWkZ/lQ5WMBy36KiEU8VuiSPq38eFSK2GNii1L/1gWwAlBwBUDBZ0ZXN0OjAANwBzZXR0aW5ncwEAASQBAYDA4oXjaAVwaG9uZQIBBHNpemUCMTIBBXRoZW1lBGRhcmsAAiMBApCO44XjaAZ0YWJsZXQCAgVsaWdodAIPsFuZBeIbngGS83Re+15n5ApP+pVtf7o4zjECaK/PUgMdAQOg3OMBAQVjYWbDqQZvdXZlcnQTOABub3RlcwMAAAAIk4c7qr3lWkZ/lQ5WMBy36KiEU8VuiSPq38eFSK2GNgQSAQEDd2ViAQEBYQExCgC/Y3hvuzkt+ILHigKECl/dIoRwHYaa4JrqKnHHUvDKV/HY2feOdeNSNAEB0eHgxK691f7LkFB6ewzWLw=="
        let oldStream = try Segment.decode(Array(try #require(Data(base64Encoded: stream1))))
        #expect(oldStream.scope == .stream(stream("settings", identity: "7")))
        #expect(oldStream.entries.map(\.offset) == [2, 3])
        #expect(try oldStream.entries.map { try $0.entry.author } == ["tablet", "phone"])
        let old = try Segment.decode(Array(try #require(Data(base64Encoded: feed1))))
        #expect(old.entries.count == 4)
        // Their bodies carry values inline (body version 1): a format-3 ledger refuses to merge
        // them, saying why, rather than store entries no redaction could erase.
        try await withLedger { ledger in
            let error = await expectLedgerError(.invalidParameter) { _ = try await ledger.merge(old) }
            #expect(error?.message.contains("written by format 2 or older") == true)
            let last = try ledger.lastSequence
            #expect(last == 0)
        }
    }

    /// A segment from a newer SyncLedger is refused as such, not as damaged.
    @Test func newerVersionIsUnsupported() async throws {
        try await withLedger { ledger in
            try await ledger.put(stream(), ["k": "v"])
            var bytes = try #require(try ledger.feedSegment(after: 0)).encoded()
            var flagged = bytes
            bytes[9] = 3
            let error = await expectLedgerError(.unsupportedFormat) { _ = try Segment.decode(resealed(bytes)) }
            #expect(error?.message.contains("version 3") == true)
            // Header flags this version does not define are refused too (byte 12: after the
            // magic, version, scope and level).
            flagged[12] |= 0x80
            let flags = await expectLedgerError(.invalidParameter) { _ = try Segment.decode(resealed(flagged)) }
            #expect(flags?.message.contains("flags") == true)
        }
    }

    /// Replaces the trailing checksum with a correct one, so that a mutation gets past it and
    /// exercises the header and entry checks behind it.
    private func resealed(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.count > 32 else { return bytes }
        let body = Array(bytes.dropLast(32))
        return body + Array(SHA256.hash(data: body))
    }

    /// 100,000 mutated and truncated valid segments — half of them with the checksum resealed, so
    /// they reach the parser behind it — are all refused with a typed error (or, for the rare
    /// mutation that leaves a valid segment, decode to one that re-encodes to itself): no crash,
    /// no hang, and nothing of any of them reaches the ledger.
    @Test func mutatedSegmentsAreAlwaysRefused() async throws {
        try await withLedger { leader in
            try await populate(leader)
            let valid = try #require(try leader.feedSegment(after: 0)).encoded()
            let small = try #require(try leader.streamSegment(stream("d2", identity: "0"), after: 0)).encoded()
            let validEntries = try Segment.decode(valid).entries.map(\.hash)
            let smallEntries = try Segment.decode(small).entries.map(\.hash)
            try await withLedger { target in
                let before = try target.digest()
                var rng = SeededRandom(state: 4_100_000)
                var refused = 0
                for round in 0..<100_000 {
                    var bytes = round % 2 == 0 ? valid : small
                    switch Int.random(in: 0..<5, using: &rng) {
                    case 0: bytes.removeSubrange(Int.random(in: 0..<bytes.count, using: &rng)...)
                    case 1:
                        for _ in 0..<Int.random(in: 1...4, using: &rng) {
                            bytes[Int.random(in: 0..<bytes.count, using: &rng)] ^= UInt8.random(in: 1...255, using: &rng)
                        }
                    case 2: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: Int.random(in: 0...bytes.count, using: &rng))
                    case 3: bytes.remove(at: Int.random(in: 0..<bytes.count, using: &rng))
                    default:
                        let i = Int.random(in: 0..<bytes.count, using: &rng)
                        for j in i..<min(bytes.count, i + 8) { bytes[j] = ~bytes[j] }
                    }
                    let resealing = round % 4 >= 2
                    if resealing { bytes = resealed(bytes) }
                    do {
                        let segment = try Segment.decode(bytes)
                        // Only a resealed mutation of what the chain does not cover (the
                        // compression level, a source sequence between its neighbours) may still
                        // decode: the entries themselves must then be exactly the original ones.
                        #expect(resealing, "round \(round): a mutated segment passed the checksum")
                        let original = round % 2 == 0 ? validEntries : smallEntries
                        #expect(segment.entries.map(\.hash) == original)
                    } catch let error as LedgerError {
                        #expect(error.code == .invalidParameter || error.code == .unsupportedFormat)
                        refused += 1
                    }
                }
                #expect(refused >= 98_000, "\(refused) refused")
                // Merging goes through the same decoder: a sample of them, end to end.
                var sample = SeededRandom(state: 9)
                for _ in 0..<200 {
                    var bytes = valid
                    bytes[Int.random(in: 0..<bytes.count, using: &sample)] ^= 0x40
                    // A flip in the header's version field is refused as a format this
                    // version does not read; anything else as a bad segment.
                    do {
                        _ = try await target.merge(bytes: bytes)
                        Issue.record("a mutated segment merged")
                    } catch let error as LedgerError {
                        #expect(error.code == .invalidParameter || error.code == .unsupportedFormat, "\(error)")
                    }
                }
                #expect(try target.digest() == before)
                #expect(try target.lastSequence == 0)
            }
        }
    }
}
