import LedgerStorage

extension Ledger {
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

    /// The bytes of keys and values `stream`'s dataset holds now, removed records' keys included
    /// (0 when it has none): a bound on what reading it costs, for a caller choosing where to
    /// run the read. One read of the dataset's metadata.
    public func datasetBytes(_ stream: StreamName) throws -> UInt64 {
        try read { txn in
            guard let head = try head(txn, stream), let meta = try dataset(txn, id: head.id, stream: stream) else { return 0 }
            return meta.bytes + meta.tombstoneBytes
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
                guard !stream.isInternal, let meta = try dataset(txn, id: head.id, stream: stream), !meta.deleted else { return true }
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
                guard !stream.isInternal else { return true }
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

    /// The pools this ledger knows (with data or sessions), by id, paged: one seek into each
    /// of the two tables from the token's pool on, then a page read, so the cost follows the
    /// page, not the number of pools.
    /// - Throws: `.invalidParameter` for a bad `maxResults`, or a `nextToken` this server did
    ///   not issue for this call or that was altered.
    public func listPools(maxResults: Int = 60, nextToken: String? = nil) async throws -> (pools: [PoolUsage], nextToken: String?) {
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "maxResults must be at least 1, not \(maxResults)") }
        var after: String?
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .poolsPage, key: tokenKey),
                  let id = try? IdentityPoolID(String(decoding: payload, as: UTF8.self)) else {
                throw LedgerError(.invalidParameter, "nextToken is not a pool token this server issued")
            }
            after = id.rawValue
        }
        // The first maxResults + 1 names after the token's of each source, merged: enough to
        // fill the page and to know whether there is more.
        let wanted = min(maxResults, 1_000_000) + 1
        var names = Set(pendingSessions.withLock { Array($0.keys) }.filter { after == nil || $0 > after! })
        try read { txn in
            for db in [schema.pools, schema.sessions] {
                try txn.withCursor(db) { cursor in
                    var pair = try after.map { try cursor.seek(atLeast: Array($0.utf8) + [0]) } ?? cursor.first()
                    var taken = 0
                    while let current = pair, taken < wanted {
                        names.insert(String(decoding: current.key, as: UTF8.self))
                        taken += 1
                        pair = try cursor.next()
                    }
                }
            }
        }
        let sorted = names.sorted().prefix(wanted)
        var pools: [PoolUsage] = []
        for name in sorted.prefix(maxResults) {
            pools.append(try await poolUsage(try IdentityPoolID(name)))
        }
        let token = sorted.count > maxResults ? SignedToken.sign(Array(sorted[sorted.startIndex + maxResults - 1].utf8), kind: .poolsPage, key: tokenKey) : nil
        return (pools, token)
    }

    /// The dataset's state and every record (removed ones included, in key order), as they are
    /// now, read in one transaction without opening a sync session: what a tool that only
    /// looks wants. Nil state: the dataset was never written.
    public func snapshot(_ stream: StreamName) throws -> (dataset: DatasetState?, records: [Record]) {
        try read { txn in
            guard let head = try head(txn, stream) else { return (nil, []) }
            let prefix = [UInt8].bigEndian(head.id)
            var records: [Record] = []
            try txn.withCursor(schema.records) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    let (key, state): (String, RecordState)
                    do { (key, state) = try Schema.decodeRecord(key: current.key, value: current.value) } catch {
                        throw LedgerError(.corruptData, "a record does not decode: \(error)", stream: stream)
                    }
                    records.append(Record(key: key, state: state))
                    pair = try cursor.next()
                }
            }
            return (try dataset(txn, id: head.id, stream: stream), records)
        }
    }
}
