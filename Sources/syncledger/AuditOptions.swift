import ArgumentParser
import SyncLedger

/// The entry filters that blame, diff, stats and log share: author, device, time range and
/// sync-count range. Each tests the entry that made a change.
struct EntryFilterOptions: ParsableArguments {
    @Option(help: "Only entries by this author (an identity id, admin:<access key>, cli, …).") var author: String?
    @Option(help: "Only entries written from this device.") var device: String?
    @Option(help: "Only entries committed at or after this time (\(ISOTime.expected)).") var since: String?
    @Option(help: "Only entries committed at or before this time.") var until: String?
    @Option(help: "Only entries at or above this sync count (offset in their dataset).") var minSyncCount: UInt64?
    @Option(help: "Only entries at or below this sync count.") var maxSyncCount: UInt64?

    func validate() throws {
        _ = try filter()
    }

    /// The filter these options make (stream fields unset); a usage error for a malformed time
    /// or an empty range.
    func filter() throws -> AuditFilter {
        var filter = AuditFilter()
        filter.author = author
        filter.device = device
        filter.since = try since.map { try parseTime($0, option: "--since") }
        filter.until = try until.map { try parseTime($0, option: "--until") }
        filter.minimumSyncCount = minSyncCount
        filter.maximumSyncCount = maxSyncCount
        if let since = filter.since, let until = filter.until, since > until {
            throw ValidationError("--since \(self.since!) is after --until \(self.until!): the time range is empty")
        }
        if let low = minSyncCount, let high = maxSyncCount, low > high {
            throw ValidationError("--min-sync-count \(low) is above --max-sync-count \(high): the range is empty")
        }
        return filter
    }
}

/// Which streams a command over many streams looks at: `--pool`, `--identity`, `--dataset`,
/// each optional (unlike ``StreamOptions``, which names one stream and has defaults).
struct StreamScopeOptions: ParsableArguments {
    @Option(help: "Only this identity pool.") var pool: String?
    @Option(help: "Only this identity.") var identity: String?
    @Option(help: "Only datasets of this name.") var dataset: String?
    @Flag(help: "Include SyncLedger's system streams (devices, push tokens, pool configuration).") var system = false

    /// Adds the stream scope to `filter`; names are checked as the ledger checks them.
    func apply(to filter: inout AuditFilter) throws {
        try Self.apply(pool: pool, identity: identity, dataset: dataset, system: system, to: &filter)
    }

    /// Adds a stream scope to `filter`.
    static func apply(pool: String?, identity: String?, dataset: String?, system: Bool, to filter: inout AuditFilter) throws {
        filter.pool = try pool.map { try IdentityPoolID($0) }
        filter.identity = try identity.map { try IdentityID($0) }
        filter.dataset = try dataset.map { try DatasetName($0) }
        filter.includeSystem = system
    }
}

/// `text` as a time, or a usage error naming the option and the form expected.
func parseTime(_ text: String, option: String) throws -> Timestamp {
    guard let time = ISOTime.parse(text) else { throw ValidationError("\(option) \(text) is not \(ISOTime.expected)") }
    return time
}

/// One point of a dataset's history from a `--…-sync-count` / `--…-time` pair (at most one of
/// them given); nil when neither is.
func auditPoint(syncCount: UInt64?, time: String?, options: (String, String)) throws -> AuditPoint? {
    switch (syncCount, time) {
    case (nil, nil): return nil
    case (let n?, nil): return .syncCount(n)
    case (nil, let t?): return .time(try parseTime(t, option: options.1))
    default: throw ValidationError("give \(options.0) or \(options.1), not both")
    }
}

extension JSON {
    /// An attribution's members: syncCount, sequence, time, author, device.
    static func members(_ origin: Attribution) -> [(String, JSON)] {
        [("syncCount", .uint(origin.syncCount)), ("sequence", .uint(origin.sequence)), ("time", .time(origin.time)),
         ("author", .string(origin.author)), ("device", .string(origin.device))]
    }
}

/// `@12 2026-11-22T10:00:00.000Z by author on device`.
func describe(_ origin: Attribution) -> String {
    "@\(origin.syncCount) \(ISOTime.format(origin.time)) by \(origin.author)\(origin.device.map { " on \($0)" } ?? "")"
}
