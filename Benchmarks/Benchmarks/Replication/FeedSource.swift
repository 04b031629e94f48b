import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger

/// An error of the benchmark harness itself (missing data, a result that does not add up).
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The source ledger of the merge, segment and pull benchmarks, built once per run (see
/// ``SharedArtifacts``): 50,000 entries of one record each over 64 streams, written by 64
/// concurrent `updateRecords` callers in fast mode, and what is exported from it:
///
/// - `merge-NNN.slseg`: the feed cut into segments of exactly 1,000 entries (in feed order, so
///   merging them in turn into an empty ledger applies every entry);
/// - `codec.slseg`: `feedSegment(after: 0)` with the default 4 MiB target, zstd level 3;
/// - `pull.slseg`, `info.json` and `pull-plain.bin`: what `feedSegment(after: pullAfter,
///   level: 1)` returns, its entry count and its uncompressed entry bytes, for the raw
///   baselines of the pull benchmark and the wire-ratio benchmarks;
/// - `pool.dict` and `stream.slseg`: the pool's zstd dictionary (`Ledger.trainDictionary`,
///   trained after everything above was exported) and up to 64 KiB of stream 0's entries from
///   the middle of the stream, encoded without a dictionary.
enum FeedSource {
    static let entries = 50_000
    static let streams = 64
    static let mergeSegmentEntries = 1_000
    static let mergeSegments = 48
    /// The commit sequence a pull starts after.
    static let pullAfter: UInt64 = 16_000

    /// What the pull benchmarks need to know about the pull segment.
    struct Info: Codable {
        var pullAfter: UInt64
        var pullEntries: Int
        var pullPlainBytes: Int
        var buildSeconds: Double
        /// The id of the pool's trained zstd dictionary (`pool.dict`).
        var dictionaryID: UInt32
    }

    /// The artifact, built if this run has not built it yet.
    static func artifact() async throws -> Artifact {
        try await SharedArtifacts.artifact("feed-source") { path in
            let ledgerPath = (path as NSString).appendingPathComponent("ledger")
            let (ledger, buildSeconds) = try await buildSourceLedger(directory: ledgerPath, spec: SourceSpec(entries: entries, streams: streams))
            defer { ledger.close() }
            // Every entry, in one segment, cut into merge segments of 1,000.
            guard let all = try ledger.feedSegment(after: 0, maxBytes: 256 << 20), all.entries.count == entries else {
                throw HarnessError("the source ledger's feed does not hold \(entries) entries")
            }
            for i in 0..<mergeSegments {
                let slice = Array(all.entries[i * mergeSegmentEntries..<(i + 1) * mergeSegmentEntries])
                let bytes = try Segment(scope: .feed, entries: slice, compressionLevel: 3).encoded()
                try Data(bytes).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent(String(format: "merge-%03d.slseg", i))))
            }
            guard let codec = try ledger.feedSegment(after: 0) else { throw HarnessError("empty feed") }
            try Data(try codec.encoded()).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent("codec.slseg")))
            guard let pull = try ledger.feedSegment(after: pullAfter, level: 1) else { throw HarnessError("nothing after \(pullAfter)") }
            let pullBytes = try pull.encoded()
            try Data(pullBytes).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent("pull.slseg")))
            let payload = try SegmentPayload(encoded: pullBytes)
            try Data(payload.plain).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent("pull-plain.bin")))
            // Last, as it appends an entry (to the pool's configuration stream): the pool's zstd
            // dictionary, and a stretch of stream 0 from its middle, saved without one.
            let dictionary = try await ledger.trainDictionary(pool: try IdentityPoolID(EventData.pool))
            try Data(dictionary.bytes).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent("pool.dict")))
            let stream = try EventData.stream(0)
            let head = try ledger.listRecords(stream).datasetSyncCount
            guard var stretch = try ledger.streamSegment(stream, after: head / 2, maxBytes: 64 << 10) else {
                throw HarnessError("stream 0 has nothing after offset \(head / 2)")
            }
            stretch.dictionary = nil
            try Data(try stretch.encoded()).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent("stream.slseg")))
            let info = Info(pullAfter: pullAfter, pullEntries: pull.entries.count, pullPlainBytes: payload.plain.count, buildSeconds: buildSeconds,
                            dictionaryID: dictionary.id)
            try JSONEncoder().encode(info).write(to: URL(fileURLWithPath: (path as NSString).appendingPathComponent("info.json")))
        }
    }

    /// The source ledger's directory inside the artifact.
    static func ledgerPath(_ artifact: Artifact) -> String { artifact.file("ledger") }

    static func info(_ artifact: Artifact) throws -> Info {
        try JSONDecoder().decode(Info.self, from: Data(contentsOf: URL(fileURLWithPath: artifact.file("info.json"))))
    }

    /// The merge segments, decoded (which checks them).
    static func mergeSegments(_ artifact: Artifact) throws -> [Segment] {
        try (0..<mergeSegments).map { i in
            try Segment.decode(try readBytes(artifact.file(String(format: "merge-%03d.slseg", i))))
        }
    }
}

/// Reads a whole file.
func readBytes(_ path: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
}

/// The zstd frame of an encoded segment and what it decompresses to: the segment's entries as
/// they are before compression (the "payload"). Per docs/segment-format.md the frame is the
/// header's "compressed size" bytes just before the closing 32-byte checksum.
struct SegmentPayload {
    let segment: Segment
    let compressed: [UInt8]
    let plain: [UInt8]

    init(encoded: [UInt8]) throws {
        segment = try Segment.decode(encoded)
        let size = Int(segment.compressedSize)
        guard size > 0, encoded.count >= size + 32 else { throw HarnessError("a segment of \(encoded.count) bytes cannot hold \(size) compressed bytes") }
        compressed = Array(encoded[(encoded.count - 32 - size)..<(encoded.count - 32)])
        plain = try Zstd.decompress(compressed, limit: Int(segment.uncompressedSize))
        guard plain.count == Int(segment.uncompressedSize) else {
            throw HarnessError("the segment's frame decompressed to \(plain.count) bytes, its header says \(segment.uncompressedSize)")
        }
    }
}
