import Benchmark

/// The custom metrics of the replication and read benchmarks, measured once per iteration.
///
/// Every benchmark registered with ``measuredBenchmark(_:_:make:)`` records every one of them
/// (0 when it does not apply): the benchmark package's JMH export carries a metric over from
/// one benchmark to the next when the next does not record it, and `tools/bench` reads the
/// export. ``figure`` and ``baselineFigure`` mean what the benchmark's doc comment says
/// (a wire ratio, disk bytes per event, records returned).
public enum Figures {
    /// Operations (entries, calls) per second over the measured part of the iteration.
    public static var opsPerSecond: BenchmarkMetric { .custom("opsPerSecond", polarity: .prefersLarger, useScalingFactor: false) }
    /// Payload bytes (uncompressed entry bytes) per second.
    public static var bytesPerSecond: BenchmarkMetric { .custom("bytesPerSecond", polarity: .prefersLarger, useScalingFactor: false) }
    /// CPU time of the whole process (every thread) per operation, in nanoseconds.
    public static var cpuNanosPerOp: BenchmarkMetric { .custom("cpuNanosPerOp", polarity: .prefersSmaller, useScalingFactor: false) }
    /// Wall time of the measured part of the iteration, in nanoseconds.
    public static var nanosPerIteration: BenchmarkMetric { .custom("nanosPerIteration", polarity: .prefersSmaller, useScalingFactor: false) }
    /// The largest anonymous resident memory seen during the measured part (see ``HeapSampler``),
    /// in bytes; 0 when the benchmark does not sample memory.
    public static var peakHeapBytes: BenchmarkMetric { .custom("peakHeapBytes", polarity: .prefersSmaller, useScalingFactor: false) }
    /// ``peakHeapBytes`` less the anonymous resident memory when the measured part began.
    public static var heapGrowthBytes: BenchmarkMetric { .custom("heapGrowthBytes", polarity: .prefersSmaller, useScalingFactor: false) }
    /// A figure particular to the benchmark (see its documentation).
    public static var figure: BenchmarkMetric { .custom("figure", polarity: .prefersSmaller, useScalingFactor: false) }
    /// The figure's baseline, measured in the same iteration (see the benchmark's documentation).
    public static var baselineFigure: BenchmarkMetric { .custom("baselineFigure", polarity: .prefersSmaller, useScalingFactor: false) }

    /// The metrics every measured benchmark records (`throughput` because the JMH export needs it).
    public static var all: [BenchmarkMetric] {
        [.throughput, .wallClock, .peakMemoryResident,
         opsPerSecond, bytesPerSecond, cpuNanosPerOp, nanosPerIteration, peakHeapBytes, heapGrowthBytes, figure, baselineFigure]
    }
}

/// What the measured part of one iteration did.
public struct Measured: Sendable {
    /// Operations performed (entries merged, scanned or exported; calls made).
    public var operations: Int
    /// Payload bytes processed (0 when not meaningful).
    public var bytes: Int
    /// See ``Figures/figure``.
    public var figure: Int
    /// See ``Figures/baselineFigure``.
    public var baselineFigure: Int
    /// The seconds to count, when only part of the iteration is the thing measured (e.g. a
    /// build followed by an untimed check); nil: the whole of ``MeasuredFixture/iterate()``.
    public var seconds: Double?

    /// A result of `operations` operations over `bytes` payload bytes.
    public init(operations: Int, bytes: Int = 0, figure: Int = 0, baselineFigure: Int = 0, seconds: Double? = nil) {
        self.operations = operations
        self.bytes = bytes
        self.figure = figure
        self.baselineFigure = baselineFigure
        self.seconds = seconds
    }
}

/// Something a replication or read benchmark measures. Made in the benchmark's setup (which is
/// not timed) and torn down after its last iteration.
public protocol MeasuredFixture: AnyObject {
    /// The timed part of one iteration. Anything it needs is prepared in the fixture's init.
    func iterate() async throws -> Measured

    /// Releases everything and removes the fixture's scratch data.
    func tearDown()
}

/// How a measured benchmark runs.
public struct MeasuredOptions: Sendable {
    /// Untimed iterations first (their figures are recorded but are few beside the rest).
    public var warmup: Int
    /// At most this many iterations…
    public var maxIterations: Int
    /// …for at most about this long.
    public var maxDuration: Duration
    /// Whether to sample anonymous resident memory during the timed part (a thread reading
    /// `/proc/self/status` every 2 ms: a little CPU, so only where memory is the question).
    public var sampleHeap: Bool
    /// Whether an iteration takes more than a second. The benchmark package's own throughput
    /// metric (whole iterations per second) is then 0, which it does not record, and its JMH
    /// export leaves out a benchmark without one; so for such benchmarks its measurement window
    /// is closed before the iteration starts, and only the harness's own timing
    /// (``Figures/nanosPerIteration``) means anything — which is all `tools/bench` reads.
    public var longIterations: Bool

    /// A benchmark of up to `maxIterations` iterations or `maxDuration`.
    public init(warmup: Int = 1, maxIterations: Int = 1_000, maxDuration: Duration = .seconds(2), sampleHeap: Bool = false,
                longIterations: Bool = false) {
        self.warmup = warmup
        self.maxIterations = maxIterations
        self.maxDuration = maxDuration
        self.sampleHeap = sampleHeap
        self.longIterations = longIterations
    }
}

/// Holds a benchmark's fixture from its setup to its teardown, so the fixture (an open LMDB
/// environment, a SQLite connection) is released before the process ends.
final class MeasuredSlot {
    /// The fixture, between setup and teardown.
    var fixture: (any MeasuredFixture)?
}

/// Registers a benchmark whose iterations time `fixture.iterate()` on a fixture that `make`
/// creates in the benchmark's setup, and record every metric of ``Figures``.
public func measuredBenchmark(_ name: String, _ options: MeasuredOptions, make: @escaping () async throws -> any MeasuredFixture) {
    let slot = MeasuredSlot()
    let configuration = Benchmark.Configuration(
        metrics: Figures.all,
        warmupIterations: options.warmup,
        scalingFactor: .one,
        maxDuration: options.maxDuration,
        maxIterations: options.maxIterations
    )
    Benchmark(name, configuration: configuration) { benchmark in
        guard let fixture = slot.fixture else {
            benchmark.error("\(name): no fixture (its setup failed)")
            return
        }
        let sampler = options.sampleHeap ? HeapSampler() : nil
        benchmark.startMeasurement()
        if options.longIterations { benchmark.stopMeasurement() }
        let cpuStart = processCPUNanoseconds()
        let start = ContinuousClock.now
        let result = try await fixture.iterate()
        if !options.longIterations { benchmark.stopMeasurement() }
        let elapsed = result.seconds ?? seconds(ContinuousClock.now - start)
        let cpu = processCPUNanoseconds() - cpuStart
        let peak = sampler?.stop() ?? 0
        let operations = max(result.operations, 1)
        benchmark.measurement(Figures.opsPerSecond, Int((Double(result.operations) / elapsed).rounded()))
        benchmark.measurement(Figures.bytesPerSecond, Int((Double(result.bytes) / elapsed).rounded()))
        benchmark.measurement(Figures.cpuNanosPerOp, Int(cpu) / operations)
        benchmark.measurement(Figures.nanosPerIteration, Int((elapsed * 1e9).rounded()))
        benchmark.measurement(Figures.peakHeapBytes, peak)
        benchmark.measurement(Figures.heapGrowthBytes, max(0, peak - (sampler?.startBytes ?? 0)))
        benchmark.measurement(Figures.figure, max(0, result.figure))
        benchmark.measurement(Figures.baselineFigure, max(0, result.baselineFigure))
    } setup: {
        slot.fixture = try await make()
        HeapSampler.releaseFreedMemory()
    } teardown: {
        slot.fixture?.tearDown()
        slot.fixture = nil
    }
}
