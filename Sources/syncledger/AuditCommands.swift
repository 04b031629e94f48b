import ArgumentParser
import Foundation
import SyncLedger

/// Prints each record of a dataset with the entry that last set it.
struct Blame: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print each record of a dataset with the entry that last set it: sync count, time, author, device.",
        discussion: """
            Now (the default) reads the dataset's view: one lookup per record, whatever the \
            length of its history. With --sync-count or --time, the dataset as it was there, \
            replayed from the log once. Memory follows the dataset's records, never its history.
            """)
    @OptionGroup var data: DataDirectory
    @OptionGroup var target: StreamOptions
    @Option(help: "Blame the dataset as it was right after this sync count.") var syncCount: UInt64?
    @Option(help: "Blame the dataset as it was at this time (\(ISOTime.expected)).") var time: String?
    @Option(help: "Only this record key.") var key: String?
    @Flag(help: "List removed records too (the entry that removed each).") var removed = false
    @OptionGroup var filters: EntryFilterOptions
    @Flag(help: "One JSON object per record: key, value (null when removed), op (put or remove), syncCount, sequence, time, author, device.") var json = false
    @Option(help: "Show progress on a terminal after this many seconds.") var progressAfter = 0.5

    func validate() throws {
        _ = try auditPoint(syncCount: syncCount, time: time, options: ("--sync-count", "--time"))
    }

    func run() async throws {
        let stream = try target.stream()
        var filter = try filters.filter()
        filter.key = key
        let point = try auditPoint(syncCount: syncCount, time: time, options: ("--sync-count", "--time"))
        let ledger = try data.open()
        defer { ledger.close() }
        var progress = Progress(total: nil, delay: progressAfter)
        let summary = try ledger.blame(stream, at: point, filter: filter, includeRemoved: removed,
                                       progress: { progress.update("replaying", done: $0, of: $1, unit: "entries") }) { line in
            if json {
                printLine(.object([("key", .string(line.key)), ("value", line.erased ? .null : .string(line.value)), ("op", line.isRemoved ? "remove" : "put")]
                                  + (line.erased ? [("erased", .bool(true))] : [])
                    + JSON.members(line.origin)))
            } else {
                print("\(line.key)\t\(line.erased ? "[erased by a redaction]" : line.value ?? "(removed)")\t\(describe(line.origin))")
            }
            return true
        }
        progress.finish()
        if !json, summary.lines == 0 {
            let state = summary.deleted ? "the dataset was deleted" : "no record matches"
            print("(\(state) at sync count \(summary.syncCount) of \(stream))")
        }
    }
}

/// Prints the records that differ between two points of a dataset.
struct Diff: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the records that differ between two sync counts or times of a dataset.",
        discussion: """
            Compares values: a record added (+), removed (-) or changed (~) between the first \
            point and the second (default: now), with the entry that made its value at the \
            second. One replay of the dataset's log up to the second point; memory follows the \
            dataset's records.
            """)
    @OptionGroup var data: DataDirectory
    @OptionGroup var target: StreamOptions
    @Option(help: "The first point: right after this sync count (0: the empty dataset).") var fromSyncCount: UInt64?
    @Option(help: "The first point: this time (\(ISOTime.expected)).") var fromTime: String?
    @Option(help: "The second point: right after this sync count (default: the last entry).") var toSyncCount: UInt64?
    @Option(help: "The second point: this time.") var toTime: String?
    @Option(help: "Only this record key.") var key: String?
    @OptionGroup var filters: EntryFilterOptions
    @Flag(help: "One JSON object per record: key, change (added, removed, changed), before, after, syncCount, sequence, time, author, device.") var json = false
    @Option(help: "Show progress on a terminal after this many seconds.") var progressAfter = 0.5

    func validate() throws {
        guard try auditPoint(syncCount: fromSyncCount, time: fromTime, options: ("--from-sync-count", "--from-time")) != nil else {
            throw ValidationError("give the first point: --from-sync-count or --from-time")
        }
        _ = try auditPoint(syncCount: toSyncCount, time: toTime, options: ("--to-sync-count", "--to-time"))
    }

    func run() async throws {
        let stream = try target.stream()
        var filter = try filters.filter()
        filter.key = key
        let from = try auditPoint(syncCount: fromSyncCount, time: fromTime, options: ("--from-sync-count", "--from-time"))!
        let to = try auditPoint(syncCount: toSyncCount, time: toTime, options: ("--to-sync-count", "--to-time"))
        let ledger = try data.open()
        defer { ledger.close() }
        var progress = Progress(total: nil, delay: progressAfter)
        let summary = try ledger.diff(stream, from: from, to: to, filter: filter,
                                      progress: { progress.update("replaying", done: $0, of: $1, unit: "entries") }) { line in
            if json {
                printLine(.object([("key", .string(line.key)), ("change", .string(line.change.rawValue)),
                                   ("before", .string(line.before)), ("after", .string(line.after))] + JSON.members(line.origin)))
            } else {
                let what = switch line.change {
                case .added: "+ \(line.key)\t\(line.after!)"
                case .removed: "- \(line.key)\t(was \(line.before!))"
                case .changed: "~ \(line.key)\t\(line.before!) → \(line.after!)"
                }
                print("\(what)\t\(describe(line.origin))")
            }
            return true
        }
        progress.finish()
        if !json {
            printError("syncledger: \(summary.lines) records differ between sync counts \(summary.fromSyncCount) and \(summary.toSyncCount) of \(stream)")
        }
    }
}

/// Prints entries, streams and bytes per pool, identity or dataset.
struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print entries, streams and stored bytes per pool, identity or dataset, and their total.",
        discussion: """
            Walks the streams in name order, finishing one row after the other (constant \
            memory). Bytes are the stored log values (stream id, hash, body) of the entries \
            counted, read without decoding their events; --counts-only skips them and, with no \
            author, device or time filter, reads nothing but the stream heads.
            """)
    @OptionGroup var data: DataDirectory
    @OptionGroup var scope: StreamScopeOptions
    @Option(help: "One row per pool, identity or dataset.") var by: Grouping = .identity
    @Flag(help: "Count entries and streams only, not bytes (faster).") var countsOnly = false
    @OptionGroup var filters: EntryFilterOptions
    @Flag(help: "One JSON object per row: pool, identity, dataset, streams, entries, bytes; the last line is the total, with \"total\": true.") var json = false
    @Option(help: "Show progress on a terminal after this many seconds.") var progressAfter = 0.5

    func run() async throws {
        var filter = try filters.filter()
        try scope.apply(to: &filter)
        let ledger = try data.open()
        defer { ledger.close() }
        var progress = Progress(total: nil, delay: progressAfter)
        if !json { print(["pool", "identity", "dataset"].prefix(by == .pool ? 1 : by == .identity ? 2 : 3).joined(separator: "\t") + "\tstreams\tentries\tbytes") }
        let total = try ledger.statistics(by: by.library, filter: filter, countBytes: !countsOnly,
                                          progress: { progress.update("counting", done: $0, of: $1, unit: "streams") }) { row in
            print(describe(row, total: false))
            return true
        }
        progress.finish()
        print(describe(total, total: true))
    }

    private func describe(_ row: StatisticsRow, total: Bool) -> String {
        if json {
            var members: [(String, JSON)] = [("pool", .string(row.pool?.rawValue))]
            if by != .pool { members.append(("identity", .string(row.identity?.rawValue))) }
            if by == .dataset { members.append(("dataset", .string(row.dataset?.rawValue))) }
            members += [("streams", .uint(row.streams)), ("entries", .uint(row.entries)),
                        ("bytes", countsOnly ? .null : .uint(row.bytes))]
            if total { members.append(("total", true)) }
            return JSON.object(members).compact
        }
        var names = [row.pool?.rawValue ?? "(total)"]
        if by != .pool { names.append(row.identity?.rawValue ?? "") }
        if by == .dataset { names.append(row.dataset?.rawValue ?? "") }
        return (names + ["\(row.streams)", "\(row.entries)", countsOnly ? "-" : "\(row.bytes)"]).joined(separator: "\t")
    }
}

/// `--by`: the library's ``StatisticsGrouping`` as an argument.
enum Grouping: String, ExpressibleByArgument, CaseIterable {
    case pool, identity, dataset

    var library: StatisticsGrouping {
        switch self {
        case .pool: .pool
        case .identity: .identity
        case .dataset: .dataset
        }
    }
}
