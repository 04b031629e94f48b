import ArgumentParser
import Foundation
import SyncLedger

/// Prints the change feed, or one stream's log; with --follow, goes on as entries are committed.
struct Log: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print log entries: the whole change feed, or one dataset's stream with --stream; --follow waits for more.",
        discussion: """
            Positions are commit sequences in the feed and offsets (sync counts) in a stream. \
            SyncLedger's own streams (identity \(Ledger.systemIdentity): registered devices and \
            their push tokens, pool configuration) are left out of the feed unless --system is given.

            Without --stream, --pool, --identity and --dataset filter the feed (each optional). \
            --follow prints the feed as it is written, by this process or by a server on the same \
            data directory (seen within 250 ms: it looks again after a pause doubling from 10 ms), \
            until Ctrl-C; then it says on standard error where to resume (--after N) and exits 130.
            """)
    @OptionGroup var data: DataDirectory
    @Option(help: "Identity pool id (default local:0 with --stream; a filter of the feed otherwise).") var pool: String?
    @Option(help: "Identity id (default local:1 with --stream; a filter of the feed otherwise).") var identity: String?
    @Option(help: "Dataset name (default default with --stream; a filter of the feed otherwise).") var dataset: String?
    @Flag(help: "Only the stream named by --pool/--identity/--dataset.") var stream = false
    @Option(help: "Start at this position (sequence in the feed, offset in a stream).") var from: UInt64?
    @Option(help: "Start after this position (as export's --after).") var after: UInt64?
    @Option(help: "Print at most this many entries (at least 1; default 1000, no limit with --follow).") var limit: Int?
    @Flag(help: "Keep printing the feed as entries are committed, until Ctrl-C (not with --stream).") var follow = false
    @Flag(help: "Include SyncLedger's system streams (devices, push tokens, pool configuration).") var system = false
    @OptionGroup var filters: EntryFilterOptions
    @Flag(help: "One JSON object per entry: sequence, stream {pool, identity, dataset}, offset, time, author, device, events.") var json = false

    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1, not \(limit)") }
        guard from == nil || after == nil else { throw ValidationError("give --from or --after, not both") }
        if follow, stream { throw ValidationError("--follow follows the feed; filter it with --pool/--identity/--dataset instead of --stream") }
    }

    func run() async throws {
        let name = stream ? try StreamName(pool: pool ?? "local:0", identity: identity ?? "local:1", dataset: dataset ?? "default") : nil
        var filter = try filters.filter()
        if name == nil {
            try StreamScopeOptions.apply(pool: pool, identity: identity, dataset: dataset, system: system, to: &filter)
        } else {
            filter.includeSystem = true
        }
        let ledger = try data.open()
        defer { ledger.close() }
        // The first position to print, without overflow at either end.
        let start: UInt64? = if let after { after == .max ? nil : after + 1 } else { from ?? 0 }
        if follow {
            try await followFeed(ledger, after: start.map { $0 == 0 ? 0 : $0 - 1 } ?? .max, filter: filter)
            return
        }
        let limit = self.limit ?? 1000
        var printed = 0
        var last: UInt64?
        var more = false
        let body: (LogEntry) -> Bool = { entry in
            guard filter.matches(entry) else { return true }
            if printed == limit {
                more = true
                return false
            }
            print(json ? Self.json(entry).compact : Self.describe(entry))
            printed += 1
            last = name == nil ? entry.sequence : entry.offset
            return true
        }
        if let start {
            if let name {
                try ledger.forEachEntry(in: name, from: start, body)
            } else {
                try ledger.forEachCommit(after: start == 0 ? 0 : start - 1, body)
            }
        }
        if more, let last {
            printError("syncledger: stopped after \(limit) entries; continue with --after \(last)")
        }
    }

    /// `log --follow`: the feed after `position`, then each new entry, until Ctrl-C (or SIGTERM)
    /// or --limit; standard output is flushed whenever the feed is caught up.
    private func followFeed(_ ledger: Ledger, after position: UInt64, filter: AuditFilter) async throws {
        let json = self.json, limit = self.limit
        let task = Task { () throws -> (last: UInt64, printed: Int) in
            var printed = 0
            let last = try await ledger.follow(after: position, filter: filter, caughtUp: { _ in fflush(nil) }) { entry in
                print(json ? Self.json(entry).compact : Self.describe(entry))
                printed += 1
                return limit.map { printed < $0 } ?? true
            }
            fflush(nil)
            return (last, printed)
        }
        let signals = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { task.cancel() }
            source.resume()
            return source
        }
        defer { signals.forEach { $0.cancel() } }
        let (last, printed) = try await task.value
        if task.isCancelled {
            printError("syncledger: interrupted after \(printed) entries; resume with --after \(last)")
            throw ExitCode(130)
        }
        printError("syncledger: stopped after \(printed) entries; continue with --after \(last)")
    }

    /// One line of the log: `#sequence stream @offset time by author [on device]: events`.
    static func describe(_ entry: LogEntry) -> String {
        let events = entry.events.map { event -> String in
            switch event {
            case .put(let key, let value, _): "put \(key)=\(value.count > 60 ? String(value.prefix(60)) + "…" : value)"
            case .erased(let key, _): "put \(key)=[erased by a redaction]"
            case .remove(let key, _): "remove \(key)"
            case .deleteDataset: "delete dataset"
            }
        }.joined(separator: ", ")
        let device = entry.device.map { " on \($0)" } ?? ""
        return "#\(entry.sequence) \(entry.stream) @\(entry.offset) \(ISOTime.format(entry.time)) by \(entry.author)\(device): \(events)"
    }

    /// An entry as JSON, with its values in full.
    static func json(_ entry: LogEntry) -> JSON {
        [
            "sequence": .uint(entry.sequence), "stream": .stream(entry.stream), "offset": .uint(entry.offset),
            "time": .time(entry.time), "author": .string(entry.author), "device": .string(entry.device),
            "events": .array(entry.events.map(JSON.event)),
        ]
    }
}
