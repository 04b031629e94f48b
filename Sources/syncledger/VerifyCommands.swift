import ArgumentParser
import Foundation
import SyncLedger
#if canImport(Glibc)
import Glibc
#endif

/// Verifies every hash chain and view.
struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Recompute every hash chain and view; exit 1 at the first problem.")
    @OptionGroup var data: DataDirectory
    @Flag(help: "Print one JSON object: valid, streams, entries, digest, problem.") var json = false
    @Option(help: .hidden) var progressAfter = 1.0

    func validate() throws {
        guard progressAfter.isFinite, (0...86_400).contains(progressAfter) else { throw ValidationError("--progress-after must be 0 to 86400 seconds") }
    }

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let total = try ledger.lastSequence
        let report = try await withElapsedProgress("verifying \(total) entries", after: progressAfter) { try ledger.verify() }
        if json {
            let problem: JSON = report.problem.map { p in
                ["stream": p.stream.map(JSON.stream) ?? .null, "offset": .uint(p.offset), "message": .string(p.message)]
            } ?? .null
            printLine([
                "valid": .bool(report.isValid), "streams": .int(Int64(report.streams)), "entries": .uint(report.entries),
                "digest": .string(report.digest), "problem": problem,
            ])
        } else {
            print(report)
        }
        if !report.isValid { throw ExitCode(1) }
    }
}

/// Rebuilds the views from the log.
struct RebuildViews: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rebuild-views", abstract: "Recompute every view from the log (and empty the stored Merkle tree, rebuilt on the next digest), then verify.")
    @OptionGroup var data: DataOptions

    func run() async throws {
        let ledger = try data.open(create: false)
        defer { ledger.close() }
        try await ledger.rebuildViews()
        try await ledger.resetMerkleTree()
        let report = try ledger.verify()
        print(report)
        if !report.isValid { throw ExitCode(1) }
    }
}

/// Runs `work` on a thread of its own; when standard error is a terminal and it takes longer
/// than `after` seconds, shows `label` and the time so far, then how long it took.
func withElapsedProgress<T: Sendable>(_ label: String, after delay: Double, _ work: @escaping @Sendable () throws -> T) async throws -> T {
    let enabled = isatty(STDERR_FILENO) == 1
    let clock = ContinuousClock()
    let started = clock.now
    let seconds: @Sendable () -> Double = {
        let elapsed = clock.now - started
        return elapsed.inSeconds
    }
    let ticker = Task {
        guard enabled else { return }
        try? await Task.sleep(for: .milliseconds(Int64(delay * 1000)))
        while !Task.isCancelled {
            FileHandle.standardError.write(Data(String(format: "\r%@… %.1f s   ", label, seconds()).utf8))
            try? await Task.sleep(for: .milliseconds(250))
        }
    }
    let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
        Thread.detachNewThread { continuation.resume(returning: Result { try work() }) }
    }
    ticker.cancel()
    await ticker.value
    if enabled, seconds() >= delay {
        FileHandle.standardError.write(Data(String(format: "\r%@: done in %.1f s   \n", label, seconds()).utf8))
    }
    return try result.get()
}
