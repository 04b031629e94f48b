import ArgumentParser
import Foundation
import SyncLedger
#if canImport(Glibc)
import Glibc
#endif

/// Progress on a terminal (entries, bytes, rate, ETA); nothing when standard error is piped.
struct Progress {
    let total: UInt64?
    let started = Date()
    let enabled = isatty(STDERR_FILENO) == 1
    var lastDraw = Date.distantPast

    mutating func update(entries: UInt64, bytes: UInt64, force: Bool = false) {
        guard enabled, force || Date().timeIntervalSince(lastDraw) > 0.2 else { return }
        lastDraw = Date()
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        let rate = Double(entries) / elapsed
        var line = "\r\(entries) entries, \(bytes / 1024) KiB, \(Int(rate)) entries/s"
        if let total, total > entries, rate > 0 { line += ", ETA \(Int(Double(total - entries) / rate)) s" }
        FileHandle.standardError.write(Data((line + "   ").utf8))
    }

    func finish() {
        if enabled { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// `syncledger export`: writes the log as segment files.
struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Write log entries as zstd segment files (the change feed, or one stream).")
    @OptionGroup var data: DataOptions
    @Option(help: "Only this stream, as POOL/IDENTITY/DATASET.") var stream: String?
    @Option(help: "Start after this commit sequence (feed) or offset (stream).") var after: UInt64 = 0
    @Option(help: "Directory to write the segment files to.") var out: String
    @Option(help: "Target size of a segment's encoded entries, in bytes.") var targetBytes = 4 << 20
    @Option(help: "zstd compression level (1-19).") var level: Int32 = 3

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let target: StreamName? = try stream.map { text in
            let parts = text.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3 else { throw ValidationError("--stream must be POOL/IDENTITY/DATASET") }
            return try StreamName(pool: parts[0], identity: parts[1], dataset: parts[2])
        }
        var progress = Progress(total: target == nil ? try ledger.lastSequence - min(after, try ledger.lastSequence) : nil)
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
            try Data(encoded).write(to: URL(fileURLWithPath: out).appendingPathComponent(name))
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

/// `syncledger import`: merges segment files, in order.
struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Merge segment files into the ledger, in the order given; stops at the first one refused.")
    @OptionGroup var data: DataOptions
    @Argument(help: "Segment files.") var files: [String]

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        var progress = Progress(total: nil)
        var total = MergeReport()
        var bytes: UInt64 = 0
        for file in files {
            let contents: Data
            do { contents = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
                throw ValidationError("cannot read \(file): \(error.localizedDescription)")
            }
            do {
                let report = try await ledger.merge(bytes: Array(contents))
                total.applied += report.applied
                total.skipped += report.skipped
            } catch let error as LedgerError {
                progress.finish()
                FileHandle.standardError.write(Data("syncledger import: \(file): \(error.message)\n".utf8))
                print("imported \(total.applied) entries (\(total.skipped) already present) before \(file)")
                throw ExitCode(1)
            }
            bytes += UInt64(contents.count)
            progress.update(entries: UInt64(total.applied + total.skipped), bytes: bytes)
        }
        progress.finish()
        print("imported \(total.applied) entries, skipped \(total.skipped) already present, from \(files.count) files")
    }
}

/// `syncledger dict`: zstd dictionaries for small segments.
struct Dict: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "zstd dictionaries for small segments.", subcommands: [Train.self])

    /// `syncledger dict train --pool P`.
    struct Train: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Train a pool's dictionary from its entries; print the compression ratio of ~1 KiB segments without and with it.")
        @OptionGroup var data: DataOptions
        @Option(help: "The identity pool.") var pool: String
        @Option(help: "Size of the small segments to measure, in bytes.") var segmentBytes = 1024

        func run() async throws {
            let poolID = try IdentityPoolID(pool)
            let ledger = try data.open()
            defer { ledger.close() }
            func ratio() throws -> (Double, Int) {
                var plain = 0, packed = 0, count = 0
                for (stream, _) in try ledger.streams(pool: poolID) where stream.identity != Ledger.systemIdentity && count < 200 {
                    guard let segment = try ledger.streamSegment(stream, after: 0, maxBytes: segmentBytes) else { continue }
                    let bytes = try segment.encoded()
                    plain += Int(try ledger.decodeSegment(bytes).uncompressedSize)
                    packed += bytes.count
                    count += 1
                }
                return (packed == 0 ? 0 : Double(plain) / Double(packed), count)
            }
            let (before, segments) = try ratio()
            let dictionary = try await ledger.trainDictionary(pool: poolID)
            let (after, _) = try ratio()
            print("dictionary \(dictionary.id) for pool \(poolID): \(dictionary.bytes.count) bytes")
            print(String(format: "~%d-byte segments (%d): ratio %.2f without, %.2f with the dictionary (%.2fx)", segmentBytes, segments, before, after, before > 0 ? after / before : 0))
        }
    }
}
