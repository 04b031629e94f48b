import Benchmark
import BenchSupport

/// Reads of the ledger beside their baselines, in one run (`tools/bench` prints them in the
/// same table as the write path and replication):
///
/// - `listRecords(after: N)` on a 1,000-record dataset when 10, 500 or all records changed
///   after N: the cost should follow the records returned, not the dataset's size;
/// - replay of a 20,000-entry stream (`dataset(_:asOfSyncCount:)`) beside reading the same
///   entries raw, with the replay's peak memory.
let benchmarks: @Sendable () -> Void = {
    let list = MeasuredOptions(warmup: 1, maxIterations: 1_000, maxDuration: .seconds(2))
    measuredBenchmark("listRecords: few changed, 10 of 1000", list) { try await ListRecordsFixture(after: 500) }
    measuredBenchmark("listRecords: many changed, 500 of 1000", list) { try await ListRecordsFixture(after: 10) }
    measuredBenchmark("listRecords: all 1000, after 0", list) { try await ListRecordsFixture(after: 0) }

    var replay = MeasuredOptions(warmup: 1, maxIterations: 200, maxDuration: .seconds(2))
    replay.sampleHeap = true
    measuredBenchmark("replay 20k: dataset asOfSyncCount", replay) { try await ReplayFixture() }
    measuredBenchmark("replay 20k: raw LMDB index walk + log get", replay) { try await ReplayRawFixture() }
}
