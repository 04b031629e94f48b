import Foundation
import LedgerStorage

/// A copy an identity merge on a cluster left for the surviving identity's shard: the merge
/// itself — logins moved, the source disabled, the pointer to the copy — is one write of the
/// registry shard, where the pool's identity records are; the copy of each source dataset is a
/// write of the survivor's shard, made next by that shard's owner (any node that owns it, even
/// one that starts later: the record stays in the pool's `identities` stream as
/// `pending-copy/<survivor>/<copy>`).
public struct PendingMergeCopy: Sendable, Hashable, Codable {
    /// The pool.
    public var pool: String
    /// The surviving identity.
    public var destination: String
    /// The copy's dataset name (`<dataset>.<source identity>`).
    public var child: String
    /// The identity merged away.
    public var sourceIdentity: String
    /// Its dataset copied.
    public var sourceDataset: String
    /// The source dataset's sync count at the merge: the copy is its state as of there.
    public var sourceSyncCount: UInt64
    /// Who merged.
    public var author: String
    /// When.
    public var merged: Timestamp
}

extension Ledger {
    static let pendingCopyPrefix = "pending-copy/"
    static let copiedPrefix = "copied/"
    static let pendingIndexPrefix = Array("merge-pending/".utf8)

    /// Whether a merge into `destination` writes its copies later, in the survivor's shard:
    /// on a cluster, when that is not the registry shard.
    func defersMergeCopies(pool: IdentityPoolID, destination: String) -> Bool {
        guard let map = cluster.current?.shards else { return false }
        return map.shard(pool: pool.rawValue, identity: destination) != ShardMap.registryShard
    }

    /// The stream recording the copies merges made into `identity`.
    static func mergesStream(_ pool: IdentityPoolID, _ identity: IdentityID) -> StreamName {
        StreamName(pool: pool, identity: identity, dataset: .merges)
    }

    static func pendingIndexKey(pool: String, destination: String, child: String) -> [UInt8] {
        pendingIndexPrefix + Array(pool.utf8) + [0] + Array(destination.utf8) + [0] + Array(child.utf8)
    }

    /// On every replica, as an entry is stored: a merge's pending copy (an entry of a pool's
    /// `identities` stream) joins this replica's list of copies to make, unless the copy is
    /// already here (its shard may be applied first); a made copy (an entry of an identity's
    /// `_syncledger.merges` stream) leaves it.
    func notePendingCopies(_ txn: Transaction, _ entry: LogEntry) throws {
        if entry.stream.identity == Self.systemIdentity, entry.stream.dataset.rawValue == "identities" {
            for case .put(let key, let value, _) in entry.events where key.hasPrefix(Self.pendingCopyPrefix) {
                let copy = try Self.decode(PendingMergeCopy.self, value, stream: entry.stream)
                let marker = Self.mergesStream(entry.stream.pool, try IdentityID(copy.destination))
                guard try recordValue(txn, marker, key: Self.copiedPrefix + copy.child) == nil else { continue }
                try txn.put(schema.meta, key: Self.pendingIndexKey(pool: copy.pool, destination: copy.destination, child: copy.child), value: Array(value.utf8))
            }
        } else if entry.stream.dataset == DatasetName.merges {
            for case .put(let key, _, _) in entry.events where key.hasPrefix(Self.copiedPrefix) {
                _ = try txn.delete(schema.meta, key: Self.pendingIndexKey(pool: entry.stream.pool.rawValue, destination: entry.stream.identity.rawValue,
                                                                          child: String(key.dropFirst(Self.copiedPrefix.count))))
            }
        }
    }

    /// How long a merge of an identity still receiving the copies of an earlier merge into it
    /// waits for them (is refused, to be retried) before it goes on without them.
    static let pendingCopyHoldMilliseconds: Int64 = 60_000

    /// The most recent copy a merge into `identity` left that this replica has not seen made, if any.
    func pendingCopy(_ txn: Transaction, pool: String, into identity: String) throws -> PendingMergeCopy? {
        let prefix = Self.pendingIndexPrefix + Array(pool.utf8) + [0] + Array(identity.utf8) + [0]
        return try txn.withCursor(schema.meta) { cursor in
            var latest: PendingMergeCopy?
            var pair = try cursor.seek(atLeast: prefix)
            while let current = pair, current.key.starts(with: prefix) {
                let copy = try Self.decode(PendingMergeCopy.self, String(decoding: current.value, as: UTF8.self), stream: Self.identitiesStream(try IdentityPoolID(pool)))
                if latest.map({ copy.merged.milliseconds > $0.merged.milliseconds }) ?? true { latest = copy }
                pair = try cursor.next()
            }
            return latest
        }
    }

    /// The copies merges left that this replica has not seen made, oldest merge first.
    public func pendingMergeCopies() throws -> [PendingMergeCopy] {
        try read { txn in
            try txn.withCursor(schema.meta) { cursor in
                var result: [PendingMergeCopy] = []
                var pair = try cursor.seek(atLeast: Self.pendingIndexPrefix)
                while let current = pair, current.key.starts(with: Self.pendingIndexPrefix) {
                    do { result.append(try JSONDecoder().decode(PendingMergeCopy.self, from: Data(current.value))) } catch {
                        throw LedgerError(.corruptData, "a pending merge copy does not decode: \(error)")
                    }
                    pair = try cursor.next()
                }
                return result.sorted { ($0.merged, $0.destination, $0.child) < ($1.merged, $1.destination, $1.child) }
            }
        }
    }

    /// Makes the pending copies whose survivor is on a shard `owns` says this node owns: each the
    /// source dataset's records as of the merge, written to the survivor through the same
    /// validation and `apply` as every write (admitted past the dataset limits, as a merge's copy
    /// is), with its `copied/<copy>` record in the same commit. A copy whose source this replica
    /// has not caught up with waits; one whose name was taken meanwhile by a live dataset is
    /// not made (and recorded so), and so is one the rules refuse (a limit changed since). Each
    /// copy on its own: one that fails for a while (this node lost the shard, the log did not
    /// answer) does not hold up the others. Idempotent.
    /// - Returns: how many were made (or recorded as not made).
    /// - Throws: the first error of a copy left for later, after trying the others.
    @discardableResult
    public func completePendingMergeCopies(owns: (Int) -> Bool) async throws -> Int {
        guard let map = cluster.current?.shards else { return 0 }
        var done = 0
        var failure: (any Error)?
        for copy in try pendingMergeCopies() where owns(map.shard(pool: copy.pool, identity: copy.destination)) {
            do {
                if try await makeCopy(copy) { done += 1 }
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
        return done
    }

    /// Makes one pending copy (see ``completePendingMergeCopies(owns:)``); false when its source
    /// is not here yet.
    private func makeCopy(_ copy: PendingMergeCopy) async throws -> Bool {
        do {
            let pool = try IdentityPoolID(copy.pool)
            let destination = try IdentityID(copy.destination)
            let source = StreamName(pool: pool, identity: try IdentityID(copy.sourceIdentity), dataset: try DatasetName(copy.sourceDataset))
            guard try read({ txn in try head(txn, source)?.offset ?? 0 }) >= copy.sourceSyncCount else { return false }
            let state = try dataset(source, asOfSyncCount: copy.sourceSyncCount)
            let events = state.records.sorted { $0.key.string < $1.key.string }.compactMap { key, record -> Event? in
                record.value.map { .put(key: key.string, value: $0, deviceModified: record.deviceModified) }
            }
            let target = StreamName(pool: pool, identity: destination, dataset: try DatasetName(copy.child))
            let origin = try ChangeOrigin(author: copy.author)
            try await write { [self] txn in
                let marker = Self.mergesStream(pool, destination)
                guard try recordValue(txn, marker, key: Self.copiedPrefix + copy.child) == nil else { return }
                var outcome = Self.copiedOutcome
                let existing = try head(txn, target).flatMap { try dataset(txn, id: $0.id, stream: target) }
                if let existing, !existing.deleted {
                    outcome = "not copied: the survivor already has a live dataset of that name"
                } else if !events.isEmpty {
                    do {
                        let change = try validateChange(events, for: target, describe: { "record \($0) of \(copy.sourceDataset)" })
                        _ = try txn.nested { inner in try appendUser(inner, to: target, origin: origin, change: change, admission: .merge) }
                    } catch let refused as LedgerError where [.invalidParameter, .limitExceeded].contains(refused.code) {
                        outcome = "not copied: \(refused.message)"
                    }
                }
                let note = Self.json(["source": "\(copy.sourceIdentity)/\(copy.sourceDataset)", "sourceSyncCount": "\(copy.sourceSyncCount)", "outcome": outcome])
                _ = try self.append(txn, to: marker, author: origin.author, events: [.put(key: Self.copiedPrefix + copy.child, value: note, deviceModified: nil)])
            }
            return true
        }
    }

    static let copiedOutcome = "copied"

    /// Whether the merge copy `child` of `identity` was recorded as not made (its name was taken,
    /// or the rules refused it): such a copy is not reported as merged.
    func mergeCopyRefused(_ txn: Transaction, pool: IdentityPoolID, identity: IdentityID, child: String) throws -> Bool {
        guard let note = try recordValue(txn, Self.mergesStream(pool, identity), key: Self.copiedPrefix + child) else { return false }
        let outcome = (try? Self.decode([String: String].self, note, stream: Self.mergesStream(pool, identity)))?["outcome"]
        return outcome != Self.copiedOutcome
    }

    /// On a cluster, lets this replica catch up with the shards of `identities` before a merge
    /// reads their datasets (it runs on the registry shard's owner, whose replica of the other
    /// shards trails their owners): what was acknowledged on them before is in the copies.
    /// - Throws: `.unavailable` when a shard did not catch up within `timeout` (nothing written).
    func catchUp(pool: IdentityPoolID, identities: [String], timeout: Duration) async throws {
        guard let map = cluster.current?.shards else { return }
        for shard in Set(identities.map { map.shard(pool: pool.rawValue, identity: $0) }).sorted() {
            guard try await catchUp(shard: shard, timeout: timeout) else {
                throw LedgerError(.unavailable, "this node's replica of shard \(shard) did not catch up with its log within \(timeout); nothing was merged, retry")
            }
        }
    }

    /// Waits, at most `timeout`, until this replica holds the copies `merge` left pending (the
    /// survivor's shard owner makes them); a merge that left none returns at once.
    /// - Returns: whether every copy is here.
    @discardableResult
    public func waitForMergeCopies(_ merge: MergeSummary?, pool: IdentityPoolID, timeout: Duration) async throws -> Bool {
        guard let merge, defersMergeCopies(pool: pool, destination: merge.survivor), !merge.datasets.isEmpty else { return true }
        let marker = Self.mergesStream(pool, try IdentityID(merge.survivor))
        return try await waitForCommits(timeout: timeout) {
            try read { txn in try merge.datasets.allSatisfy { try recordValue(txn, marker, key: Self.copiedPrefix + $0.child) != nil } }
        }
    }
}
