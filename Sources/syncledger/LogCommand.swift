import ArgumentParser
import Foundation
import SyncLedger

/// Prints the change feed, or one stream's log.
struct Log: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print log entries: the whole change feed, or one dataset's stream with --stream.",
        discussion: """
            Positions are commit sequences in the feed and offsets (sync counts) in a stream. \
            SyncLedger's own streams (identity \(Ledger.systemIdentity): registered devices and \
            their push tokens, pool configuration) are left out of the feed unless --system is given.
            """)
    @OptionGroup var data: DataDirectory
    @OptionGroup var target: StreamOptions
    @Flag(help: "Only the stream named by --pool/--identity/--dataset.") var stream = false
    @Option(help: "Start at this position (sequence in the feed, offset in a stream).") var from: UInt64?
    @Option(help: "Start after this position (as export's --after).") var after: UInt64?
    @Option(help: "Print at most this many entries (at least 1).") var limit = 1000
    @Flag(help: "Include SyncLedger's system streams (devices, push tokens, pool configuration).") var system = false
    @Flag(help: "One JSON object per entry: sequence, stream {pool, identity, dataset}, offset, time, author, device, events.") var json = false

    func validate() throws {
        guard limit >= 1 else { throw ValidationError("--limit must be at least 1, not \(limit)") }
        guard from == nil || after == nil else { throw ValidationError("give --from or --after, not both") }
    }

    func run() async throws {
        let name = stream ? try target.stream() : nil
        let ledger = try data.open()
        defer { ledger.close() }
        var printed = 0
        var last: UInt64?
        var more = false
        let body: (LogEntry) -> Bool = { entry in
            if name == nil, !system, entry.stream.identity == Ledger.systemIdentity { return true }
            if printed == limit {
                more = true
                return false
            }
            print(json ? Self.json(entry).compact : Self.describe(entry))
            printed += 1
            last = name == nil ? entry.sequence : entry.offset
            return true
        }
        // The first position to print, without overflow at either end.
        let start: UInt64? = if let after { after == .max ? nil : after + 1 } else { from ?? 0 }
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
