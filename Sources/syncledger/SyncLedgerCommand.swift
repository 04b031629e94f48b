import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger`: the command-line front of a ledger directory.
@main
struct SyncLedgerCommand: AsyncParsableCommand {
    /// This build's version (`syncledger --version`).
    static let version = "0.9.0"

    static let configuration = CommandConfiguration(
        commandName: "syncledger",
        abstract: "An event-sourced sync store with a history you can verify.",
        discussion: """
            Every command works on the data directory given with --data (default ./syncledger-data, \
            relative to where you stand).

            Only serve, put, import and credentials create make a ledger when the directory holds \
            none (and say so on standard error). Every other command refuses such a directory \
            ("there is no ledger at …; check --data") rather than reading or writing an empty ledger.

            --json makes log, history, replay, get, blame, diff, stats, verify and credentials list print \
            JSON: one object per line for log, history, blame, diff, stats and credentials list, one \
            object for the others.
            """,
        version: version,
        subcommands: [
            Serve.self, Credentials.self, Put.self, Get.self, Remove.self, Log.self, History.self, Replay.self,
            Verify.self, RebuildViews.self, Export.self, Import.self, Dict.self, Push.self, Devices.self, Messages.self, Identities.self,
            ClientCommand.self, SyncTriggerCommands.self, Streams.self, Blame.self, Diff.self, Stats.self,
            DigestCommand.self, ProofCommand.self, Redact.self, Compact.self, UIURL.self, ClusterCommand.self,
        ]
    )

    /// Parses and runs a command; a mistyped subcommand gets a suggestion (exit 64), and every
    /// failure becomes one line on standard error (see ``Failures``).
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let unknown = Suggestions.unknownCommand(in: arguments, root: Self.self) {
            printError("syncledger: \(unknown)")
            Foundation.exit(ExitCode.validationFailure.rawValue)
        }
        do {
            var command = try await asyncParseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            Failures.exit(error)
        }
    }
}

/// Where the data lives, for commands that append to the log: `--data` and `--fast`.
struct DataOptions: ParsableArguments {
    @Option(name: .long, help: "The data directory.")
    var data: String = "syncledger-data"

    @Flag(name: .long, help: "Skip fsync on commit (faster; a power cut may lose the last writes).")
    var fast = false

    @Option(name: .long, help: "Where the secrets live (default DATA/secrets, or $SYNCLEDGER_SECRETS): keep them out of backups of the data.")
    var secrets: String?

    /// The ledger's options from these flags.
    var options: LedgerOptions {
        var options = LedgerOptions()
        options.durable = !fast
        options.secretsDirectory = secretsDirectory(secrets)
        return options
    }

    /// Opens the ledger; `create`: make one when the directory holds none (and say so).
    func open(create: Bool) throws -> Ledger {
        try openLedger(at: data, options: options, create: create)
    }
}

/// `--secrets`, else `$SYNCLEDGER_SECRETS`, else nil (the data directory's own `secrets`).
func secretsDirectory(_ flag: String?) -> String? {
    flag ?? ProcessInfo.processInfo.environment["SYNCLEDGER_SECRETS"].flatMap { $0.isEmpty ? nil : $0 }
}

/// Where the data lives, for commands that do not append to the log: `--data`.
struct DataDirectory: ParsableArguments {
    @Option(name: .long, help: "The data directory (it must hold a ledger).")
    var data: String = "syncledger-data"

    @Option(name: .long, help: "Where the secrets live (default DATA/secrets, or $SYNCLEDGER_SECRETS).")
    var secrets: String?

    /// Opens the ledger; `create`: make one when the directory holds none (and say so). A
    /// directory of an older format is refused, not migrated, unless the command creates.
    func open(create: Bool = false) throws -> Ledger {
        var options = LedgerOptions()
        options.secretsDirectory = secretsDirectory(secrets)
        options.migrate = create
        return try openLedger(at: data, options: options, create: create)
    }
}

/// Opens the ledger in `directory`. Without `create`, a directory that holds no ledger is an
/// error (``LedgerError`` `.notFound`: "there is no ledger at …; check --data"); with it, a new
/// ledger is made and standard error says where, so that a mistyped --data shows.
func openLedger(at directory: String, options: LedgerOptions, create: Bool) throws -> Ledger {
    var options = options
    options.createIfMissing = create
    let existed = FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent("data.mdb"))
    // Made here first so that a path that cannot be made says why (see makeDirectories).
    if create, !existed { try makeDirectories(directory, what: "the data directory") }
    let ledger = try Ledger(directory: directory, options: options)
    if !existed { printError("syncledger: made a new ledger in \(directory)") }
    return ledger
}

/// Which dataset a command works on.
struct StreamOptions: ParsableArguments {
    @Option(help: "Identity pool id.") var pool = "local:0"
    @Option(help: "Identity id.") var identity = "local:1"
    @Option(help: "Dataset name.") var dataset = "default"

    func stream() throws -> StreamName {
        try StreamName(pool: pool, identity: identity, dataset: dataset)
    }
}
