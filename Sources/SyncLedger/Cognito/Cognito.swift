import LedgerStorage

/// A record as Cognito returns it: key, value (nil when removed) and its sync state.
public struct Record: Hashable, Sendable {
    /// The record key.
    public let key: String
    /// Value, sync count, dates and author.
    public let state: RecordState

    /// The value, or nil for a removed record.
    public var value: String? { state.value }
    /// The offset of the entry that last changed it.
    public var syncCount: UInt64 { state.syncCount }
}

/// One change an ``Ledger/updateRecords(_:patches:deviceID:caller:sessionToken:)`` call asks for.
public struct RecordPatch: Hashable, Sendable {
    /// Cognito's two operations.
    public enum Operation: String, Sendable, Hashable {
        /// Set the value.
        case replace
        /// Remove the record.
        case remove
    }

    /// What to do.
    public var op: Operation
    /// The record key.
    public var key: String
    /// The new value (required for `.replace`).
    public var value: String?
    /// The record's sync count as the caller last saw it; 0 for a record it believes new.
    public var syncCount: UInt64
    /// The device's own time of the change, if it sent one.
    public var deviceModified: Timestamp?

    /// A patch.
    public init(op: Operation, key: String, value: String? = nil, syncCount: UInt64, deviceModified: Timestamp? = nil) {
        self.op = op
        self.key = key
        self.value = value
        self.syncCount = syncCount
        self.deviceModified = deviceModified
    }
}

/// What ``Ledger/listRecords(_:after:maxResults:nextToken:)`` returns.
public struct RecordsPage: Sendable {
    /// The records changed after the requested sync count (removed ones without a value), in
    /// order of sync count, then key.
    public var records: [Record]
    /// A token for the next page, or nil on the last page.
    public var nextToken: String?
    /// The dataset's sync count.
    public var datasetSyncCount: UInt64
    /// Whether the dataset exists (written and not deleted since).
    public var datasetExists: Bool
    /// Whether the dataset was deleted after the requested sync count.
    public var datasetDeletedAfterRequestedSyncCount: Bool
    /// Who last changed the dataset.
    public var lastModifiedBy: String?
    /// The sync session token for ``Ledger/updateRecords(_:patches:deviceID:caller:sessionToken:)``.
    public var syncSessionToken: String
}

/// A dataset's metadata as Cognito describes it.
public struct DatasetDescription: Hashable, Sendable {
    /// The stream (pool, identity, dataset).
    public let stream: StreamName
    /// When it was created (again, after a delete).
    public let created: Timestamp
    /// When it last changed.
    public let lastModified: Timestamp
    /// Who changed it last.
    public let lastModifiedBy: String
    /// UTF-8 bytes of its records' keys and values.
    public let dataStorage: UInt64
    /// Records with a value.
    public let numRecords: UInt64
    /// Its sync count.
    public let syncCount: UInt64

    init(stream: StreamName, state: DatasetState) {
        self.stream = stream
        created = state.created
        lastModified = state.lastModified
        lastModifiedBy = state.lastModifiedBy
        dataStorage = state.bytes
        numRecords = state.recordCount
        syncCount = state.syncCount
    }
}

/// A page of ``Ledger/listDatasets(pool:identity:maxResults:nextToken:)``.
public struct DatasetsPage: Sendable {
    /// The datasets, by name.
    public var datasets: [DatasetDescription]
    /// A token for the next page, or nil.
    public var nextToken: String?
}

/// An identity's usage.
public struct IdentityUsage: Hashable, Sendable {
    /// The pool.
    public let pool: IdentityPoolID
    /// The identity.
    public let identity: IdentityID
    /// Its datasets that exist.
    public let datasetCount: Int
    /// UTF-8 bytes of their records.
    public let dataStorage: UInt64
    /// When any of them last changed (deletes included).
    public let lastModified: Timestamp?
}

/// An identity pool's usage.
public struct PoolUsage: Hashable, Sendable {
    /// The pool.
    public let pool: IdentityPoolID
    /// Sync sessions issued for it.
    public let syncSessionsCount: UInt64
    /// UTF-8 bytes of all its datasets' records.
    public let dataStorage: UInt64
    /// When any of its datasets last changed.
    public let lastModified: Timestamp?
}

/// The result of a successful update.
public struct UpdateResult: Sendable {
    /// The records the call changed, each carrying the dataset's new sync count.
    public let records: [Record]
    /// The dataset's sync count after the call.
    public let syncCount: UInt64
}

extension Ledger {
    // MARK: listRecords

    /// The records of `stream` changed after `lastSyncCount` (exclusive), paged, with a new
    /// sync session token.
    ///
    /// Costs grow with the entries since `lastSyncCount` or the dataset's records, whichever
    /// is fewer.
    /// - Throws: `.invalidParameter` for a bad `maxResults` or a foreign or altered `nextToken`.
    /// - Parameter sessionToken: a live session token for this stream, when the caller is
    ///   paging within one sync session: it is returned again instead of a new session.
    public func listRecords(_ stream: StreamName, after lastSyncCount: UInt64 = 0, maxResults: Int = 1024, nextToken: String? = nil, sessionToken: String? = nil) throws -> RecordsPage {
        try Self.requireUserIdentity(stream.identity)
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "maxResults must be at least 1, not \(maxResults)", stream: stream) }
        var resume: (syncCount: UInt64, key: String)?
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .recordsPage, key: tokenKey) else {
                throw LedgerError(.invalidParameter, "nextToken is not a token this server issued", stream: stream)
            }
            var r = ByteReader(payload)
            guard let after = try? r.varint(), let count = try? r.varint(), let key = try? r.string(), let name = try? r.raw(r.remaining),
                  after == lastSyncCount, Array(name) == stream.key else {
                throw LedgerError(.invalidParameter, "nextToken belongs to another dataset or lastSyncCount", stream: stream)
            }
            resume = (count, key)
        }
        var page = try read { txn -> RecordsPage in
            guard let head = try head(txn, stream) else {
                return RecordsPage(records: [], nextToken: nil, datasetSyncCount: 0, datasetExists: false, datasetDeletedAfterRequestedSyncCount: false, lastModifiedBy: nil, syncSessionToken: "")
            }
            let meta = try dataset(txn, id: head.id, stream: stream)
            var matches = try changedRecords(txn, stream: stream, head: head, meta: meta, after: lastSyncCount)
            // Order by sync count, then key bytes (not String order, which merges equivalent keys).
            matches.sort { $0.syncCount != $1.syncCount ? $0.syncCount < $1.syncCount : RecordKey($0.key) < RecordKey($1.key) }
            if let resume {
                matches.removeAll { $0.syncCount < resume.syncCount || ($0.syncCount == resume.syncCount && !(RecordKey(resume.key) < RecordKey($0.key))) }
            }
            var token: String?
            if matches.count > maxResults {
                matches.removeSubrange(maxResults...)
                let last = matches[maxResults - 1]
                var w = ByteWriter()
                w.varint(lastSyncCount)
                w.varint(last.syncCount)
                w.string(last.key)
                w.raw(stream.key)
                token = SignedToken.sign(w.bytes, kind: .recordsPage, key: tokenKey)
            }
            return RecordsPage(
                records: matches, nextToken: token, datasetSyncCount: head.offset,
                datasetExists: meta.map { !$0.deleted } ?? false,
                datasetDeletedAfterRequestedSyncCount: (meta?.lastDeleteSyncCount ?? 0) > lastSyncCount,
                lastModifiedBy: meta?.lastModifiedBy, syncSessionToken: "")
        }
        if let sessionToken, (try? checkSessionToken(sessionToken, for: stream)) != nil {
            page.syncSessionToken = sessionToken
        } else {
            page.syncSessionToken = issueSessionToken(for: stream)
        }
        return page
    }

    /// Records whose sync count is above `after`: found through the log when few entries came
    /// since, else by scanning the dataset's records.
    private func changedRecords(_ txn: Transaction, stream: StreamName, head: StreamHead, meta: DatasetState?, after: UInt64) throws -> [Record] {
        guard head.offset > after else { return [] }
        let since = head.offset - after
        let prefix = [UInt8].bigEndian(head.id)
        var result: [Record] = []
        if after > 0 && since * 4 <= (meta?.recordCount ?? 0) + 8 {
            var keys = Set<RecordKey>()
            try txn.withCursor(schema.index) { cursor in
                var pair = try cursor.seek(atLeast: Schema.indexKey(stream: head.id, offset: after + 1))
                while let current = pair, current.key.starts(with: prefix) {
                    let sequence = current.value.bigEndianUInt64()
                    guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)) else {
                        throw LedgerError(.corruptData, "index names sequence \(sequence), which the log lacks", stream: stream)
                    }
                    let (entry, _) = try decodeEntry(bytes, sequence: sequence, stream: stream, txn: txn)
                    for event in entry.events { if let key = event.key { keys.insert(RecordKey(key)) } }
                    pair = try cursor.next()
                }
            }
            let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id)
            for key in keys {
                if let state = try view.storedRecord(key.string), state.syncCount > after {
                    result.append(Record(key: key.string, state: state))
                }
            }
        } else {
            try txn.withCursor(schema.records) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    let (key, state): (String, RecordState)
                    do { (key, state) = try Schema.decodeRecord(key: current.key, value: current.value) } catch {
                        throw LedgerError(.corruptData, "a record does not decode: \(error)", stream: stream)
                    }
                    if state.syncCount > after {
                        result.append(Record(key: key, state: state))
                    }
                    pair = try cursor.next()
                }
            }
        }
        return result
    }

    // MARK: updateRecords

    /// Applies `patches` to `stream` all-or-nothing as one log entry, the Cognito way.
    ///
    /// Each patch's `syncCount` must equal the record's current one (0 for a record that does
    /// not exist); on success the dataset's sync count rises by exactly 1 and every changed
    /// record carries it. Returns when the entry is committed (on disk, in durable mode).
    ///
    /// - Parameters:
    ///   - deviceID: the device that made the changes; recorded as their author.
    ///   - caller: the author when no device is named (defaults to the identity id).
    ///   - sessionToken: a token from ``listRecords(_:after:maxResults:nextToken:)`` for this stream.
    /// - Throws: ``LedgerError`` `.conflict` (naming each key and both counts),
    ///   `.limitExceeded`, `.invalidParameter`, `.invalidSessionToken`, `.diskFull`; in every
    ///   case nothing was written.
    public func updateRecords(_ stream: StreamName, patches: [RecordPatch], deviceID: String? = nil, caller: String? = nil, sessionToken: String?) async throws -> UpdateResult {
        try Self.requireUserIdentity(stream.identity)
        try checkSessionToken(sessionToken, for: stream)
        let events = try events(for: patches, stream: stream)
        let author = deviceID ?? caller ?? stream.identity.rawValue
        if events.isEmpty {
            let count = try read { txn in try head(txn, stream)?.offset ?? 0 }
            return UpdateResult(records: [], syncCount: count)
        }
        return try await write { [self] txn in try self.appendPatches(txn, stream: stream, patches: patches, events: events, author: author) }
    }

    /// Validates patches and turns them into events.
    func events(for patches: [RecordPatch], stream: StreamName) throws(LedgerError) -> [Event] {
        let limits = options.limits
        var seen = Set<RecordKey>()  // byte-exact: canonically equivalent keys are different keys
        var events: [Event] = []
        events.reserveCapacity(patches.count)
        for (i, patch) in patches.enumerated() {
            let keyLength = patch.key.utf16.count
            guard keyLength >= 1, keyLength <= limits.maxKeyLength else {
                throw LedgerError(.invalidParameter, "patch \(i): key \(quoted(patch.key)) must be 1-\(limits.maxKeyLength) characters, not \(keyLength)", stream: stream)
            }
            guard seen.insert(RecordKey(patch.key)).inserted else {
                throw LedgerError(.invalidParameter, "patch \(i): key \(quoted(patch.key)) appears twice in one update", stream: stream)
            }
            switch patch.op {
            case .replace:
                guard let value = patch.value else {
                    throw LedgerError(.invalidParameter, "patch \(i): replace of \(quoted(patch.key)) needs a value", stream: stream)
                }
                let valueLength = value.utf16.count
                guard valueLength <= limits.maxValueLength else {
                    throw LedgerError(.limitExceeded, "patch \(i): the value of \(quoted(patch.key)) has \(valueLength) characters; the limit is \(limits.maxValueLength)", stream: stream)
                }
                events.append(.put(key: patch.key, value: value, deviceModified: patch.deviceModified))
            case .remove:
                events.append(.remove(key: patch.key, deviceModified: patch.deviceModified))
            }
        }
        return events
    }

    /// The writer-side half of ``updateRecords(_:patches:deviceID:caller:sessionToken:)``.
    func appendPatches(_ txn: Transaction, stream: StreamName, patches: [RecordPatch], events: [Event], author: String) throws -> UpdateResult {
        let limits = options.limits
        let (entry, view) = try append(txn, to: stream, author: author, events: events, check: { view in
            var conflicts: [LedgerError.Conflict] = []
            for patch in patches {
                let current = try view.record(patch.key)?.syncCount ?? 0
                if current != patch.syncCount {
                    conflicts.append(.init(key: patch.key, expected: patch.syncCount, actual: current))
                }
            }
            if !conflicts.isEmpty {
                let list = conflicts.map { "\(quoted($0.key)) (sent sync count \($0.expected), current \($0.actual))" }.joined(separator: ", ")
                var error = LedgerError(.conflict, "records changed since the caller's sync count: \(list)", stream: stream)
                error.conflicts = conflicts
                throw error
            }
            if view.dataset == nil || view.dataset?.deleted == true {
                let live = try liveDatasetCount(txn, pool: stream.pool, identity: stream.identity)
                if live >= limits.maxDatasetsPerIdentity {
                    throw LedgerError(.limitExceeded, "identity \(stream.identity) already has \(live) datasets; the limit is \(limits.maxDatasetsPerIdentity)", stream: stream)
                }
            }
        }, validate: { view in
            let meta = view.dataset!
            if meta.bytes > limits.maxDatasetBytes {
                throw LedgerError(.limitExceeded, "the dataset would hold \(meta.bytes) bytes; the limit is \(limits.maxDatasetBytes)", stream: stream)
            }
            if meta.recordCount > limits.maxRecordsPerDataset {
                throw LedgerError(.limitExceeded, "the dataset would hold \(meta.recordCount) records; the limit is \(limits.maxRecordsPerDataset)", stream: stream)
            }
        })
        let records = patches.map { Record(key: $0.key, state: view.changed[RecordKey($0.key)]!) }
        return UpdateResult(records: records, syncCount: entry.offset)
    }

    func liveDatasetCount(_ txn: Transaction, pool: IdentityPoolID, identity: IdentityID) throws -> Int {
        var count = 0
        try forEachStream(txn, prefix: StreamName.prefix(pool: pool, identity: identity)) { stream, head in
            if let meta = try dataset(txn, id: head.id, stream: stream), !meta.deleted { count += 1 }
            return true
        }
        return count
    }

    /// Calls `body` for each stream whose key starts with `prefix`, from `start` on, in key
    /// order, until it returns false.
    func forEachStream(_ txn: Transaction, prefix: [UInt8], from start: [UInt8]? = nil, _ body: (StreamName, StreamHead) throws -> Bool) throws {
        try txn.withCursor(schema.streams) { cursor in
            var pair = try cursor.seek(atLeast: start ?? prefix)
            while let current = pair, current.key.starts(with: prefix) {
                let stream = try StreamName(key: current.key)
                let head: StreamHead
                do { head = try StreamHead(decoding: current.value) } catch {
                    throw LedgerError(.corruptData, "stream head does not decode: \(error)", stream: stream)
                }
                guard try body(stream, head) else { return }
                pair = try cursor.next()
            }
        }
    }

    // MARK: deleteDataset

    /// Deletes `stream`'s dataset by appending a delete entry. Its records are gone from the
    /// views; its log and offsets go on (the next write continues the sync count).
    ///
    /// - Returns: the dataset as it was just before the delete.
    /// - Throws: `.notFound` when the dataset does not exist or is already deleted.
    @discardableResult
    public func deleteDataset(_ stream: StreamName, caller: String? = nil) async throws -> DatasetDescription {
        try Self.requireUserIdentity(stream.identity)
        let author = caller ?? stream.identity.rawValue
        return try await write { [self] txn in
            var before: DatasetState?
            _ = try self.append(txn, to: stream, author: author, events: [.deleteDataset], check: { view in
                guard let meta = view.dataset, !meta.deleted else {
                    throw LedgerError(.notFound, "dataset \(stream.dataset) does not exist", stream: stream)
                }
                before = meta
            })
            return DatasetDescription(stream: stream, state: before!)
        }
    }

    // MARK: describe / list / usage

    /// The dataset's metadata.
    /// - Throws: `.notFound` when it does not exist or was deleted.
    public func describeDataset(_ stream: StreamName) throws -> DatasetDescription {
        try Self.requireUserIdentity(stream.identity)
        return try read { txn in
            guard let head = try head(txn, stream), let meta = try dataset(txn, id: head.id, stream: stream), !meta.deleted else {
                throw LedgerError(.notFound, "dataset \(stream.dataset) does not exist", stream: stream)
            }
            return DatasetDescription(stream: stream, state: meta)
        }
    }

    /// The identity's datasets that exist, by name, paged.
    public func listDatasets(pool: IdentityPoolID, identity: IdentityID, maxResults: Int = 20, nextToken: String? = nil) throws -> DatasetsPage {
        try Self.requireUserIdentity(identity)
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "maxResults must be at least 1, not \(maxResults)") }
        let prefix = StreamName.prefix(pool: pool, identity: identity)
        var start: [UInt8]?
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .datasetsPage, key: tokenKey), payload.starts(with: prefix) else {
                throw LedgerError(.invalidParameter, "nextToken is not a dataset token this server issued for identity \(identity)")
            }
            start = payload + [0]  // the first key after the last one returned
        }
        return try read { txn in
            var page = DatasetsPage(datasets: [], nextToken: nil)
            var lastKey: [UInt8] = []
            try forEachStream(txn, prefix: prefix, from: start) { stream, head in
                guard let meta = try dataset(txn, id: head.id, stream: stream), !meta.deleted else { return true }
                if page.datasets.count == maxResults {
                    page.nextToken = SignedToken.sign(lastKey, kind: .datasetsPage, key: tokenKey)
                    return false
                }
                page.datasets.append(DatasetDescription(stream: stream, state: meta))
                lastKey = stream.key
                return true
            }
            return page
        }
    }

    /// The identity's dataset count, bytes and last change.
    /// - Throws: `.notFound` when the identity has never written.
    public func identityUsage(pool: IdentityPoolID, identity: IdentityID) throws -> IdentityUsage {
        try Self.requireUserIdentity(identity)
        return try read { txn in
            var count = 0
            var bytes: UInt64 = 0
            var last: Timestamp?
            var seen = false
            try forEachStream(txn, prefix: StreamName.prefix(pool: pool, identity: identity)) { stream, head in
                seen = true
                if let meta = try dataset(txn, id: head.id, stream: stream) {
                    if !meta.deleted { count += 1 }
                    bytes += meta.bytes
                    last = max(last ?? meta.lastModified, meta.lastModified)
                }
                return true
            }
            guard seen else { throw LedgerError(.notFound, "identity \(identity) in pool \(pool) has no data") }
            return IdentityUsage(pool: pool, identity: identity, datasetCount: count, dataStorage: bytes, lastModified: last)
        }
    }

    /// The pool's sync sessions, bytes and last change.
    /// - Throws: `.notFound` when the pool has neither data nor sessions.
    public func poolUsage(_ pool: IdentityPoolID) async throws -> PoolUsage {
        let sessions = try await sessionCount(pool: pool)
        let state = try read { txn in
            try txn.get(schema.pools, key: Array(pool.rawValue.utf8)).map { bytes in
                do { return try PoolState(decoding: bytes) } catch {
                    throw LedgerError(.corruptData, "pool view of \(pool) does not decode: \(error)")
                }
            }
        }
        guard state != nil || sessions > 0 else {
            throw LedgerError(.notFound, "identity pool \(pool) has no data")
        }
        return PoolUsage(pool: pool, syncSessionsCount: sessions, dataStorage: state?.bytes ?? 0, lastModified: state?.lastModified)
    }

    /// The pools this ledger knows (with data or sessions), by id, paged.
    public func listPools(maxResults: Int = 60, nextToken: String? = nil) async throws -> (pools: [PoolUsage], nextToken: String?) {
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "maxResults must be at least 1, not \(maxResults)") }
        var after: String?
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .poolsPage, key: tokenKey) else {
                throw LedgerError(.invalidParameter, "nextToken is not a pool token this server issued")
            }
            after = String(decoding: payload, as: UTF8.self)
        }
        var names = Set(pendingSessions.withLock { Array($0.keys) })
        try read { txn in
            for db in [schema.pools, schema.sessions] {
                try txn.withCursor(db) { cursor in
                    var pair = try cursor.first()
                    while let current = pair {
                        names.insert(String(decoding: current.key, as: UTF8.self))
                        pair = try cursor.next()
                    }
                }
            }
        }
        let sorted = names.filter { after == nil || $0 > after! }.sorted()
        var pools: [PoolUsage] = []
        for name in sorted.prefix(maxResults) {
            pools.append(try await poolUsage(try IdentityPoolID(name)))
        }
        let token = sorted.count > maxResults ? SignedToken.sign(Array(sorted[maxResults - 1].utf8), kind: .poolsPage, key: tokenKey) : nil
        return (pools, token)
    }
}
