import LedgerStorage

extension Ledger {
    // MARK: listRecords

    /// The records of `stream` changed after `lastSyncCount` (exclusive), paged, with a new
    /// sync session token. Records come in order of sync count, then stored key.
    ///
    /// Costs follow the page, not the dataset: the records are read through the
    /// `records-by-sync-count` view from `lastSyncCount + 1` (or where the previous page ended).
    /// - Throws: `.invalidParameter` for a bad `maxResults` or a foreign or altered `nextToken`.
    /// - Parameter sessionToken: a live session token for this stream, when the caller is
    ///   paging within one sync session: it is returned again instead of a new session.
    public func listRecords(_ stream: StreamName, after lastSyncCount: UInt64 = 0, maxResults: Int = 1024, nextToken: String? = nil, sessionToken: String? = nil) throws -> RecordsPage {
        try Self.requireUserIdentity(stream.identity)
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "maxResults must be at least 1, not \(maxResults)", stream: stream) }
        var resume: [UInt8]?  // the last row returned: sync count (8 B BE) ‖ stored key suffix
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .recordsPage, key: tokenKey) else {
                throw LedgerError(.invalidParameter, "nextToken is not a token this server issued", stream: stream)
            }
            var r = ByteReader(payload)
            guard let after = try? r.varint(), let length = try? r.varint(), length <= 512, let row = try? r.raw(Int(length)),
                  let name = try? r.raw(r.remaining), after == lastSyncCount, Array(name) == stream.key else {
                throw LedgerError(.invalidParameter, "nextToken belongs to another dataset or lastSyncCount", stream: stream)
            }
            resume = Array(row)
        }
        var page = try read { txn -> RecordsPage in
            guard let head = try head(txn, stream) else {
                return RecordsPage(records: [], nextToken: nil, datasetSyncCount: 0, datasetExists: false, datasetDeletedAfterRequestedSyncCount: false, lastModifiedBy: nil, syncSessionToken: "",
                                   mergedDatasetNames: try mergedDatasetNames(txn, stream, rootDeletes: 0))
            }
            let meta = try dataset(txn, id: head.id, stream: stream)
            var records: [Record] = []
            var token: String?
            if lastSyncCount < head.offset {
                let prefix = [UInt8].bigEndian(head.id)
                let start = resume.map { prefix + $0 + [0] } ?? prefix + [UInt8].bigEndian(lastSyncCount + 1)
                try txn.withCursor(schema.recordsBySyncCount) { cursor in
                    var pair = try cursor.seek(atLeast: start)
                    while let current = pair, current.key.starts(with: prefix) {
                        if records.count == maxResults {
                            var w = ByteWriter()
                            w.varint(lastSyncCount)
                            let last = Schema.syncCountKey(stream: head.id, syncCount: records[maxResults - 1].syncCount,
                                                           recordKey: Schema.recordKey(stream: head.id, key: records[maxResults - 1].key))
                            w.varint(UInt64(last.count - 8))
                            w.raw(last.dropFirst(8))
                            w.raw(stream.key)
                            token = SignedToken.sign(w.bytes, kind: .recordsPage, key: tokenKey)
                            return
                        }
                        records.append(try record(txn, stream: stream, row: current.key))
                        pair = try cursor.next()
                    }
                }
            }
            return RecordsPage(
                records: records, nextToken: token, datasetSyncCount: head.offset,
                datasetExists: meta.map { !$0.deleted } ?? false,
                // A device that never synced (0) holds nothing a delete could have removed; the
                // JavaScript and Android SDKs would wipe and cancel on `true` alone.
                datasetDeletedAfterRequestedSyncCount: lastSyncCount > 0 && (meta?.lastDeleteSyncCount ?? 0) > lastSyncCount,
                lastModifiedBy: meta?.lastModifiedBy, syncSessionToken: "",
                mergedDatasetNames: try mergedDatasetNames(txn, stream, rootDeletes: meta?.lastDeleteSyncCount ?? 0))
        }
        if let sessionToken, (try? checkSessionToken(sessionToken, for: stream)) != nil {
            page.syncSessionToken = sessionToken
        } else {
            page.syncSessionToken = issueSessionToken(for: stream)
        }
        return page
    }

    /// The record a `records-by-sync-count` row names.
    private func record(_ txn: Transaction, stream: StreamName, row: [UInt8]) throws -> Record {
        let count = row.bigEndianUInt64(at: 8)
        let recordKey = Array(row.prefix(8)) + row.dropFirst(16)
        guard let value = try txn.get(schema.records, key: recordKey) else {
            throw LedgerError(.corruptData, "records-by-sync-count names a record the view lacks", stream: stream, offset: count)
        }
        let (key, state): (String, RecordState)
        do { (key, state) = try Schema.decodeRecord(key: recordKey, value: value) } catch {
            throw LedgerError(.corruptData, "a record does not decode: \(error)", stream: stream, offset: count)
        }
        guard state.syncCount == count else {
            throw LedgerError(.corruptData, "record \(quoted(key)) has sync count \(state.syncCount), its records-by-sync-count row \(count)", stream: stream)
        }
        return Record(key: key, state: state)
    }

    // MARK: updateRecords

    /// Applies `patches` to `stream` all-or-nothing as one log entry, the Cognito way.
    ///
    /// Each patch's `syncCount` must equal the record's current one (0 for a record that does
    /// not exist); on success the dataset's sync count rises by exactly 1 and every changed
    /// record carries it. Returns when the entry is committed (on disk, in durable mode).
    ///
    /// - Parameters:
    ///   - deviceID: the device the caller writes from (1-256 bytes); recorded with the entry.
    ///   - caller: the authenticated caller, recorded as the entry's author (defaults to the
    ///     identity id).
    ///   - sessionToken: a token from ``listRecords(_:after:maxResults:nextToken:sessionToken:)``
    ///     for this stream.
    /// - Throws: ``LedgerError`` `.conflict` (naming each key and both counts),
    ///   `.limitExceeded`, `.invalidParameter`, `.invalidSessionToken`, `.diskFull`; in every
    ///   case nothing was written.
    ///   - trigger: the pool's SyncTrigger, when the caller is one it applies to (not the
    ///     developer's admin credential): the update goes through it (see `SyncTrigger.swift`).
    public func updateRecords(_ stream: StreamName, patches: [RecordPatch], deviceID: String? = nil, caller: String? = nil, sessionToken: String?,
                              idempotencyKey: String? = nil, trigger: (any SyncTrigger)? = nil) async throws -> UpdateResult {
        try Self.requireUserIdentity(stream.identity)
        // A retry of a call that was applied gets its answer, even when its session expired since.
        let idempotency = try idempotencyKey.map { name throws(LedgerError) in try IdempotencyRequest(name, stream: stream, deviceID: deviceID, patches: patches) }
        if let idempotency, let stored = try read({ txn in try storedUpdate(txn, idempotency) }) { return stored }
        try checkSessionToken(sessionToken, for: stream)
        let origin = try ChangeOrigin(author: caller ?? stream.identity.rawValue, device: deviceID)
        if patches.isEmpty {  // Cognito answers an empty update with no records and writes nothing
            let count = try read { txn in try head(txn, stream)?.offset ?? 0 }
            return UpdateResult(records: [], syncCount: count)
        }
        let change = try validateChange(try events(for: patches, stream: stream), for: stream, describe: { "patch \($0)" })
        if let trigger {
            guard let idempotency else {
                return try await updateRecordsThroughTrigger(stream, patches: patches, origin: origin, trigger: trigger, idempotency: nil)
            }
            // The hook runs outside the write transaction: a retry racing its original waits for
            // it and gets its stored answer, rather than calling the hook again.
            return try await idempotencyFlights.exclusive(idempotency.key) {
                if let stored = try read({ txn in try storedUpdate(txn, idempotency) }) { return stored }
                return try await updateRecordsThroughTrigger(stream, patches: patches, origin: origin, trigger: trigger, idempotency: idempotency)
            }
        }
        let expected = Expectation.records(patches.map { .syncCount($0.key, $0.syncCount) })
        return try await writeScoped(on: stream) { [self] scope in
            if let idempotency, let stored = try self.storedUpdate(scope.txn, idempotency) { return stored }
            let written = try self.appendUser(scope.txn, to: stream, origin: origin, change: change, expecting: expected)
            let records = patches.map { Record(key: $0.key, state: written.view.changed[RecordKey($0.key)]!) }
            let result = UpdateResult(records: records, syncCount: written.entry.offset)
            if let idempotency { try self.storeUpdate(scope, idempotency, result, at: written.entry.time) }
            return result
        }
    }

    /// Turns patches into events (a replace needs a value; a remove's value, which the
    /// JavaScript SDK sends as `""`, is ignored). The rules on keys and values are
    /// ``validateChange(_:for:describe:)``'s.
    func events(for patches: [RecordPatch], stream: StreamName) throws(LedgerError) -> [Event] {
        var events: [Event] = []
        events.reserveCapacity(patches.count)
        for (i, patch) in patches.enumerated() {
            switch patch.op {
            case .replace:
                guard let value = patch.value else {
                    throw LedgerError(.invalidParameter, "patch \(i): replace of \(quoted(patch.key)) needs a value", stream: stream)
                }
                events.append(.put(key: patch.key, value: value, deviceModified: patch.deviceModified))
            case .remove:
                events.append(.remove(key: patch.key, deviceModified: patch.deviceModified))
            }
        }
        return events
    }

    // MARK: deleteDataset

    /// Deletes `stream`'s dataset by appending a delete entry. Its records are gone from the
    /// views; its log and offsets go on (the next write continues the sync count).
    ///
    /// - Parameter caller: the authenticated caller, recorded as the entry's author.
    /// - Returns: the dataset as it was just before the delete.
    /// - Throws: `.notFound` when the dataset does not exist or is already deleted.
    @discardableResult
    public func deleteDataset(_ stream: StreamName, caller: String? = nil) async throws -> DatasetDescription {
        let change = try validateChange([.deleteDataset], for: stream)
        let origin = try ChangeOrigin(author: caller ?? stream.identity.rawValue)
        return try await write(on: stream) { [self] txn in
            let written = try self.appendUser(txn, to: stream, origin: origin, change: change, expecting: .datasetExists)
            return DatasetDescription(stream: stream, state: written.view.original!)
        }
    }
}
