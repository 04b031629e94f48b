import LedgerStorage

/// Which streams, entries and records an audit query (``Ledger/blame(_:at:filter:includeRemoved:progress:_:)``,
/// ``Ledger/diff(_:from:to:filter:progress:_:)``, ``Ledger/statistics(by:filter:countBytes:progress:_:)``,
/// ``Ledger/follow(after:filter:polling:caughtUp:_:)``) looks at. Every field left nil matches
/// everything; the fields a query has no use for are ignored (a key means nothing to statistics).
///
/// Entry fields (author, device, time, sync count) are tested against the entry that made a
/// change: in blame and diff, the entry that last set the record.
public struct AuditFilter: Sendable, Hashable {
    /// Only streams of this pool.
    public var pool: IdentityPoolID?
    /// Only streams of this identity.
    public var identity: IdentityID?
    /// Only streams of this dataset name.
    public var dataset: DatasetName?
    /// Only this record key (compared byte for byte, as ``RecordKey`` does).
    public var key: String?
    /// Only entries by this author (the authenticated caller the log records).
    public var author: String?
    /// Only entries made from this device.
    public var device: String?
    /// Only entries committed at or after this time.
    public var since: Timestamp?
    /// Only entries committed at or before this time.
    public var until: Timestamp?
    /// Only entries at or above this sync count (offset in their stream).
    public var minimumSyncCount: UInt64?
    /// Only entries at or below this sync count.
    public var maximumSyncCount: UInt64?
    /// Whether SyncLedger's own streams (identity ``Ledger/systemIdentity``) count when a query
    /// walks many streams (statistics, the change feed). Default false.
    public var includeSystem = false

    /// A filter that matches everything (but system streams in many-stream queries).
    public init() {}

    /// Checks that ranges are not empty by construction: `since` after `until` or a minimum
    /// sync count above the maximum is an `.invalidParameter` error naming both.
    public func validate() throws(LedgerError) {
        if let since, let until, since > until {
            throw LedgerError(.invalidParameter, "the time range is empty: since \(since) is after until \(until)")
        }
        if let low = minimumSyncCount, let high = maximumSyncCount, low > high {
            throw LedgerError(.invalidParameter, "the sync count range is empty: minimum \(low) is above maximum \(high)")
        }
    }

    /// Whether `stream` is in scope (pool, identity, dataset, system streams).
    public func matches(_ stream: StreamName) -> Bool {
        if !includeSystem, stream.identity == Ledger.systemIdentity { return false }
        if let pool, stream.pool != pool { return false }
        if let identity, stream.identity != identity { return false }
        if let dataset, stream.dataset != dataset { return false }
        return true
    }

    /// Whether `key` passes the key filter.
    public func matches(key candidate: String) -> Bool {
        key.map { RecordKey($0) == RecordKey(candidate) } ?? true
    }

    /// Whether an entry with this attribution passes the entry filters (author, device, time,
    /// sync count).
    public func matches(_ origin: Attribution) -> Bool {
        matchesEntry(offset: origin.syncCount, time: origin.time) && matchesWho(author: origin.author, device: origin.device)
    }

    /// Whether a log entry is in scope: its stream and its attribution.
    public func matches(_ entry: LogEntry) -> Bool {
        matches(entry.stream) && matches(Attribution(entry))
    }

    /// The time and sync count tests alone (what can be checked without the author).
    func matchesEntry(offset: UInt64, time: Timestamp) -> Bool {
        if let since, time < since { return false }
        if let until, time > until { return false }
        if let low = minimumSyncCount, offset < low { return false }
        if let high = maximumSyncCount, offset > high { return false }
        return true
    }

    /// The author and device tests alone.
    func matchesWho(author candidate: String, device candidateDevice: String?) -> Bool {
        if let author, author != candidate { return false }
        if let device, device != candidateDevice { return false }
        return true
    }

    /// Whether the author or device tests need the entry's body decoded.
    var needsAuthor: Bool { author != nil || device != nil }
    /// Whether any entry test is set.
    var filtersEntries: Bool { needsAuthor || since != nil || until != nil }
}

/// The entry that made a change, as blame and diff name it: its sync count (offset in its
/// stream), commit sequence, server time, author and device.
public struct Attribution: Hashable, Sendable {
    /// The entry's offset: the dataset's sync count right after it.
    public let syncCount: UInt64
    /// Its position in the ledger-wide change feed.
    public let sequence: UInt64
    /// Server time of the commit.
    public let time: Timestamp
    /// The authenticated caller that wrote it.
    public let author: String
    /// The device it was written from, when it named one.
    public let device: String?

    /// An attribution.
    public init(syncCount: UInt64, sequence: UInt64, time: Timestamp, author: String, device: String?) {
        self.syncCount = syncCount
        self.sequence = sequence
        self.time = time
        self.author = author
        self.device = device
    }

    /// The attribution of a log entry.
    public init(_ entry: LogEntry) {
        self.init(syncCount: entry.offset, sequence: entry.sequence, time: entry.time, author: entry.author, device: entry.device)
    }

    /// Reads the head of a stored entry body (version, offset, time, author, device) without
    /// making its events.
    static func decodeHead(body: ArraySlice<UInt8>, sequence: UInt64) throws(DecodeFailure) -> Attribution {
        let head = try LogEntry.decodeHead(body)
        return Attribution(syncCount: head.offset, sequence: sequence, time: head.time, author: head.author, device: head.device)
    }
}

/// A point in a dataset's history: right after the entry at a sync count (0: before any), or
/// after every entry committed at or before a time.
public enum AuditPoint: Hashable, Sendable, CustomStringConvertible {
    /// Right after the entry at this offset (0: before the first).
    case syncCount(UInt64)
    /// After every entry committed at or before this time.
    case time(Timestamp)

    /// Whether the entry at `offset`, committed at `time`, is at or before this point.
    func includes(offset: UInt64, time entryTime: Timestamp) -> Bool {
        switch self {
        case .syncCount(let limit): offset <= limit
        case .time(let limit): entryTime <= limit
        }
    }

    public var description: String {
        switch self {
        case .syncCount(let n): "sync count \(n)"
        case .time(let t): "time \(t)"
        }
    }
}

extension Ledger {
    /// The stream's head offset, or `.notFound` naming the stream when it has no entry.
    func existingHead(_ stream: StreamName) throws -> StreamHead {
        guard let head = try read({ try head($0, stream) }) else {
            throw LedgerError(.notFound, "dataset \(stream) does not exist: it has no entries", stream: stream)
        }
        return head
    }

    /// Refuses a point past the stream's head (a sync count) or in the future (a time).
    func check(_ point: AuditPoint, head: UInt64, stream: StreamName, name: String) throws {
        switch point {
        case .syncCount(let n) where n > head:
            throw LedgerError(.invalidParameter, "\(name) sync count \(n) is past the last entry of \(stream) (sync count \(head))", stream: stream)
        case .time(let t) where t > options.clock():
            throw LedgerError(.invalidParameter, "\(name) time \(t) is in the future", stream: stream)
        default: break
        }
    }
}
