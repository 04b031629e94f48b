import LedgerStorage

/// Who makes a change, as the server knows it from the authenticated caller — never as the
/// client's own data claims it.
public struct ChangeOrigin: Sendable, Hashable {
    /// The authenticated caller: an identity id, `admin:<access key>`, `cli`, …
    public let author: String
    /// The device the caller says it writes from (Cognito's `DeviceId`), if it named one.
    public let device: String?

    /// An origin.
    /// - Throws: `.invalidParameter` when the author or the device is empty or longer than
    ///   256 UTF-8 bytes (Cognito's bound on `DeviceId`).
    public init(author: String, device: String? = nil) throws(LedgerError) {
        guard (1...256).contains(author.utf8.count) else {
            throw LedgerError(.invalidParameter, "the author of a change must be 1-256 bytes, not \(author.utf8.count)")
        }
        if let device, !(1...256).contains(device.utf8.count) {
            throw LedgerError(.invalidParameter, "DeviceId must be 1-256 characters, not \(device.utf8.count) bytes")
        }
        self.author = author
        self.device = device
    }
}

/// The events of one entry for a user's dataset that passed Cognito's per-record rules (see
/// ``Ledger/validateChange(_:for:describe:)``): only that function makes one, so every path
/// that writes a user's dataset — UpdateRecords, DeleteDataset, both branches of an offline
/// merge, the CLI, and whatever comes later — must go through it.
public struct UserChange: Sendable, Hashable {
    /// The events, in order.
    public let events: [Event]
    /// The stream they were checked for.
    public let stream: StreamName
    fileprivate init(events: [Event], stream: StreamName) {
        self.events = events
        self.stream = stream
    }
}

extension Ledger {
    /// The device times an event may carry: ±10^16 ms (some 300,000 years), what Cognito's
    /// wire form (epoch seconds below 10^13) can express.
    public static let deviceTimeRange: ClosedRange<Int64> = -10_000_000_000_000_000...10_000_000_000_000_000

    /// Checks `events` against the per-record rules: the identity is not SyncLedger's reserved
    /// one and the dataset name is not `.` or `..`; there is at least one event; every key is 1
    /// to ``Limits/maxKeyLength`` characters and appears once; every value is at most
    /// ``Limits/maxValueLength`` characters; every device time is in ``deviceTimeRange``.
    ///
    /// - Parameter describe: names event `i` in messages (e.g. "patch 3").
    /// - Throws: `.invalidParameter` or `.limitExceeded` naming the event and the rule.
    public func validateChange(_ events: [Event], for stream: StreamName, describe: (Int) -> String = { "event \($0)" }) throws(LedgerError) -> UserChange {
        try Self.requireUserIdentity(stream.identity)
        if stream.dataset.isReserved {
            throw LedgerError(.invalidParameter, "dataset name \(quoted(stream.dataset.rawValue)) is reserved for SyncLedger's own streams", stream: stream)
        }
        if stream.dataset.isDotSegment {
            throw LedgerError(.invalidParameter, "dataset name \(quoted(stream.dataset.rawValue)) is not allowed: \".\" and \"..\" are path dot segments", stream: stream)
        }
        guard !events.isEmpty else { throw LedgerError(.invalidParameter, "a change needs at least one event", stream: stream) }
        let limits = options.limits
        var seen = Set<RecordKey>()  // byte-exact: canonically equivalent keys are different keys
        for (i, event) in events.enumerated() {
            guard let key = event.key else { continue }
            let keyLength = key.utf16.count
            guard keyLength >= 1, keyLength <= limits.maxKeyLength else {
                throw LedgerError(.invalidParameter, "\(describe(i)): key \(quoted(key)) must be 1-\(limits.maxKeyLength) characters, not \(keyLength)", stream: stream)
            }
            guard seen.insert(RecordKey(key)).inserted else {
                throw LedgerError(.invalidParameter, "\(describe(i)): key \(quoted(key)) appears twice in one change", stream: stream)
            }
            if case .erased = event {
                throw LedgerError(.invalidParameter, "\(describe(i)): \(quoted(key)) carries an erased value; only a redaction erases values, a write carries them", stream: stream)
            }
            if case .put(_, let value, _) = event {
                let valueLength = value.utf16.count
                guard valueLength <= limits.maxValueLength else {
                    throw LedgerError(.limitExceeded, "\(describe(i)): the value of \(quoted(key)) has \(valueLength) characters; the limit is \(limits.maxValueLength)", stream: stream)
                }
            }
            if let device = event.deviceModified, !Self.deviceTimeRange.contains(device.milliseconds) {
                throw LedgerError(.invalidParameter, "\(describe(i)): the device time of \(quoted(key)) is out of range (\(device.milliseconds) ms)", stream: stream)
            }
        }
        return UserChange(events: events, stream: stream)
    }

    /// Appends a validated change to a user's dataset inside the writer's transaction: the one
    /// way into a user's stream. The rules run in this order, each a plain step on the state the
    /// write sees (LMDB plus what earlier writes of the same transaction — a group commit, or a
    /// cluster batch being planned — appended):
    ///
    /// 1. what the caller expects of the records (`expecting`: sync counts, values, existence);
    /// 2. a dataset delete needs a live dataset at that point of the entry;
    /// 3. a new dataset name, or a dataset brought back, passes the identity's dataset limits
    ///    (unless `admission` is `.merge`);
    /// 4. the entry is sealed and applied (server time, the caller's origin);
    /// 5. the dataset's limits on the state after it: bytes, records, removed-record markers —
    ///    a limit refuses only growth beyond it, so a dataset over a lowered limit can shrink;
    /// 6. the entry and its views are stored.
    ///
    /// - Throws: `.conflict`, `.notFound`, `.limitExceeded`; nothing is written then.
    /// - Parameter admission: `.merge` admits a new dataset past the identity's dataset limits
    ///   (an identity merge brings the source's datasets over whatever the count; they count
    ///   toward the limits afterwards, as in Cognito). Every other rule applies.
    @discardableResult
    func appendUser(_ txn: Transaction, to stream: StreamName, origin: ChangeOrigin, change: UserChange, admission: Admission = .normal,
                    expecting expectation: Expectation = .nothing) throws -> UserAppend {
        precondition(change.stream == stream, "a change is appended to the stream it was checked for")
        var draft = try openEntry(txn, on: stream)
        let (events, skipped) = try expectation.check(change.events, on: draft.view, stream: stream)
        try requireLiveDatasetForDeletes(events, draft.view, stream: stream)
        if admission == .normal { try checkIdentityLimits(txn, events, draft.view, stream: stream) }
        try seal(&draft, txn, author: origin.author, device: origin.device, events: events)
        try checkDatasetLimits(draft.view, stream: stream)
        let entry = try store(txn, draft)
        return UserAppend(entry: entry, view: draft.view, events: events, skipped: skipped)
    }

    /// Rule 2 of ``appendUser(_:to:origin:change:admission:expecting:)``: a dataset delete needs
    /// a dataset to delete, at that point of the entry.
    private func requireLiveDatasetForDeletes(_ events: [Event], _ view: StoredDatasetView, stream: StreamName) throws(LedgerError) {
        var live = view.dataset.map { !$0.deleted } ?? false
        for event in events {
            if event.key != nil {
                live = true
            } else {
                guard live else { throw LedgerError(.notFound, "dataset \(stream.dataset) does not exist, so it cannot be deleted", stream: stream) }
                live = false
            }
        }
    }

    /// Rule 3: a new dataset name, or a dataset brought back to life, counts toward the
    /// identity's live datasets and dataset names.
    private func checkIdentityLimits(_ txn: Transaction, _ events: [Event], _ view: StoredDatasetView, stream: StreamName) throws {
        let wasLive = view.dataset.map { !$0.deleted } ?? false
        guard view.dataset == nil || (!wasLive && events.contains(where: { $0.key != nil })) else { return }
        let limits = options.limits
        let (liveCount, names) = try datasetCounts(txn, pool: stream.pool, identity: stream.identity)
        if liveCount >= limits.maxDatasetsPerIdentity {
            throw LedgerError(.limitExceeded, "identity \(stream.identity) already has \(liveCount) datasets; the limit is \(limits.maxDatasetsPerIdentity)", stream: stream)
        }
        if view.dataset == nil, names >= limits.maxDatasetNamesPerIdentity {
            throw LedgerError(.limitExceeded, "identity \(stream.identity) has used \(names) dataset names (deleted ones included); the limit is \(limits.maxDatasetNamesPerIdentity)", stream: stream)
        }
    }

    /// Rule 5: the dataset's limits on the state after the entry. A limit refuses only growth
    /// beyond it, so a dataset over a lowered limit can shrink.
    private func checkDatasetLimits(_ view: StoredDatasetView, stream: StreamName) throws(LedgerError) {
        let limits = options.limits
        let meta = view.dataset!
        let before = view.original
        if meta.bytes > limits.maxDatasetBytes, meta.bytes > before?.bytes ?? 0 {
            throw LedgerError(.limitExceeded, "the dataset would hold \(meta.bytes) bytes; the limit is \(limits.maxDatasetBytes)", stream: stream)
        }
        if meta.recordCount > limits.maxRecordsPerDataset, meta.recordCount > before?.recordCount ?? 0 {
            throw LedgerError(.limitExceeded, "the dataset would hold \(meta.recordCount) records; the limit is \(limits.maxRecordsPerDataset)", stream: stream)
        }
        if meta.tombstones > limits.maxTombstonesPerDataset, meta.tombstones > before?.tombstones ?? 0 {
            throw LedgerError(.limitExceeded, "the dataset would keep \(meta.tombstones) removed-record markers; the limit is \(limits.maxTombstonesPerDataset) (deleting the dataset clears them)", stream: stream)
        }
        if meta.tombstoneBytes > limits.maxTombstoneBytesPerDataset, meta.tombstoneBytes > before?.tombstoneBytes ?? 0 {
            throw LedgerError(.limitExceeded, "the dataset's removed-record markers would hold \(meta.tombstoneBytes) bytes of keys; the limit is \(limits.maxTombstoneBytesPerDataset) (deleting the dataset clears them)", stream: stream)
        }
    }

    /// Which identity-wide limits a new dataset must pass.
    enum Admission: Sendable {
        /// All of them.
        case normal
        /// None: the dataset is an identity merge's copy.
        case merge
    }

    /// The identity's live datasets and the dataset names it has used (deleted ones included).
    func datasetCounts(_ txn: Transaction, pool: IdentityPoolID, identity: IdentityID) throws -> (live: Int, names: Int) {
        var live = 0, names = 0
        try forEachStream(txn, prefix: StreamName.prefix(pool: pool, identity: identity)) { stream, head in
            guard !stream.isInternal else { return true }
            names += 1
            if let meta = try dataset(txn, id: head.id, stream: stream), !meta.deleted { live += 1 }
            return true
        }
        return (live, names)
    }
}
