import Benchmark
import BenchSupport

/// The write path of SyncLedger beside raw LMDB, all in one run so the ratios compare numbers
/// taken on the same machine at the same time (`tools/bench` prints them as one table).
///
/// Every benchmark gets a fresh data directory under the temporary directory, made in its setup
/// and removed in its teardown. An iteration performs exactly `scalingFactor` operations (one
/// operation is one acknowledged write: an `updateRecords` call of one record, or its raw-LMDB
/// counterpart), so the built-in `throughput` metric counts operations; ``WriteMetrics`` adds
/// the exact operations per second, operations per commit and CPU time per operation.
let benchmarks: @Sendable () -> Void = {
    // The benchmark package runs benchmarks in name order (all "raw LMDB …" ones, then the
    // "updateRecords …" ones), each in a process of its own, whatever the order here.

    // Durable, one writer: the reference (one put per commit), the ledger's puts, the ledger.
    writeBenchmark("raw LMDB durable 1 put per commit", scalingFactor: .one) {
        try RawSinglePutFixture(durable: true)
    }
    writeBenchmark("raw LMDB durable, same puts", scalingFactor: .one) {
        try RawSamePutsFixture(durable: true, perCommit: 1)
    }
    writeBenchmark("updateRecords durable 1 caller", scalingFactor: .one) {
        try await LedgerFixture(durable: true, callers: 1)
    }

    // Durable, grouped: the ledger's puts 64 to a commit, then 64 concurrent callers sharing
    // each iteration's operations. The raw iteration's 1,000 operations take 15 commits of 64
    // and one of 40.
    writeBenchmark("raw LMDB durable, same puts, 64 per commit", scalingFactor: .kilo) {
        try RawSamePutsFixture(durable: true, perCommit: 64)
    }
    writeBenchmark("updateRecords durable 64 callers", scalingFactor: .kilo) {
        try await LedgerFixture(durable: true, callers: 64)
    }

    // Fast mode (no fsync): the same four comparisons.
    writeBenchmark("raw LMDB fast 1 put per commit", scalingFactor: .kilo) {
        try RawSinglePutFixture(durable: false)
    }
    writeBenchmark("raw LMDB fast, same puts", scalingFactor: .kilo) {
        try RawSamePutsFixture(durable: false, perCommit: 1)
    }
    writeBenchmark("updateRecords fast 1 caller", scalingFactor: .kilo) {
        try await LedgerFixture(durable: false, callers: 1)
    }
    writeBenchmark("raw LMDB fast, same puts, 64 per commit", scalingFactor: .kilo) {
        try RawSamePutsFixture(durable: false, perCommit: 64)
    }
    writeBenchmark("updateRecords fast 64 callers", scalingFactor: .kilo) {
        try await LedgerFixture(durable: false, callers: 64)
    }
}

/// The suite's custom metrics, measured once per iteration. Every benchmark records the same
/// set (the JMH export that `tools/bench` reads assumes it).
enum WriteMetrics {
    /// Operations per second over the iteration. Exact, where the built-in `throughput` is a
    /// whole number of iterations per second (coarse when an iteration takes milliseconds).
    static var opsPerSecond: BenchmarkMetric {
        .custom("opsPerSecond", polarity: .prefersLarger, useScalingFactor: false)
    }

    /// Operations per LMDB commit, rounded: how well group commit batched them.
    static var opsPerCommit: BenchmarkMetric {
        .custom("opsPerCommit", polarity: .prefersLarger, useScalingFactor: false)
    }

    /// CPU time of the whole process (every thread) per operation, in nanoseconds.
    static var cpuNanosPerOp: BenchmarkMetric {
        .custom("cpuNanosPerOp", polarity: .prefersSmaller, useScalingFactor: false)
    }

    /// The metrics every benchmark of the suite records.
    static var all: [BenchmarkMetric] {
        [.throughput, .wallClock, .peakMemoryResident, opsPerSecond, opsPerCommit, cpuNanosPerOp]
    }
}

/// Holds a benchmark's fixture from its setup to its teardown, so the fixture (an open LMDB
/// environment) is released before the next benchmark starts rather than at exit.
final class FixtureSlot {
    /// The fixture, between setup and teardown.
    var fixture: (any WriteFixture)?
}

/// Registers a benchmark whose iterations each run `scalingFactor` operations on a fixture that
/// `make` creates in the benchmark's setup; the fixture is torn down in the teardown.
///
/// Each benchmark runs for about three seconds.
func writeBenchmark(_ name: String, scalingFactor: BenchmarkScalingFactor, make: @escaping () async throws -> any WriteFixture) {
    let slot = FixtureSlot()
    let configuration = Benchmark.Configuration(
        metrics: WriteMetrics.all,
        // Single operations are short and noisy; batches of a thousand warm up in one go.
        warmupIterations: scalingFactor == .one ? 20 : 1,
        scalingFactor: scalingFactor,
        maxDuration: .seconds(3),
        maxIterations: 1_000_000
    )
    Benchmark(name, configuration: configuration) { benchmark in
        guard let fixture = slot.fixture else {
            benchmark.error("\(name): no fixture (its setup failed)")
            return
        }
        let operations = benchmark.scaledIterations.count
        let cpuStart = processCPUNanoseconds()
        let start = ContinuousClock.now
        let commits = try await fixture.run(operations: operations)
        let elapsed = ContinuousClock.now - start
        let cpu = processCPUNanoseconds() - cpuStart
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        benchmark.measurement(WriteMetrics.opsPerSecond, Int((Double(operations) / seconds).rounded()))
        benchmark.measurement(WriteMetrics.opsPerCommit, Int((Double(operations) / Double(max(commits, 1))).rounded()))
        benchmark.measurement(WriteMetrics.cpuNanosPerOp, Int(cpu) / operations)
    } setup: {
        slot.fixture = try await make()
    } teardown: {
        slot.fixture?.tearDown()
        slot.fixture = nil
    }
}
