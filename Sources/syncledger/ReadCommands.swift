import ArgumentParser
import Foundation
import SyncLedger

/// Prints the current records of a dataset.
struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a dataset's records (or one record); exit 1 when the key has no record.",
        discussion: "Reads the dataset's view (no sync session is counted, nothing is written).")
    @OptionGroup var data: DataDirectory
    @OptionGroup var target: StreamOptions
    @Flag(help: "Print one JSON object: stream, exists, deleted, syncCount, recordCount, bytes, records [{key, value, syncCount, lastModified, lastModifiedBy}].") var json = false
    @Argument(help: "Only this key.") var key: String?

    func run() async throws {
        let stream = try target.stream()
        let ledger = try data.open()
        defer { ledger.close() }
        // The current state, read from the views: no sync session is counted.
        let (meta, records) = try ledger.snapshot(stream)
        let live = records.filter { $0.value != nil && (key == nil || RecordKey($0.key) == RecordKey(key!)) }
            .map { (key: RecordKey($0.key), value: $0.state) }.sorted { $0.key < $1.key }
        if let key, live.isEmpty {
            throw CLIError("\(stream) has no record \(quote(key)) (sync count \(meta?.syncCount ?? 0))")
        }
        if json {
            printLine(datasetJSON(stream, meta, live))
            return
        }
        if meta == nil || meta?.deleted == true, key == nil {
            print("(dataset \(stream) \(meta == nil ? "does not exist" : "was deleted"); sync count \(meta?.syncCount ?? 0))")
        }
        for (recordKey, state) in live {
            print("\(recordKey.string)\t\(state.value!)\t(sync count \(state.syncCount), by \(state.lastModifiedBy))")
        }
    }
}

/// Prints the history of one key.
struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print every change of one key (and every delete of its dataset).")
    @OptionGroup var data: DataDirectory
    @OptionGroup var target: StreamOptions
    @Flag(help: "One JSON object per change: offset, sequence, time, author, device, op, value.") var json = false
    @Argument var key: String

    func run() async throws {
        let stream = try target.stream()
        let ledger = try data.open()
        defer { ledger.close() }
        try ledger.forEachEntry(in: stream) { entry in
            for event in entry.events where event.key.map({ RecordKey($0) == RecordKey(key) }) ?? true {
                if json {
                    var members: [(String, JSON)] = [
                        ("offset", .uint(entry.offset)), ("sequence", .uint(entry.sequence)), ("time", .time(entry.time)),
                        ("author", .string(entry.author)), ("device", .string(entry.device)),
                    ]
                    switch event {
                    case .put(_, let value, _): members += [("op", "put"), ("value", .string(value))]
                    case .erased: members += [("op", "put"), ("value", .null), ("erased", .bool(true))]
                    case .remove: members.append(("op", "remove"))
                    case .deleteDataset: members.append(("op", "deleteDataset"))
                    }
                    printLine(.object(members))
                } else {
                    let what: String = switch event {
                    case .put(_, let value, _): "put \(value)"
                    case .erased: "put [erased by a redaction]"
                    case .remove: "remove"
                    case .deleteDataset: "dataset deleted"
                    }
                    print("@\(entry.offset) \(ISOTime.format(entry.time)) by \(entry.author)\(entry.device.map { " on \($0)" } ?? ""): \(what)")
                }
            }
            return true
        }
    }
}

/// Prints a dataset as it was at a sync count or a time.
struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a dataset as it was at a sync count or time, replayed from the log.")
    @OptionGroup var data: DataDirectory
    @OptionGroup var target: StreamOptions
    @Option(help: "Replay up to and including this sync count (at most the dataset's).") var syncCount: UInt64?
    @Option(help: "Replay every entry at or before this time (\(ISOTime.expected); times printed by `log` replay exactly).") var time: String?
    @Flag(help: "Print one JSON object, as get --json prints the dataset now.") var json = false

    func validate() throws {
        guard (syncCount == nil) != (time == nil) else { throw ValidationError("give exactly one of --sync-count and --time") }
        if let time, ISOTime.parse(time) == nil { throw ValidationError("--time \(time) is not \(ISOTime.expected)") }
    }

    func run() async throws {
        let stream = try target.stream()
        let ledger = try data.open()
        defer { ledger.close() }
        let view: MemoryDatasetView
        if let syncCount {
            view = try ledger.dataset(stream, asOfSyncCount: syncCount)
            // Offsets run 1…head without gaps, so replaying stops short only past the head.
            let head = view.dataset?.syncCount ?? 0
            if syncCount > head {
                throw CLIError("dataset \(stream) has sync count \(head); --sync-count \(syncCount) is past its last entry")
            }
        } else {
            view = try ledger.dataset(stream, asOf: ISOTime.parse(time!)!)
        }
        let records = view.liveRecords.sorted { $0.key < $1.key }
        let meta = view.dataset
        if json {
            printLine(datasetJSON(stream, meta, view.records.filter { $0.value.value != nil }.sorted { $0.key < $1.key }))
            return
        }
        guard let meta else {
            print("(no entries yet at that point)")
            return
        }
        print("sync count \(meta.syncCount), \(meta.recordCount) records, \(meta.bytes) bytes\(meta.deleted ? ", deleted" : "")")
        for (key, value) in records { print("\(key.string)\t\(value)") }
    }
}

/// A dataset's state as `get --json` and `replay --json` print it: stream, exists, deleted,
/// syncCount, recordCount, bytes, and its live records in key order (key, value, syncCount,
/// lastModified, lastModifiedBy).
func datasetJSON(_ stream: StreamName, _ meta: DatasetState?, _ records: [(key: RecordKey, value: RecordState)]) -> JSON {
    [
        "stream": .stream(stream), "exists": .bool(meta.map { !$0.deleted } ?? false), "deleted": .bool(meta?.deleted ?? false),
        "syncCount": .uint(meta?.syncCount ?? 0), "recordCount": .uint(meta?.recordCount ?? 0), "bytes": .uint(meta?.bytes ?? 0),
        "records": .array(records.map { record in
            ["key": .string(record.key.string), "value": .string(record.value.value), "syncCount": .uint(record.value.syncCount),
             "lastModified": .time(record.value.lastModified), "lastModifiedBy": .string(record.value.lastModifiedBy)]
        }),
    ]
}
