import Foundation
import SyncLedger
import Synchronization

/// Hands out a fixed number of operations to concurrent callers, so a run performs exactly that
/// many in total however the callers are scheduled.
public final class WorkCounter: Sendable {
    private let remaining: Atomic<Int>

    /// A counter holding `operations` operations.
    public init(_ operations: Int) {
        remaining = Atomic(operations)
    }

    /// Takes one operation; false once all are taken.
    public func claim() -> Bool {
        remaining.wrappingSubtract(1, ordering: .relaxed).newValue >= 0
    }
}

/// What a source ledger holds: how many entries, over how many streams, written how.
public struct SourceSpec: Sendable {
    /// Log entries to write, each one `updateRecords` call replacing one record.
    public var entries: Int
    /// Streams (one identity's settings dataset each). With `oneStream`, every caller writes
    /// stream 0 instead.
    public var streams: Int
    /// Concurrent callers; group commit batches their calls.
    public var callers: Int
    /// Distinct record keys per stream; each entry replaces a random one of them.
    public var keysPerStream: Int = 32
    /// All callers write stream 0, each its own record key (a long single stream).
    public var oneStream = false
    /// The ledger's initial memory map (it grows by itself, but growing stops the writer).
    public var initialMapSize = 256 << 20

    /// `entries` entries over `streams` streams, one caller per stream.
    public init(entries: Int, streams: Int, callers: Int? = nil) {
        self.entries = entries
        self.streams = streams
        self.callers = callers ?? streams
    }
}

/// Opens a ledger in fast mode (no fsync) in `directory` and writes `spec.entries` entries with
/// `updateRecords`, from `spec.callers` concurrent callers.
///
/// - Returns: the open ledger and the seconds the writes took.
public func buildSourceLedger(directory: String, spec: SourceSpec) async throws -> (ledger: Ledger, seconds: Double) {
    var options = LedgerOptions()
    options.durable = false
    options.initialMapSize = spec.initialMapSize
    options.sessionLifetime = .seconds(6 * 3600)
    let ledger = try Ledger(directory: directory, options: options)
    let work = WorkCounter(spec.entries)
    let clock = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for caller in 0..<spec.callers {
            let stream = try EventData.stream(spec.oneStream ? 0 : caller % spec.streams)
            let token = try ledger.listRecords(stream).syncSessionToken
            let keys = spec.keysPerStream
            let oneStream = spec.oneStream
            group.addTask {
                var random = SplitMix64(seed: UInt64(caller))
                var counts = [UInt64](repeating: 0, count: max(keys, caller + 1))
                let device = EventData.device(caller)
                var time: Int64 = 1_732_000_000_000 + Int64(caller) * 1000
                while work.claim() {
                    let key = oneStream ? caller : Int(random.next() % UInt64(keys))
                    time += Int64(random.next() % 90_000)
                    let patch = RecordPatch(op: .replace, key: EventData.recordKey(key),
                                            value: EventData.value(key: key, time: time, random: &random),
                                            syncCount: counts[key])
                    let result = try await ledger.updateRecords(stream, patches: [patch], deviceID: device, sessionToken: token)
                    counts[key] = result.syncCount
                }
            }
        }
        try await group.waitForAll()
    }
    return (ledger, seconds(ContinuousClock.now - clock))
}

/// Data built once per `tools/bench` run and shared by the benchmark processes that need it
/// (the benchmark package runs every benchmark in a process of its own).
///
/// `tools/bench` sets `SYNCLEDGER_BENCH_SHARED` to a fresh directory and removes it afterwards.
/// Without it (a bare `swift package benchmark`), each process builds its own copy in a
/// temporary directory and removes it in its teardown.
public enum SharedArtifacts {
    /// The environment variable naming the shared directory.
    public static let environmentVariable = "SYNCLEDGER_BENCH_SHARED"

    /// The shared directory, if one was set.
    public static var root: String? {
        guard let value = ProcessInfo.processInfo.environment[environmentVariable], !value.isEmpty else { return nil }
        return value
    }

    /// The directory holding artifact `name`, built by `build` (which gets an empty directory
    /// and must close everything it opened there) when it is not there yet.
    public static func artifact(_ name: String, build: (String) async throws -> Void) async throws -> Artifact {
        guard let root else {
            let path = try makeScratchDirectory(name)
            try await build(path)
            settle()
            return Artifact(path: path, isTemporary: true)
        }
        let path = (root as NSString).appendingPathComponent(name)
        let marker = (path as NSString).appendingPathComponent(".complete")
        if FileManager.default.fileExists(atPath: marker) {
            return Artifact(path: path, isTemporary: false)
        }
        try? FileManager.default.removeItem(atPath: path)
        let building = path + ".building-\(ProcessInfo.processInfo.processIdentifier)"
        try? FileManager.default.removeItem(atPath: building)
        try FileManager.default.createDirectory(atPath: building, withIntermediateDirectories: true)
        try await build(building)
        settle()
        _ = FileManager.default.createFile(atPath: (building as NSString).appendingPathComponent(".complete"), contents: Data())
        try FileManager.default.moveItem(atPath: building, toPath: path)
        return Artifact(path: path, isTemporary: false)
    }

    /// Moves `directory` (a finished artifact made outside this mechanism, e.g. by a benchmark
    /// that times the build) into the shared directory as artifact `name`, unless the run has
    /// no shared directory or already has that artifact.
    ///
    /// - Returns: whether it was moved (else the caller still owns `directory`).
    public static func publish(_ name: String, directory: String) throws -> Bool {
        guard let root else { return false }
        let path = (root as NSString).appendingPathComponent(name)
        guard !FileManager.default.fileExists(atPath: (path as NSString).appendingPathComponent(".complete")) else { return false }
        settle()
        try? FileManager.default.removeItem(atPath: path)
        _ = FileManager.default.createFile(atPath: (directory as NSString).appendingPathComponent(".complete"), contents: Data())
        try FileManager.default.moveItem(atPath: directory, toPath: path)
        return true
    }

    /// Gives a closed ledger's writer thread a moment to let go of its LMDB environment, so that
    /// this process may open the same files again (LMDB forbids two open environments on one
    /// file in a process).
    static func settle() {
        Thread.sleep(forTimeInterval: 0.1)
    }
}

/// A directory from ``SharedArtifacts/artifact(_:build:)``.
public struct Artifact: Sendable {
    /// Where it is.
    public let path: String
    /// Whether this process made it for itself (and so removes it in ``release()``).
    public let isTemporary: Bool

    /// A file inside it.
    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    /// Removes it if it was made for this process only.
    public func release() {
        if isTemporary { removeScratchDirectory(path) }
    }
}
