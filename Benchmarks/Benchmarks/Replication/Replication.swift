import Benchmark
import BenchSupport

/// Replication beside its baselines, all in one run (`tools/bench` prints them as one table):
///
/// - merge: `Ledger.merge` of 1,000-entry feed segments, durable and fast, beside raw LMDB doing
///   the same puts in the same transactions (the limit) and SQLite doing the same Cognito
///   semantics (the peer);
/// - segment codec: `Segment.encoded()` / `Segment.decode` of a ~4 MiB feed segment beside bare
///   zstd on the same bytes, and the wire ratio of segments from 4 KiB up (feed segments, and
///   a small stream segment with the pool's trained dictionary);
/// - serving a pull: `feedSegment` + `encoded()` at level 1 beside a raw cursor scan of the same
///   entries and bare zstd level 1 of the same bytes;
/// - export of 1,000,000 entries beside a raw scan + zstd of the same log, and disk bytes per
///   event beside raw LMDB doing the same puts.
///
/// The benchmark package runs benchmarks in name order, each in a process of its own: names
/// start with their group so that a figure and its baselines run one after the other. Data
/// they share is built once per run (``SharedArtifacts``).
let benchmarks: @Sendable () -> Void = {
    // Export of 1M entries. The build runs first (it sorts first) and leaves the ledger for the
    // two exports; it takes about half a minute, so each of these runs once.
    let once = MeasuredOptions(warmup: 0, maxIterations: 1, maxDuration: .seconds(1), longIterations: true)
    var sampled = once
    sampled.sampleHeap = true
    measuredBenchmark("export 1M: build source ledger, disk bytes", once) { ExportBuildFixture() }
    measuredBenchmark("export 1M: ledger feedSegment+encoded", sampled) { try await ExportLedgerFixture() }
    measuredBenchmark("export 1M: raw LMDB scan + zstd", sampled) { try await ExportRawFixture() }

    // Merge: one 1,000-entry segment per iteration, as many iterations as there are segments.
    let merge = MeasuredOptions(warmup: 1, maxIterations: FeedSource.mergeSegments - 1, maxDuration: .seconds(3))
    measuredBenchmark("merge durable: ledger", merge) { try await LedgerMergeFixture(durable: true) }
    measuredBenchmark("merge durable: raw LMDB same puts", merge) { try await RawMergeFixture(durable: true) }
    measuredBenchmark("merge durable: SQLite FULL", merge) { try await SQLiteMergeFixture(synchronousFull: true) }
    measuredBenchmark("merge fast: ledger", merge) { try await LedgerMergeFixture(durable: false) }
    measuredBenchmark("merge fast: raw LMDB same puts", merge) { try await RawMergeFixture(durable: false) }
    measuredBenchmark("merge fast: SQLite NORMAL", merge) { try await SQLiteMergeFixture(synchronousFull: false) }

    // Serving a pull.
    let pull = MeasuredOptions(warmup: 2, maxIterations: 200, maxDuration: .seconds(2))
    measuredBenchmark("pull: ledger feedSegment+encoded level 1", pull) { try await PullLedgerFixture() }
    measuredBenchmark("pull: raw LMDB cursor scan", pull) { try await PullScanFixture() }
    measuredBenchmark("pull: raw zstd level 1", pull) { try await PullZstdFixture() }

    // Segment codec and wire ratio.
    let codec = MeasuredOptions(warmup: 2, maxIterations: 200, maxDuration: .seconds(2))
    measuredBenchmark("segment encode: Segment.encoded", codec) { try await SegmentEncodeFixture() }
    measuredBenchmark("segment encode: raw zstd", codec) { try await RawCompressFixture() }
    measuredBenchmark("segment decode: Segment.decode", codec) { try await SegmentDecodeFixture() }
    measuredBenchmark("segment decode: raw zstd", codec) { try await RawDecompressFixture() }
    measuredBenchmark("segment decode: SHA-256 chain alone", codec) { try await ChainHashFixture() }
    let ratio = MeasuredOptions(warmup: 0, maxIterations: 3, maxDuration: .seconds(1))
    measuredBenchmark("wire ratio: 4 KiB segment", ratio) { try await WireRatioFixture(minimumPayload: 4 << 10) }
    measuredBenchmark("wire ratio: 64 KiB segment", ratio) { try await WireRatioFixture(minimumPayload: 64 << 10) }
    measuredBenchmark("wire ratio: 4 MiB segment", ratio) { try await WireRatioFixture(minimumPayload: 4 << 20) }
    measuredBenchmark("wire ratio: 4 KiB stream segment, pool dictionary", ratio) { try await StreamWireRatioFixture(minimumPayload: 4 << 10) }
    measuredBenchmark("wire ratio: 1 KiB stream segment, pool dictionary", ratio) { try await StreamWireRatioFixture(minimumPayload: 1 << 10) }
    measuredBenchmark("dictionary gain: 1 KiB stream segment, compressed entries", ratio) { try await StreamWireRatioFixture(minimumPayload: 1 << 10, frameOnly: true) }
}
