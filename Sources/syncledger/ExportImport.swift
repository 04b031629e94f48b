import ArgumentParser
import Foundation
import SyncLedger
import LedgerStorage
#if canImport(Glibc)
import Glibc
#endif

/// `syncledger export`: writes the log as segment files.
struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Write log entries as zstd segment files (the change feed, or one stream).")
    @OptionGroup var data: DataDirectory
    @Option(help: "Only this stream, as POOL/IDENTITY/DATASET.") var stream: String?
    @Option(help: "Start after this commit sequence (feed) or offset (stream).") var after: UInt64 = 0
    @Option(help: "Directory to write the segment files to (made, private to you, when missing).") var out: String
    @Option(help: "Target size of a segment's encoded entries, 1 to \(Self.maxTargetBytes) bytes (128 MiB: import reads segments up to 256 MiB).") var targetBytes = 4 << 20
    @Option(help: "zstd compression level, 1-19 (zstd's standard levels; 20-22 need far more memory to write and to read back).") var level: Int32 = 3

    static let maxTargetBytes = 128 << 20

    func validate() throws {
        guard (1...Self.maxTargetBytes).contains(targetBytes) else {
            throw ValidationError("--target-bytes must be 1 to \(Self.maxTargetBytes), not \(targetBytes)")
        }
        guard (1...19).contains(level) else { throw ValidationError("--level must be 1 to 19 (zstd's standard levels), not \(level)") }
        _ = try targetStream()
    }

    /// The stream of --stream, if given.
    func targetStream() throws -> StreamName? {
        try stream.map { text in
            let parts = text.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3 else { throw ValidationError("--stream must be POOL/IDENTITY/DATASET, not \(text)") }
            do { return try StreamName(pool: parts[0], identity: parts[1], dataset: parts[2]) } catch let error as LedgerError {
                throw ValidationError("--stream \(text): \(error.message)")
            }
        }
    }

    func run() async throws {
        let target = try targetStream()
        let ledger = try data.open()
        defer { ledger.close() }
        try makeOutputDirectory(out)
        let last = try ledger.lastSequence
        var progress = Progress(total: target == nil ? last - min(after, last) : nil)
        var position = after
        var entries: UInt64 = 0
        var bytes: UInt64 = 0
        var files = 0
        while true {
            let segment = if let target {
                try ledger.streamSegment(target, after: position, maxBytes: targetBytes, level: level)
            } else {
                try ledger.feedSegment(after: position, maxBytes: targetBytes, level: level)
            }
            guard let segment, let first = segment.entries.first, let last = segment.entries.last else { break }
            let encoded = try segment.encoded()
            let name = target == nil
                ? String(format: "feed-%016llu-%016llu.slseg", first.sequence, last.sequence)
                : String(format: "stream-%016llu-%016llu.slseg", first.offset, last.offset)
            try writePrivateFile(encoded, to: (out as NSString).appendingPathComponent(name))
            position = target == nil ? last.sequence : last.offset
            entries += UInt64(segment.entries.count)
            bytes += UInt64(encoded.count)
            files += 1
            progress.update(entries: entries, bytes: bytes)
        }
        progress.update(entries: entries, bytes: bytes, force: true)
        progress.finish()
        print("exported \(entries) entries in \(files) segment files (\(bytes) bytes) to \(out)")
    }
}

/// Makes the output directory (0700) when missing; refuses a file in its place or a directory
/// this process cannot write to, saying which and why.
func makeOutputDirectory(_ path: String) throws {
    var isDirectory: ObjCBool = false
    if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
        guard isDirectory.boolValue else { throw CLIError("the output directory \(path) is a file") }
    } else {
        try makeDirectories(path, what: "the output directory")
    }
    guard access(path, W_OK | X_OK) == 0 else {
        throw CLIError("cannot write to the output directory \(path): \(String(cString: strerror(errno)))")
    }
}

/// Creates `path` and its missing parents (0700), saying which part failed and why.
func makeDirectories(_ path: String, what: String) throws {
    do { try PrivateFiles.makeDirectories(path) } catch { throw CLIError("cannot create \(what) \(path): \(error.description)") }
}

/// Writes `bytes` to `path` (0600), whole or not at all.
func writePrivateFile(_ bytes: [UInt8], to path: String) throws {
    do { try PrivateFiles.writeFile(bytes, to: path) } catch { throw CLIError(error.description) }
}

/// `syncledger import`: merges segment files, in order.
struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Merge segment files into the ledger, in the order given; stops at the first one refused.",
        discussion: "Each file is merged whole or not at all; importing a file twice changes nothing. Makes the ledger when the data directory holds none.")
    @OptionGroup var data: DataOptions
    @Argument(help: "Segment files.") var files: [String] = []

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("give the segment files to import") }
    }

    func run() async throws {
        // Every file must be there before anything is merged (or a ledger made).
        for file in files {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory) else {
                throw CLIError("cannot read \(file): no such file")
            }
            guard !isDirectory.boolValue else { throw CLIError("cannot read \(file): it is a directory") }
            guard access(file, R_OK) == 0 else { throw CLIError("cannot read \(file): \(String(cString: strerror(errno)))") }
        }
        let ledger = try data.open(create: true)
        defer { ledger.close() }
        var progress = Progress(total: nil)
        var total = MergeReport()
        var bytes: UInt64 = 0
        for file in files {
            let contents: Data
            do { contents = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
                throw CLIError.file("cannot read", file, error)
            }
            do {
                let report = try await ledger.merge(bytes: Array(contents))
                total.applied += report.applied
                total.skipped += report.skipped
            } catch let error as LedgerError {
                progress.finish()
                print("imported \(total.applied) entries (\(total.skipped) already present) before \(file)")
                throw CLIError("\(file) refused: \(Failures.describe(error))")
            }
            bytes += UInt64(contents.count)
            progress.update(entries: UInt64(total.applied + total.skipped), bytes: bytes)
        }
        progress.finish()
        print("imported \(total.applied) entries, skipped \(total.skipped) already present, from \(files.count) files")
    }
}
