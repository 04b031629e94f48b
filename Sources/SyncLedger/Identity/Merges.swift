import Crypto
import Foundation
import LedgerStorage

/// One dataset a merge brought over: the source identity's dataset `D` became `D.<source>`
/// of the surviving identity. Kept as the record `merged/<survivor>/<D>|<child>` of the pool's
/// `identities` stream: the pointer from the new stream to the history it copies.
public struct MergedDataset: Sendable, Hashable, Codable {
    /// The dataset name it is reported under (`MergedDatasetNames` of ListRecords of `root`).
    public var root: String
    /// The new dataset of the survivor: `<root>.<source identity>`.
    public var child: String
    /// The identity merged away.
    public var sourceIdentity: String
    /// Its dataset that was copied (named `root`).
    public var sourceDataset: String
    /// The source dataset's sync count when it was copied: its history up to there is the
    /// history of the copy's first entry.
    public var sourceSyncCount: UInt64
    /// The offset of the root's last delete at the merge: a later delete of the root ends the
    /// report (DeleteDataset: "datasets that this dataset was merged with will no longer
    /// report the merge").
    public var rootDeletes: UInt64
    /// The offset of the child's last delete at the merge: deleting the child ends the report.
    public var childDeletes: UInt64
    /// When the merge happened.
    public var merged: Timestamp
}

/// What a merge did.
public struct MergeSummary: Sendable, Hashable {
    /// The identity that survives.
    public var survivor: String
    /// The identities merged into it (now disabled).
    public var merged: [String]
    /// The datasets copied.
    public var datasets: [MergedDataset]
}

extension Ledger {
    /// The name of the copy of dataset `name` of identity `source` under the survivor: see
    /// ``DatasetName/mergedCopyName(_:source:)`` (the client names its local copies the same way).
    public static func mergedDatasetName(_ name: String, source: String) -> String {
        DatasetName.mergedCopyName(name, source: source)
    }

    static func mergedPrefix(identity: String, root: String) -> String { "merged/\(identity)/\(root)|" }

    /// Merges identity `source` into `destination` inside a write transaction, the way Cognito
    /// does: the source's logins move to the destination, each live dataset `D` of the source
    /// is copied into a new stream `D.<source>` of the destination (its current records, as the
    /// first entry, through the same validation and `apply` as every write), a record points
    /// from the copy to the source's history, and the source is disabled. The source's
    /// datasets and history stay in the log.
    ///
    /// Copies are admitted past the identity's dataset limits (as in Cognito, they then count
    /// toward them: no new dataset until some are deleted).
    ///
    /// - Throws: `.notFound` for an unknown identity; `.conflict` when either is disabled, when
    ///   both have a different user of the same provider (other than the pool's developer
    ///   provider), or a copy's name is taken; `.limitExceeded` past
    ///   ``maxLoginsPerIdentity`` logins; `.unavailable` (retry) on a cluster while copies of an
    ///   earlier merge into `source` are still being made — merged on now, they would land in an
    ///   identity merged away. Nothing is written then: the caller's transaction fails.
    func mergeIdentity(_ txn: Transaction, _ edit: inout IdentityEdit, pool: IdentityPoolID, source: String, into destination: String,
                       developerProvider: String?, author: String, now: Timestamp) throws -> [MergedDataset] {
        guard source != destination else { throw LedgerError(.conflict, "identity \(source) cannot be merged into itself") }
        guard var from = try edit.identity(source) else { throw LedgerError(.notFound, "identity \(source) does not exist in identity pool \(pool)") }
        guard var into = try edit.identity(destination) else { throw LedgerError(.notFound, "identity \(destination) does not exist in identity pool \(pool)") }
        guard from.isEnabled else { throw LedgerError(.conflict, "identity \(source) is disabled (\(from.disabled ?? "")); it cannot be merged") }
        guard into.isEnabled else { throw LedgerError(.conflict, "identity \(destination) is disabled (\(into.disabled ?? "")); nothing can be merged into it") }
        // On a cluster, a copy of an earlier merge into `source` still to be made would land in
        // an identity merged away: wait for it — a minute at most, so a copy that keeps failing
        // does not hold the identity up for good.
        if cluster.current != nil, let waiting = try pendingCopy(txn, pool: pool.rawValue, into: source),
           now.milliseconds - waiting.merged.milliseconds < Self.pendingCopyHoldMilliseconds {
            throw LedgerError(.unavailable, "identity \(source) is still receiving the copy \(waiting.child) of an earlier merge into it; nothing was written, retry in a few seconds")
        }

        let moving = try edit.logins(of: source)
        let staying = try edit.logins(of: destination)
        for login in moving where login.provider != developerProvider {
            if let other = staying.first(where: { $0.provider == login.provider && $0.subject != login.subject }) {
                throw LedgerError(.conflict, "identities \(source) and \(destination) are linked to different users of \(login.provider) (\(quoted(login.subject)), \(quoted(other.subject))); they cannot be merged")
            }
        }
        let all = Set(moving).union(staying)
        guard all.count <= Self.maxLoginsPerIdentity else {
            throw LedgerError(.limitExceeded, "merging \(source) into \(destination) would link \(all.count) logins; the limit is \(Self.maxLoginsPerIdentity)")
        }
        for login in moving { try edit.link(login, to: destination) }
        into.logins = IdentityEdit.providers(into.logins.map { Login(provider: $0, subject: "") } + moving)
        into.modified = now
        from.logins = []
        from.mergedInto = destination
        from.disabled = "merged into \(destination)"
        from.modified = now
        edit.put(into)
        edit.put(from)

        // The datasets: each live one becomes a new stream of the survivor.
        let sourceID = try IdentityID(source)
        let destinationID = try IdentityID(destination)
        var sources: [(StreamName, StreamHead)] = []
        try forEachStream(txn, prefix: StreamName.prefix(pool: pool, identity: sourceID)) { stream, head in
            if !stream.isInternal { sources.append((stream, head)) }
            return true
        }
        var copies: [MergedDataset] = []
        let deferred = defersMergeCopies(pool: pool, destination: destination)
        for (stream, sourceHead) in sources {
            guard let meta = try dataset(txn, id: sourceHead.id, stream: stream), !meta.deleted else { continue }
            let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: sourceHead.id)
            let events = try view.storedRecordStates().compactMap { key, state -> Event? in
                state.value.map { .put(key: key, value: $0, deviceModified: state.deviceModified) }
            }
            // A dataset whose records were all removed has nothing to copy.
            guard !events.isEmpty else { continue }
            let root = stream.dataset.rawValue
            let child = try DatasetName(Self.mergedDatasetName(root, source: source))
            let target = StreamName(pool: pool, identity: destinationID, dataset: child)
            let existing = try head(txn, target).flatMap { try dataset(txn, id: $0.id, stream: target) }
            if let existing, !existing.deleted {
                throw LedgerError(.conflict, "identity \(destination) already has a dataset named \(child); merging \(source) would overwrite it", stream: target)
            }
            let rootStream = StreamName(pool: pool, identity: destinationID, dataset: stream.dataset)
            let rootMeta = try head(txn, rootStream).flatMap { try dataset(txn, id: $0.id, stream: rootStream) }
            let change = try validateChange(events, for: target, describe: { "record \($0) of \(root)" })
            let childDeletes: UInt64
            if deferred {
                // On a cluster the survivor's shard owner makes the copy next (ClusterMerges.swift).
                let pending = PendingMergeCopy(pool: pool.rawValue, destination: destination, child: child.rawValue, sourceIdentity: source,
                                               sourceDataset: root, sourceSyncCount: sourceHead.offset, author: author, merged: now)
                edit.set(Self.pendingCopyPrefix + destination + "/" + child.rawValue, Self.json(pending))
                childDeletes = existing?.lastDeleteSyncCount ?? 0  // a put leaves it as it is
            } else {
                let written = try appendUser(txn, to: target, origin: try ChangeOrigin(author: author), change: change, admission: .merge)
                childDeletes = written.view.dataset?.lastDeleteSyncCount ?? 0
            }
            let record = MergedDataset(root: root, child: child.rawValue, sourceIdentity: source, sourceDataset: root, sourceSyncCount: sourceHead.offset,
                                       rootDeletes: rootMeta?.lastDeleteSyncCount ?? 0, childDeletes: childDeletes, merged: now)
            edit.set(Self.mergedPrefix(identity: destination, root: root) + child.rawValue, Self.json(record))
            copies.append(record)
        }
        return copies
    }

    /// The datasets merged into `stream`'s identity under `stream`'s name that still report
    /// the merge (ListRecords' `MergedDatasetNames`): the copy exists and was not deleted since,
    /// and neither was the root.
    func mergedDatasetNames(_ txn: Transaction, _ stream: StreamName, rootDeletes: UInt64) throws -> [String] {
        let identities = Self.identitiesStream(stream.pool)
        guard let head = try head(txn, identities) else { return [] }
        let view = try StoredDatasetView(txn: txn, schema: schema, stream: identities, streamID: head.id)
        var names: [String] = []
        for (_, text) in try view.storedRecords(prefix: Self.mergedPrefix(identity: stream.identity.rawValue, root: stream.dataset.rawValue)) {
            let merge = try Self.decode(MergedDataset.self, text, stream: identities)
            guard merge.rootDeletes == rootDeletes, let name = try? DatasetName(merge.child) else { continue }
            let child = StreamName(pool: stream.pool, identity: stream.identity, dataset: name)
            guard let meta = try self.head(txn, child).flatMap({ try dataset(txn, id: $0.id, stream: child) }),
                  !meta.deleted, meta.lastDeleteSyncCount == merge.childDeletes,
                  try !mergeCopyRefused(txn, pool: stream.pool, identity: stream.identity, child: merge.child) else { continue }
            names.append(merge.child)
        }
        return names
    }

    /// The merges recorded for identity `identity` of `pool` (every one, reported or not).
    public func merges(pool: IdentityPoolID, identity: String) throws -> [MergedDataset] {
        let stream = Self.identitiesStream(pool)
        return try records(stream, prefix: "merged/\(identity)/").map { try Self.decode(MergedDataset.self, $0.1, stream: stream) }
    }
}

extension StoredDatasetView {
    /// Every stored record (tombstones too) with its state, in key order. Changes not yet
    /// flushed are not seen.
    func storedRecordStates() throws -> [(key: String, state: RecordState)] {
        try schema.storedRecords(txn, streamID: streamID, stream: stream)
    }
}
