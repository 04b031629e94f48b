import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger

/// The ~4 MiB feed segment of the codec benchmarks (`codec.slseg` of ``FeedSource``): its
/// encoded bytes, its zstd frame and the uncompressed entry bytes inside (the payload).
struct CodecSegment {
    let encoded: [UInt8]
    let payload: SegmentPayload

    init(_ artifact: Artifact) throws {
        encoded = try readBytes(artifact.file("codec.slseg"))
        payload = try SegmentPayload(encoded: encoded)
    }
}

/// `Segment.encoded()` of the ~4 MiB feed segment (entry serialisation, zstd at the segment's
/// level 3, header, SHA-256). Payload bytes per second count the uncompressed entry bytes.
final class SegmentEncodeFixture: MeasuredFixture {
    let artifact: Artifact
    let segment: Segment
    let plainBytes: Int

    init() async throws {
        artifact = try await FeedSource.artifact()
        let codec = try CodecSegment(artifact)
        segment = codec.payload.segment
        plainBytes = codec.payload.plain.count
    }

    func iterate() async throws -> Measured {
        let bytes = try segment.encoded()
        return Measured(operations: segment.entries.count, bytes: plainBytes, figure: bytes.count)
    }

    func tearDown() { artifact.release() }
}

/// `Zstd.compress` of the same uncompressed entry bytes at the same level: the limit of
/// ``SegmentEncodeFixture``.
final class RawCompressFixture: MeasuredFixture {
    let artifact: Artifact
    let plain: [UInt8]
    let level: Int32
    let entries: Int

    init() async throws {
        artifact = try await FeedSource.artifact()
        let codec = try CodecSegment(artifact)
        plain = codec.payload.plain
        level = codec.payload.segment.compressionLevel
        entries = codec.payload.segment.entries.count
    }

    func iterate() async throws -> Measured {
        let compressed = try Zstd.compress(plain, level: level)
        return Measured(operations: entries, bytes: plain.count, figure: compressed.count)
    }

    func tearDown() { artifact.release() }
}

/// `Segment.decode` of the ~4 MiB feed segment's bytes: checksum, zstd, every entry decoded
/// and every hash chain checked.
final class SegmentDecodeFixture: MeasuredFixture {
    let artifact: Artifact
    let encoded: [UInt8]
    let plainBytes: Int

    init() async throws {
        artifact = try await FeedSource.artifact()
        let codec = try CodecSegment(artifact)
        encoded = codec.encoded
        plainBytes = codec.payload.plain.count
    }

    func iterate() async throws -> Measured {
        let segment = try Segment.decode(encoded)
        return Measured(operations: segment.entries.count, bytes: plainBytes)
    }

    func tearDown() { artifact.release() }
}

/// The SHA-256 hash chain of the same segment's entries alone — `SHA-256(previous ‖ name ‖
/// body)` per entry, as `Segment.decode` recomputes every hash (they are not carried): the floor
/// under ``SegmentDecodeFixture`` besides zstd.
final class ChainHashFixture: MeasuredFixture {
    let artifact: Artifact
    let entries: [(previous: [UInt8], name: [UInt8], body: ArraySlice<UInt8>)]
    let plainBytes: Int

    init() async throws {
        artifact = try await FeedSource.artifact()
        let codec = try CodecSegment(artifact)
        var names: [StreamName: [UInt8]] = [:]
        entries = codec.payload.segment.entries.map { e in
            let name = names[e.stream] ?? EventData.streamKey(e.stream)
            names[e.stream] = name
            return (e.previous, name, e.body)
        }
        plainBytes = codec.payload.plain.count
        // The same function as the decoder's: the hashes must come out as it found them.
        var hasher = ConcatenatingSHA256()
        for (e, decoded) in zip(entries, codec.payload.segment.entries) where hasher.digest(e.previous, lengthPrefixed: e.name, e.body) != decoded.hash {
            throw HarnessError("the chain hash of sequence \(decoded.sequence) does not match the decoder's")
        }
    }

    func iterate() async throws -> Measured {
        var hasher = ConcatenatingSHA256()
        var check: UInt8 = 0
        for e in entries { check ^= hasher.digest(e.previous, lengthPrefixed: e.name, e.body)[0] }
        return Measured(operations: entries.count, bytes: plainBytes, figure: Int(check))
    }

    func tearDown() { artifact.release() }
}

/// `Zstd.decompress` of the same segment's zstd frame: the limit of ``SegmentDecodeFixture``.
final class RawDecompressFixture: MeasuredFixture {
    let artifact: Artifact
    let compressed: [UInt8]
    let plainBytes: Int
    let entries: Int

    init() async throws {
        artifact = try await FeedSource.artifact()
        let codec = try CodecSegment(artifact)
        compressed = codec.payload.compressed
        plainBytes = codec.payload.plain.count
        entries = codec.payload.segment.entries.count
    }

    func iterate() async throws -> Measured {
        let plain = try Zstd.decompress(compressed, limit: plainBytes)
        return Measured(operations: entries, bytes: plain.count)
    }

    func tearDown() { artifact.release() }
}

/// The wire ratio of a feed segment of at least `minimumPayload` uncompressed entry bytes, as a
/// follower pulling from the middle of the feed gets it: the shortest run of entries after
/// sequence ``FeedSource/pullAfter`` that reaches the size, encoded at level 3 (the default).
/// (The feed's very first entries would be a worse and less steady case: each is the first of
/// its stream, and their order depends on how the source's writers were scheduled.)
///
/// - `figure`: the segment's file bytes (header, frame, checksum) per million payload bytes;
/// - `baselineFigure`: bare `Zstd.compress` of the same payload at the same level, per million
///   payload bytes — what compression alone achieves, without the segment's framing.
final class WireRatioFixture: MeasuredFixture {
    let artifact: Artifact
    let segment: Segment
    let plain: [UInt8]

    init(minimumPayload: Int) async throws {
        artifact = try await FeedSource.artifact()
        let pulled = try Segment.decode(try readBytes(artifact.file("pull.slseg")))
        let all = Segment(scope: .feed, entries: pulled.entries, compressionLevel: 3)
        func payloadSize(_ count: Int) -> Int {
            Segment(scope: .feed, entries: Array(all.entries.prefix(count)), compressionLevel: all.compressionLevel).payloadSize
        }
        var count = all.entries.count
        if payloadSize(count) > minimumPayload {
            // The fewest entries whose payload reaches the minimum (binary search).
            var low = 1, high = count
            while low < high {
                let middle = (low + high) / 2
                if payloadSize(middle) >= minimumPayload { high = middle } else { low = middle + 1 }
            }
            count = low
        }
        segment = Segment(scope: .feed, entries: Array(all.entries.prefix(count)), compressionLevel: all.compressionLevel)
        plain = try SegmentPayload(encoded: try segment.encoded()).plain
    }

    func iterate() async throws -> Measured {
        let encoded = try segment.encoded()
        let raw = try Zstd.compress(plain, level: segment.compressionLevel)
        return Measured(operations: segment.entries.count, bytes: plain.count,
                        figure: encoded.count * 1_000_000 / plain.count,
                        baselineFigure: raw.count * 1_000_000 / plain.count)
    }

    func tearDown() { artifact.release() }
}

/// The wire ratio of a small stream segment (what a client syncing one dataset pulls) of at
/// least `minimumPayload` uncompressed entry bytes: the shortest run of `stream.slseg`'s entries
/// that reaches it, encoded at level 3 with the pool's trained dictionary, as
/// `Ledger.streamSegment` does below `Ledger.dictionaryThreshold`.
///
/// - `figure`: file bytes per million payload bytes with the dictionary;
/// - `baselineFigure`: the same segment encoded without it, per million payload bytes.
///
/// With `frameOnly`, both count the zstd frame alone (the compressed entries), leaving out the
/// header and checksum the two files share: the dictionary's own effect on compression.
final class StreamWireRatioFixture: MeasuredFixture {
    let artifact: Artifact
    let withDictionary: Segment
    let withoutDictionary: Segment
    let payloadBytes: Int
    let frameOnly: Bool
    let dictionaries: (UInt32) -> [UInt8]?

    init(minimumPayload: Int, frameOnly: Bool = false) async throws {
        self.frameOnly = frameOnly
        artifact = try await FeedSource.artifact()
        let info = try FeedSource.info(artifact)
        let dictionary = try readBytes(artifact.file("pool.dict"))
        let source = try Segment.decode(try readBytes(artifact.file("stream.slseg")))
        func segment(_ count: Int) -> Segment {
            Segment(scope: source.scope, previousHash: source.previousHash, entries: Array(source.entries.prefix(count)), compressionLevel: 3)
        }
        func payloadSize(_ count: Int) -> Int { segment(count).payloadSize }
        var low = 1, high = source.entries.count
        guard payloadSize(high) >= minimumPayload else { throw HarnessError("stream.slseg holds less than \(minimumPayload) bytes") }
        while low < high {
            let middle = (low + high) / 2
            if payloadSize(middle) >= minimumPayload { high = middle } else { low = middle + 1 }
        }
        withoutDictionary = segment(low)
        payloadBytes = payloadSize(low)
        var with = segment(low)
        with.dictionary = (info.dictionaryID, dictionary)
        withDictionary = with
        // The dictionary-compressed bytes must decode with it.
        let id = info.dictionaryID
        dictionaries = { $0 == id ? dictionary : nil }
        _ = try Segment.decode(try with.encoded(), dictionaries: dictionaries)
    }

    func iterate() async throws -> Measured {
        let with = try withDictionary.encoded()
        let without = try withoutDictionary.encoded()
        let withBytes = frameOnly ? Int(try Segment.decode(with, dictionaries: dictionaries).compressedSize) : with.count
        let withoutBytes = frameOnly ? Int(try Segment.decode(without).compressedSize) : without.count
        return Measured(operations: withDictionary.entries.count, bytes: payloadBytes,
                        figure: withBytes * 1_000_000 / payloadBytes,
                        baselineFigure: withoutBytes * 1_000_000 / payloadBytes)
    }

    func tearDown() { artifact.release() }
}

// MARK: - Serving a pull

/// What a leader does to serve a pull: `feedSegment(after: N, level: 1)` (default 4 MiB target)
/// on the feed source ledger, then `encoded()`. `figure` is the segment's file bytes.
final class PullLedgerFixture: MeasuredFixture {
    let artifact: Artifact
    let ledger: Ledger
    let info: FeedSource.Info

    init() async throws {
        artifact = try await FeedSource.artifact()
        info = try FeedSource.info(artifact)
        var options = LedgerOptions()
        options.durable = false
        ledger = try Ledger(directory: FeedSource.ledgerPath(artifact), options: options)
    }

    func iterate() async throws -> Measured {
        guard let segment = try ledger.feedSegment(after: info.pullAfter, level: 1) else { throw HarnessError("pull: empty segment") }
        let bytes = try segment.encoded()
        return Measured(operations: segment.entries.count, bytes: info.pullPlainBytes, figure: bytes.count)
    }

    func tearDown() {
        ledger.close()
        artifact.release()
    }
}

/// A raw LMDB cursor scan of the same entries in the source ledger's `log` database: seek to
/// sequence N + 1 and read (copy) as many pairs as the pull's segment holds, in one read
/// transaction. One of the two limits of ``PullLedgerFixture``.
final class PullScanFixture: MeasuredFixture {
    let artifact: Artifact
    let environment: Environment
    let log: Database
    let info: FeedSource.Info

    init() async throws {
        artifact = try await FeedSource.artifact()
        info = try FeedSource.info(artifact)
        var options = EnvironmentOptions()
        options.durable = false
        environment = try Environment(path: FeedSource.ledgerPath(artifact), options: options)
        log = try environment.openDatabase("log")
    }

    func iterate() async throws -> Measured {
        let (count, bytes) = try environment.read { txn in
            try txn.withCursor(log) { cursor -> (Int, Int) in
                var count = 0, bytes = 0
                var pair = try cursor.seek(atLeast: bigEndianBytes(info.pullAfter + 1))
                while let current = pair, count < info.pullEntries {
                    count += 1
                    bytes += current.key.count + current.value.count
                    pair = try cursor.next()
                }
                return (count, bytes)
            }
        }
        guard count == info.pullEntries else { throw HarnessError("raw scan read \(count) of \(info.pullEntries) entries") }
        return Measured(operations: count, bytes: bytes)
    }

    func tearDown() { artifact.release() }
}

/// Bare `Zstd.compress` at level 1 of the pull segment's uncompressed entry bytes: the other
/// limit of ``PullLedgerFixture``.
final class PullZstdFixture: MeasuredFixture {
    let artifact: Artifact
    let plain: [UInt8]
    let info: FeedSource.Info

    init() async throws {
        artifact = try await FeedSource.artifact()
        info = try FeedSource.info(artifact)
        plain = try readBytes(artifact.file("pull-plain.bin"))
    }

    func iterate() async throws -> Measured {
        let compressed = try Zstd.compress(plain, level: 1)
        return Measured(operations: info.pullEntries, bytes: plain.count, figure: compressed.count)
    }

    func tearDown() { artifact.release() }
}
