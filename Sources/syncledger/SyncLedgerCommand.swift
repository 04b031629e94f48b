import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger`: the command-line front of a ledger directory.
@main
struct SyncLedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncledger",
        abstract: "An event-sourced sync store with a history you can verify.",
        subcommands: [Serve.self, Credentials.self, Export.self, Import.self, Dict.self, Put.self, Get.self, Remove.self, Log.self, History.self, Replay.self, Verify.self, RebuildViews.self]
    )
}

/// Options every command shares: where the data lives.
struct DataOptions: ParsableArguments {
    @Option(name: .long, help: "The data directory.")
    var data: String = "syncledger-data"

    @Flag(name: .long, help: "Skip fsync on commit (faster; a power cut may lose the last writes).")
    var fast = false

    func open() throws -> Ledger {
        var options = LedgerOptions()
        options.durable = !fast
        return try Ledger(directory: data, options: options)
    }
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

/// Sets one or more records, as a device would: reads the current sync counts, then updates.
struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Set records: syncledger put KEY VALUE [KEY VALUE …]")
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Option(help: "The device making the change (recorded as its author).") var device: String?
    @Argument(help: "Alternating keys and values.") var pairs: [String]

    func validate() throws {
        guard !pairs.isEmpty, pairs.count % 2 == 0 else { throw ValidationError("give KEY VALUE pairs") }
    }

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let stream = try target.stream()
        let values = stride(from: 0, to: pairs.count, by: 2).map { (pairs[$0], pairs[$0 + 1]) }
        let result = try await writeWithCurrentCounts(ledger, stream) { counts in
            values.map { RecordPatch(op: .replace, key: $0.0, value: $0.1, syncCount: counts[$0.0] ?? 0) }
        }
        print("\(stream) sync count \(result.syncCount)")
    }
}

/// Removes records.
struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Remove records: syncledger remove KEY [KEY …]")
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Argument(help: "The keys to remove.") var keys: [String]

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let stream = try target.stream()
        let result = try await writeWithCurrentCounts(ledger, stream) { counts in
            keys.map { RecordPatch(op: .remove, key: $0, syncCount: counts[$0] ?? 0) }
        }
        print("\(stream) sync count \(result.syncCount)")
    }
}

/// Reads all current sync counts, builds patches from them and updates; retries a conflict
/// with another writer a few times.
func writeWithCurrentCounts(_ ledger: Ledger, _ stream: StreamName, _ patches: ([String: UInt64]) -> [RecordPatch]) async throws -> UpdateResult {
    var attempt = 0
    while true {
        var counts: [String: UInt64] = [:]
        var token: String?
        var session = ""
        repeat {
            let page = try ledger.listRecords(stream, nextToken: token)
            for record in page.records { counts[record.key] = record.syncCount }
            token = page.nextToken
            session = page.syncSessionToken
        } while token != nil
        do {
            return try await ledger.updateRecords(stream, patches: patches(counts), caller: "cli", sessionToken: session)
        } catch let error as LedgerError where error.code == .conflict && attempt < 5 {
            attempt += 1
        }
    }
}

/// Prints the current records of a dataset.
struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a dataset's records (or one record).")
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Argument(help: "Only this key.") var key: String?

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let stream = try target.stream()
        var token: String?
        var records: [Record] = []
        var page: RecordsPage
        repeat {
            page = try ledger.listRecords(stream, nextToken: token)
            records += page.records
            token = page.nextToken
        } while token != nil
        if !page.datasetExists { print("(dataset \(stream) does not exist; sync count \(page.datasetSyncCount))") }
        for record in records.sorted(by: { $0.key < $1.key }) where key == nil || record.key == key {
            guard let value = record.value else { continue }
            print("\(record.key)\t\(value)\t(sync count \(record.syncCount), by \(record.state.lastModifiedBy))")
        }
    }
}

func describe(_ entry: LogEntry) -> String {
    let events = entry.events.map { event -> String in
        switch event {
        case .put(let key, let value, _): "put \(key)=\(value.count > 60 ? String(value.prefix(60)) + "…" : value)"
        case .remove(let key, _): "remove \(key)"
        case .deleteDataset: "delete dataset"
        }
    }.joined(separator: ", ")
    return "#\(entry.sequence) \(entry.stream) @\(entry.offset) \(entry.time) by \(entry.author): \(events)"
}

/// Prints the change feed, or one stream's log.
struct Log: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print log entries: the whole change feed, or one dataset's stream with --stream.")
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Flag(help: "Only the stream named by --pool/--identity/--dataset.") var stream = false
    @Option(help: "Start after this commit sequence (feed) or from this offset (stream).") var from: UInt64 = 0
    @Option(help: "Print at most this many entries.") var limit = 1000

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        var printed = 0
        let body: (LogEntry) -> Bool = { entry in
            print(describe(entry))
            printed += 1
            return printed < limit
        }
        if stream {
            try ledger.forEachEntry(in: try target.stream(), from: from, body)
        } else {
            try ledger.forEachCommit(after: from, body)
        }
    }
}

/// Prints the history of one key.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print every change of one key.")
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Argument var key: String

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        try ledger.history(of: key, in: try target.stream()) { change in
            let what: String = switch change.event {
            case .put(_, let value, _): "put \(value)"
            case .remove: "remove"
            case .deleteDataset: "dataset deleted"
            }
            print("@\(change.offset) \(change.time) by \(change.author): \(what)")
            return true
        }
    }
}

/// Prints a dataset as it was at a sync count or a time.
struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a dataset as it was at a sync count or time, replayed from the log.")
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Option(help: "Replay up to and including this sync count.") var syncCount: UInt64?
    @Option(help: "Replay up to this time (ISO 8601, e.g. 2026-11-22T10:00:00Z).") var time: String?

    func validate() throws {
        guard (syncCount == nil) != (time == nil) else { throw ValidationError("give exactly one of --sync-count and --time") }
        if let time, ISO8601DateFormatter().date(from: time) == nil { throw ValidationError("--time \(time) is not ISO 8601") }
    }

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let stream = try target.stream()
        let view = if let syncCount {
            try ledger.dataset(stream, asOfSyncCount: syncCount)
        } else {
            try ledger.dataset(stream, asOf: Timestamp(ISO8601DateFormatter().date(from: time!)!))
        }
        guard let meta = view.dataset else {
            print("(no entries yet at that point)")
            return
        }
        print("sync count \(meta.syncCount), \(meta.recordCount) records, \(meta.bytes) bytes\(meta.deleted ? ", deleted" : "")")
        for (key, value) in view.liveRecords.sorted(by: { $0.key < $1.key }) { print("\(key)\t\(value)") }
    }
}

/// Verifies every hash chain and view.
struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Recompute every hash chain and view; exit 1 at the first problem.")
    @OptionGroup var data: DataOptions

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        let report = try ledger.verify()
        print(report)
        if !report.isValid { throw ExitCode(1) }
    }
}

/// Rebuilds the views from the log.
struct RebuildViews: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rebuild-views", abstract: "Recompute every view from the log.")
    @OptionGroup var data: DataOptions

    func run() async throws {
        let ledger = try data.open()
        defer { ledger.close() }
        try await ledger.rebuildViews()
        print(try ledger.verify())
    }
}
