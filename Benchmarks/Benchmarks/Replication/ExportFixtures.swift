import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The export benchmarks' source: a ledger of 1,000,000 entries of one record each over 128
/// streams, written in fast mode by 128 concurrent `updateRecords` callers (group commit
/// batches them). Artifact `export-1M` holds it in `ledger/`.
enum ExportSource {
    static let entries = 1_000_000
    static let streams = 128
    /// The export's segment size, as `syncledger export` uses by default.
    static let segmentBytes = 4 << 20

    static var spec: SourceSpec {
        var spec = SourceSpec(entries: entries, streams: streams)
        spec.initialMapSize = 2 << 30
        return spec
    }

    /// The artifact, built (untimed) if this run has not built it yet — when the benchmark
    /// that times the build did not run.
    static func artifact() async throws -> Artifact {
        try await SharedArtifacts.artifact("export-1M") { path in
            let (ledger, _) = try await buildSourceLedger(directory: (path as NSString).appendingPathComponent("ledger"), spec: spec)
            ledger.close()
        }
    }
}

/// Writes all of `bytes` to the file descriptor `fd`.
func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
    try bytes.withUnsafeBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            guard written > 0 else { throw HarnessError("write failed: errno \(errno)") }
            offset += written
        }
    }
}

/// Times the build of the export source (1,000,000 `updateRecords` calls in fast mode), then
/// measures disk bytes per event: the ledger's `diskBytes` against raw LMDB doing the same puts
/// (``RawPutBuilder``, for every entry of the ledger's feed, grouped into commits of the
/// ledger's average group size) in an environment of its own.
///
/// - `opsPerSecond`, `nanosPerIteration`: the ledger build alone (the raw copy is not timed);
/// - `figure`: the ledger's bytes per event × 1000; `baselineFigure`: raw LMDB's, × 1000.
///
/// The built ledger becomes the run's `export-1M` artifact, so the export benchmarks reuse it.
final class ExportBuildFixture: MeasuredFixture {
    init() {}

    func iterate() async throws -> Measured {
        let directory = try makeScratchDirectory("export-1M-build")
        let (ledger, buildSeconds) = try await buildSourceLedger(directory: (directory as NSString).appendingPathComponent("ledger"), spec: ExportSource.spec)
        let ledgerBytes = ledger.diskBytes
        let statistics = ledger.writerStatistics
        let groupSize = max(1, Int((Double(statistics.writes) / Double(max(statistics.commits, 1))).rounded()))

        let rawDirectory = try makeScratchDirectory("export-1M-raw-puts")
        defer { removeScratchDirectory(rawDirectory) }
        var options = EnvironmentOptions()
        options.durable = false
        options.initialMapSize = 2 << 30
        var entries = 0
        let rawBytes: Int
        do {
            let environment = try Environment(path: rawDirectory, options: options)
            let databases = try RawLedgerDatabases(environment)
            var builder = RawPutBuilder()
            var pending: [RawPut] = []
            var inGroup = 0
            var after: UInt64 = 0
            while let segment = try ledger.feedSegment(after: after, maxBytes: ExportSource.segmentBytes) {
                for e in segment.entries {
                    pending.append(contentsOf: builder.puts(for: try e.entry, body: Array(e.body)))
                    inGroup += 1
                    if inGroup == groupSize {
                        try environment.write { txn in try databases.apply(pending, in: txn) }
                        pending.removeAll(keepingCapacity: true)
                        inGroup = 0
                    }
                }
                entries += segment.entries.count
                after = segment.entries.last!.sequence
            }
            if !pending.isEmpty { try environment.write { txn in try databases.apply(pending, in: txn) } }
            rawBytes = environment.usedBytes
        }
        ledger.close()
        guard entries == ExportSource.entries else { throw HarnessError("the export source's feed holds \(entries) entries, not \(ExportSource.entries)") }
        if try !SharedArtifacts.publish("export-1M", directory: directory) {
            removeScratchDirectory(directory)
        }
        return Measured(operations: entries, figure: ledgerBytes * 1000 / entries, baselineFigure: rawBytes * 1000 / entries,
                        seconds: buildSeconds)
    }

    func tearDown() {}
}

/// Exports the whole 1,000,000-entry ledger as `syncledger export` does: `feedSegment` with a
/// 4 MiB target (zstd level 3) from sequence 0 until the feed ends, each segment `encoded()`
/// and written to `/dev/null`. Samples anonymous memory: it should stay near one segment's
/// worth, however large the ledger. `figure` is the number of segments.
final class ExportLedgerFixture: MeasuredFixture {
    let artifact: Artifact
    let ledger: Ledger
    let output: Int32

    init() async throws {
        artifact = try await ExportSource.artifact()
        var options = LedgerOptions()
        options.durable = false
        ledger = try Ledger(directory: artifact.file("ledger"), options: options)
        output = open("/dev/null", O_WRONLY)
        guard output >= 0 else { throw HarnessError("cannot open /dev/null") }
    }

    func iterate() async throws -> Measured {
        var after: UInt64 = 0
        var entries = 0, bytes = 0, segments = 0
        while let segment = try ledger.feedSegment(after: after, maxBytes: ExportSource.segmentBytes) {
            let encoded = try segment.encoded()
            try writeAll(output, encoded)
            entries += segment.entries.count
            bytes += encoded.count
            segments += 1
            after = segment.entries.last!.sequence
        }
        return Measured(operations: entries, bytes: bytes, figure: segments)
    }

    func tearDown() {
        close(output)
        ledger.close()
        artifact.release()
    }
}

/// The export's limit: a raw LMDB cursor walk over the same ledger's `log` database in one read
/// transaction, the stored entries gathered into 4 MiB chunks, each compressed with bare zstd
/// at level 3 and written to `/dev/null`. `figure` is the number of chunks.
final class ExportRawFixture: MeasuredFixture {
    let artifact: Artifact
    let environment: Environment
    let log: Database
    let output: Int32

    init() async throws {
        artifact = try await ExportSource.artifact()
        var options = EnvironmentOptions()
        options.durable = false
        environment = try Environment(path: artifact.file("ledger"), options: options)
        log = try environment.openDatabase("log")
        output = open("/dev/null", O_WRONLY)
        guard output >= 0 else { throw HarnessError("cannot open /dev/null") }
    }

    func iterate() async throws -> Measured {
        let output = self.output
        let (entries, bytes, chunks) = try environment.read { txn in
            try txn.withCursor(log) { cursor -> (Int, Int, Int) in
                var entries = 0, bytes = 0, chunks = 0
                var buffer: [UInt8] = []
                buffer.reserveCapacity(ExportSource.segmentBytes + (64 << 10))
                func flush() throws {
                    let compressed = try Zstd.compress(buffer, level: 3)
                    try writeAll(output, compressed)
                    bytes += compressed.count
                    chunks += 1
                    buffer.removeAll(keepingCapacity: true)
                }
                var pair = try cursor.first()
                while let current = pair {
                    buffer.append(contentsOf: current.key)
                    buffer.append(contentsOf: current.value)
                    entries += 1
                    if buffer.count >= ExportSource.segmentBytes { try flush() }
                    pair = try cursor.next()
                }
                if !buffer.isEmpty { try flush() }
                return (entries, bytes, chunks)
            }
        }
        return Measured(operations: entries, bytes: bytes, figure: chunks)
    }

    func tearDown() {
        close(output)
        artifact.release()
    }
}
