import ArgumentParser
import Foundation
import LedgerStorage
import SyncLedger

/// `syncledger redact`: erases an identity's values, a dataset's, or one key's, across the
/// whole history, keeping the hash chain verifiable.
struct Redact: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Erase the values of an identity, a dataset or one key across the whole history (the chain still verifies).",
        discussion: """
            The current state drops them through an ordinary entry (a dataset delete, or the key's \
            removal), so devices drop them at their next sync; every earlier entry keeps its keys, \
            times and the values' salted commitments but loses the values; the redaction is \
            recorded, with its reason and author, in the pool's `redactions` system stream. \
            Followers erase their copies when they replicate that record. An identity merged \
            into another left copies of its datasets there (D.<id>): they are redacted too, each \
            recorded in the survivor's redactions. Exports and stream \
            deliveries made before cannot be recalled. Run `syncledger compact` afterwards (with \
            the server stopped) to take the erased bytes out of the data file.
            """)
    @OptionGroup var data: DataDirectory
    @Option(help: "Identity pool id.") var pool: String
    @Option(help: "Identity id.") var identity: String
    @Option(help: "Only this dataset.") var dataset: String?
    @Option(help: "Only this record key (with --dataset).") var key: String?
    @Option(help: "Why (recorded with the redaction; required).") var reason: String
    @Option(help: "Who asks (recorded as the author).") var author = "cli"
    @Flag(help: "Print the report as JSON.") var json = false

    func validate() throws {
        if key != nil, dataset == nil { throw ValidationError("--key needs --dataset: a key is redacted within one dataset") }
        if reason.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { throw ValidationError("--reason must say why") }
    }

    func run() async throws {
        var options = LedgerOptions()
        options.secretsDirectory = secretsDirectory(data.secrets)
        options.migrate = true  // it writes: an older directory is migrated, as put does
        let ledger = try openLedger(at: data.data, options: options, create: false)
        defer { ledger.close() }
        let report = try await ledger.redact(pool: try IdentityPoolID(pool), identity: try IdentityID(identity),
                                             dataset: try dataset.map { try DatasetName($0) }, key: key, reason: reason, author: author)
        if json {
            printLine([
                "sequence": .uint(report.sequence), "erasedValues": .int(Int64(report.erasedValues)),
                "entriesRewritten": .int(Int64(report.entriesRewritten)), "streams": .int(Int64(report.streams)),
                "removals": .array(report.redaction.removals.map { .uint($0) }), "identity": .string(identity),
                "dataset": .string(dataset), "key": .string(key), "reason": .string(report.redaction.reason), "by": .string(report.redaction.by),
                "copies": .array(report.copies.map { copy -> JSON in
                    ["sequence": .uint(copy.sequence), "identity": .string(copy.redaction.identity), "dataset": .string(copy.redaction.dataset)]
                }),
            ])
        } else {
            let what = key.map { "key \($0) of dataset \(dataset!)" } ?? dataset.map { "dataset \($0)" } ?? "every dataset"
            print("Redacted \(what) of \(identity): \(report.erasedValues) values erased in \(report.entriesRewritten) entries, "
                  + "\(report.redaction.removals.count) removals; recorded at sequence \(report.sequence). "
                  + report.copies.map { "Also its copy \($0.redaction.dataset ?? "") in identity \($0.redaction.identity) (an identity merge made it). " }.joined()
                  + "Run syncledger compact (server stopped) to take the bytes out of the data file.")
        }
    }
}

/// `syncledger compact`: rewrites the data file with only live data.
struct Compact: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Rewrite the data file with only its live data (after a redaction: without the erased bytes).",
        discussion: "The server must be stopped: this takes the data directory's lock, as the server does.")
    @OptionGroup var data: DataDirectory
    @Flag(help: "Print the report as JSON.") var json = false

    func run() async throws {
        let lockPath = (data.data as NSString).appendingPathComponent("server.lock")
        guard FileManager.default.fileExists(atPath: (data.data as NSString).appendingPathComponent("data.mdb")) else {
            throw CLIError("there is no ledger at \(data.data); check --data")
        }
        let lock: FileLock
        do { lock = try FileLock(path: lockPath) } catch let held as FileLock.Held {
            throw CLIError("a server is using \(data.data) (\(held.holder.map { "process \($0)" } ?? "another process") holds \(lockPath)); stop it before compacting")
        }
        defer { lock.unlock() }
        let terminal = isatty(STDERR_FILENO) == 1
        var last = ContinuousClock.now
        let report = try Ledger.compact(directory: data.data) { pairs in
            guard terminal, ContinuousClock.now - last > .milliseconds(200) else { return }
            last = .now
            FileHandle.standardError.write(Data("\rcompacting: \(pairs) pairs copied".utf8))
        }
        if terminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        if json {
            printLine(["bytesBefore": .int(Int64(report.bytesBefore)), "bytesAfter": .int(Int64(report.bytesAfter)), "pairs": .int(Int64(report.pairs))])
        } else {
            print("Compacted \(data.data): \(report.bytesBefore) → \(report.bytesAfter) bytes, \(report.pairs) pairs.")
        }
    }
}
