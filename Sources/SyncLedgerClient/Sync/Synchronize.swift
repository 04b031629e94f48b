import Foundation
import SyncLedgerWire

extension SyncClient {
    /// Synchronizes one dataset with the server, as the AWS SDKs' sync managers do (Android's
    /// `DefaultDataset` is the reference; docs/client.md lists where this differs and why):
    ///
    /// 1. Local datasets `<name>.<identity>` (from an identity change) and, after the pull, the
    ///    server's `MergedDatasetNames` go to ``SyncHandler/datasetsMerged(_:merged:)``.
    /// 2. A dataset deleted locally is deleted on the server (one the server never had is fine)
    ///    and forgotten.
    /// 3. Pull: ListRecords after the local sync count, every page. A dataset deleted on the
    ///    server since then goes to ``SyncHandler/datasetDeleted(_:)``.
    /// 4. A local change that meets a newer server change of a different value is a conflict,
    ///    given to ``SyncHandler/resolve(conflicts:dataset:)``; resolving with the local record or
    ///    a new value takes the server's sync count, so the push passes. Unresolved conflicts
    ///    fail the sync and leave every local change in place.
    /// 5. The server's other records are written; the cursor moves only when none was skipped
    ///    (a record changed locally meanwhile is never overwritten).
    /// 6. Push: the dirty records with the pull's session token and the device id. A 409 (another
    ///    device wrote first) sets the cursor back to the oldest sync count pushed and pulls again,
    ///    at most ``maxRetries`` more times, then fails with ``SyncClientError/retriesExhausted(_:)``.
    ///
    /// One sync runs at a time per dataset; a second call waits for the first.
    /// - Throws: ``SyncClientError``; the dataset's last sync outcome and error are stored.
    @discardableResult
    public func synchronize(_ dataset: String, handler: any SyncHandler = DefaultSyncHandler()) async throws -> SyncReport {
        let name = try Self.checkName(dataset)
        let identity = try await identity()
        let lock = "\(identity)\u{0}\(name)"
        await locks.acquire(lock)
        do {
            let report = try await synchronizeLocked(identity: identity, name: name, handler: handler)
            await locks.release(lock)
            return report
        } catch {
            try? store.recordSync(identity: identity, dataset: name, outcome: .failed, error: "\(error)", now: Date())
            await locks.release(lock)
            throw error
        }
    }

    private func synchronizeLocked(identity: String, name: String, handler: any SyncHandler) async throws -> SyncReport {
        var report = SyncReport(dataset: name)
        let local = try store.datasets(identity: identity).map(\.name).filter { Self.isMergedName($0, of: name) }
        if !local.isEmpty {
            report.merged = local
            guard await handler.datasetsMerged(name, merged: local) else { throw SyncClientError.cancelled("the handler did not accept the merged datasets \(local.joined(separator: ", "))") }
        }
        for attempt in 0...maxRetries {
            report.attempts = attempt + 1
            let cursor = try store.dataset(identity: identity, name: name)?.lastSyncCount ?? 0
            if cursor < 0 {
                try await transport.deleteDataset(identity: identity, dataset: name)
                try store.purge(identity: identity, dataset: name)
                report.deleted = true
                report.lastSyncCount = 0
                return report
            }
            let updates = try await transport.listUpdates(identity: identity, dataset: name, after: UInt64(cursor))
            let remoteMerged = updates.mergedDatasetNames.filter { !report.merged.contains($0) }
            if !remoteMerged.isEmpty {
                report.merged += remoteMerged
                guard await handler.datasetsMerged(name, merged: remoteMerged) else {
                    throw SyncClientError.cancelled("the handler did not accept the merged datasets \(remoteMerged.joined(separator: ", "))")
                }
            }
            if (cursor != 0 && !updates.datasetExists) || updates.deletedAfterRequestedSyncCount {
                guard await handler.datasetDeleted(name) else { throw SyncClientError.datasetDeletedOnServer(name) }
                try store.purge(identity: identity, dataset: name)
                report.deleted = true
                if !updates.datasetExists { return report }
                // Deleted and made again on the server: start over from its first entry.
                continue
            }

            // The pull: conflicts, records to write, and local changes the server's record is
            // the base of (same sync count: not a conflict, kept for the push). The local
            // records are read now; a change after this is seen by applyPull's version check.
            let records = try store.snapshot(identity: identity, dataset: name, keys: updates.records.map(\.key))
            var conflicts: [Conflict] = []
            var apply: [RemoteRecord] = []
            for r in updates.records {
                guard let mine = records[r.key], mine.isDirty else { apply.append(r); continue }
                if mine.value == r.value { apply.append(r) }
                else if mine.syncCount == r.syncCount { continue }
                else { conflicts.append(Conflict(key: r.key, local: mine, remote: r)) }
            }
            var resolutions: [String: (Resolution, RemoteRecord)] = [:]
            if !conflicts.isEmpty {
                let chosen = await handler.resolve(conflicts: conflicts, dataset: name) ?? [:]
                let open = conflicts.filter { chosen[$0.key] == nil }.map(\.key)
                guard open.isEmpty else { throw SyncClientError.unresolvedConflicts(open) }
                for c in conflicts { resolutions[c.key] = (chosen[c.key]!, c.remote) }
                apply += conflicts.map(\.remote)
                report.conflicts += conflicts.count
            }
            let skipped = try store.applyPull(identity: identity, dataset: name, remote: apply, resolutions: resolutions, snapshot: records,
                                              cursor: updates.records.isEmpty ? nil : updates.datasetSyncCount, now: Date())
            report.pulled += apply.count - skipped.count

            // The push.
            let dirty = try store.dirtyRecords(identity: identity, dataset: name)
            if dirty.isEmpty {
                if !skipped.isEmpty { continue }  // a local change came in during the pull: sync again
                return try finish(&report, identity: identity, name: name)
            }
            try checkLimits(identity: identity, name: name)
            let snapshot = Dictionary(dirty.map { ($0.key, $0.record) }, uniquingKeysWith: { a, _ in a })
            let patches = dirty.map { RecordPatch(key: $0.key, value: $0.record.value, syncCount: $0.record.syncCount, deviceLastModified: $0.record.deviceLastModified) }
            do {
                let base = UInt64(max(try store.dataset(identity: identity, name: name)?.lastSyncCount ?? 0, 0))
                let accepted = try await transport.pushChanges(identity: identity, dataset: name, base: base, patches: patches,
                                                               sessionToken: updates.syncSessionToken, deviceID: deviceID)
                try store.applyPush(identity: identity, dataset: name, accepted: accepted, snapshot: snapshot, now: Date())
                report.pushed += accepted.count
                return try finish(&report, identity: identity, name: name)
            } catch SyncClientError.conflict {
                // Another device wrote first: fetch again from the oldest base pushed.
                let oldest = patches.map(\.syncCount).min() ?? 0
                try store.rewind(identity: identity, dataset: name, to: oldest)
                continue
            }
        }
        throw SyncClientError.retriesExhausted(maxRetries + 1)
    }

    private func finish(_ report: inout SyncReport, identity: String, name: String) throws -> SyncReport {
        try store.recordSync(identity: identity, dataset: name, outcome: .synced, error: nil, now: Date())
        report.lastSyncCount = try store.dataset(identity: identity, name: name)?.lastSyncCount ?? 0
        return report
    }

    /// The server's limits, checked before a push so that a push the server would refuse is
    /// not sent (records and bytes; keys and values are checked at put).
    private func checkLimits(identity: String, name: String) throws {
        guard let d = try store.dataset(identity: identity, name: name) else { return }
        let limits = store.limits
        guard d.recordCount <= limits.maxRecordsPerDataset else {
            throw SyncClientError.limitExceeded("dataset \(name) holds \(d.recordCount) records; the server takes at most \(limits.maxRecordsPerDataset)")
        }
        guard d.bytes <= limits.maxDatasetBytes else {
            throw SyncClientError.limitExceeded("dataset \(name) holds \(d.bytes) bytes; the server takes at most \(limits.maxDatasetBytes)")
        }
    }

    /// Whether `candidate` is `<name>.<identity id>` (an identity id is `<region>:<uuid>`).
    static func isMergedName(_ candidate: String, of name: String) -> Bool {
        guard candidate.hasPrefix(name + "."), candidate.count > name.count + 1 else { return false }
        let rest = candidate.dropFirst(name.count + 1)
        return (try? IdentityID(String(rest))) != nil && rest.contains(":")
    }
}
