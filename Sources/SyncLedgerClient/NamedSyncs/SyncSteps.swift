import Foundation

/// The steps of a named sync on one dataset (see ``SyncManager`` for the semantics). Each holds
/// the dataset's lock (the one ``SyncClient/synchronize(_:handler:)`` takes) while it runs.
extension SyncManager {
    /// Down: pulls after the dataset's cursor and writes the records per `mode`.
    /// - Returns: records met (fetched).
    func down(_ ds: inout DatasetSyncState, dataset name: String, mode: MergeMode, identity: String) async throws -> Int {
        try await locked(identity, name) {
            let meta = try store.dataset(identity: identity, name: name)
            if meta?.isDeletedLocally == true { return 0 }  // synchronize tells the server first
            let cursor = ds.syncCount
            let updates = try await client.transport.listUpdates(identity: identity, dataset: name, after: cursor)
            // The local records the pull met, read now; applyPull's version check sees later changes.
            let records = try store.snapshot(identity: identity, dataset: name, keys: updates.records.map(\.key))
            ds.fetched += updates.records.count
            if (cursor != 0 && !updates.datasetExists) || updates.deletedAfterRequestedSyncCount {
                throw SyncClientError.datasetDeletedOnServer(name)
            }
            var apply: [RemoteRecord] = []
            var leftDirty = 0
            for r in updates.records {
                if mode == .leaveIfChanged, let mine = records[r.key], mine.isDirty {
                    leftDirty += 1
                    continue
                }
                apply.append(r)
            }
            // The shared cursor moves only when this pull covered everything after it and
            // nothing was left out (applyPull also keeps it when a record changed meanwhile).
            let shared = UInt64(max(meta?.lastSyncCount ?? 0, 0))
            let advance = cursor <= shared && leftDirty == 0 && !updates.records.isEmpty ? updates.datasetSyncCount : nil
            let raced = try store.applyPull(identity: identity, dataset: name, remote: apply, resolutions: [:], snapshot: records,
                                            cursor: advance, now: Date())
            ds.pulled += apply.count - raced.count
            ds.skipped += leftDirty + raced.count
            ds.syncCount = max(cursor, updates.datasetSyncCount)
            return updates.records.count
        }
    }

    /// Up: pushes the dirty records per `mode`, pulling first; a 409 pulls again, bounded.
    /// - Returns: dirty records met.
    func up(_ ds: inout DatasetSyncState, dataset name: String, mode: MergeMode, identity: String) async throws -> Int {
        try await locked(identity, name) {
            var met: Int?
            for _ in 0...client.maxRetries {
                guard let meta = try store.dataset(identity: identity, name: name), !meta.isDeletedLocally else { return met ?? 0 }
                let dirty = try store.dirtyRecords(identity: identity, dataset: name)
                if met == nil { met = dirty.count }
                if dirty.isEmpty { return met ?? 0 }
                // A key not in a pull after `after` has on the server the sync count this device
                // last saw: every dirty key's own count is ≥ it, and the dataset cursor says the
                // device has all changes up to it (a new key the server has came after it).
                let shared = UInt64(meta.lastSyncCount)
                let after = min(shared, dirty.map(\.record.syncCount).filter { $0 > 0 }.min() ?? shared)
                let updates = try await client.transport.listUpdates(identity: identity, dataset: name, after: after)
                ds.fetched += updates.records.count
                if (after != 0 && !updates.datasetExists) || updates.deletedAfterRequestedSyncCount {
                    throw SyncClientError.datasetDeletedOnServer(name)
                }
                let server = Dictionary(updates.records.map { ($0.key, $0) }, uniquingKeysWith: { _, newer in newer })
                var patches: [RecordPatch] = []
                var leftAlone = 0
                for (key, mine) in dirty {
                    var count = mine.syncCount
                    if let theirs = server[key], theirs.syncCount != mine.syncCount {
                        // Changed on the server since this device last saw it.
                        guard mode == .overwrite else {
                            leftAlone += 1
                            continue
                        }
                        count = theirs.syncCount
                    }
                    patches.append(RecordPatch(key: key, value: mine.value, syncCount: count, deviceLastModified: mine.deviceLastModified))
                }
                if patches.isEmpty {
                    ds.skipped += leftAlone
                    return met ?? 0
                }
                let snapshot = Dictionary(dirty.map { ($0.key, $0.record) }, uniquingKeysWith: { a, _ in a })
                do {
                    let accepted = try await client.transport.putRecords(identity: identity, dataset: name, patches: patches,
                                                                         sessionToken: updates.syncSessionToken, deviceID: client.deviceID)
                    try store.applyPush(identity: identity, dataset: name, accepted: accepted, snapshot: snapshot, now: Date())
                    ds.pushed += accepted.count
                    ds.skipped += leftAlone
                    return met ?? 0
                } catch SyncClientError.conflict {
                    continue  // another device wrote in between: pull again
                }
            }
            throw SyncClientError.retriesExhausted(client.maxRetries + 1)
        }
    }

    /// Removes the dataset's clean records the server no longer has with a value.
    func cleanGhosts(dataset name: String, identity: String) async throws -> Int {
        try await locked(identity, name) {
            guard let meta = try store.dataset(identity: identity, name: name), !meta.isDeletedLocally else { return 0 }
            let updates = try await client.transport.listUpdates(identity: identity, dataset: name, after: 0)
            let live = Set(updates.records.filter { $0.value != nil }.map(\.key))
            var removed = 0
            for (key, record) in try store.records(identity: identity, dataset: name).sorted(by: { $0.key < $1.key })
            where !record.isDirty && record.value != nil && !live.contains(key) {
                if try store.removeCleanRecord(identity: identity, dataset: name, key: key, version: record.version) { removed += 1 }
            }
            return removed
        }
    }

    /// Runs `body` holding the dataset's sync lock.
    private func locked<T>(_ identity: String, _ name: String, _ body: () async throws -> T) async throws -> T {
        let key = "\(identity)\u{0}\(name)"
        await client.locks.acquire(key)
        do {
            let result = try await body()
            await client.locks.release(key)
            return result
        } catch {
            await client.locks.release(key)
            throw error
        }
    }
}
