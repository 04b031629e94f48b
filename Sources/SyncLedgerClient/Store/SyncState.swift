import Foundation
import LedgerStorage
import SyncLedgerWire

/// How a conflict was resolved (see ``SyncHandler/resolve(conflicts:dataset:)``).
public enum Resolution: Sendable, Hashable {
    /// Take the server's record; the local change is dropped.
    case remote
    /// Keep the local value; it is pushed over the server's (with the server's sync count).
    case local
    /// Store and push this value (nil removes the record).
    case value(String?)
}

/// A local change that meets a newer change of the same record on the server.
public struct Conflict: Sendable, Hashable {
    /// The key.
    public var key: String
    /// The local record (dirty).
    public var local: LocalRecord
    /// The server's record.
    public var remote: RemoteRecord
}

/// The store's side of ``SyncClient/synchronize(_:)``: each step one transaction, and each
/// write of a step checks that the records it replaces are the ones the sync read (their
/// ``LocalRecord/version``), so a local change made while a sync runs is never overwritten.
extension ClientStore {
    /// The local records of `keys` (those a pull brought), as a sync reads them before the pull
    /// is applied: the cost follows the pull, not the dataset.
    func snapshot(identity: String, dataset name: String, keys: [String]) throws -> [String: LocalRecord] {
        try read { txn in
            guard let d = try dataset(txn, identity, name) else { return [:] }
            var found: [String: LocalRecord] = [:]
            for key in keys { if let r = try record(txn, d.id, key) { found[key] = r } }
            return found
        }
    }

    /// Writes a pull: the server's records that met no local change (clean), and the
    /// resolutions of conflicts. A record changed locally since `snapshot` is skipped. The
    /// cursor moves to `cursor` only when nothing was skipped.
    /// - Returns: the keys skipped.
    func applyPull(identity: String, dataset name: String, remote: [RemoteRecord], resolutions: [String: (Resolution, RemoteRecord)],
                   snapshot: [String: LocalRecord], cursor: UInt64?, now: Date) throws -> [String] {
        try write { txn in
            var d = try ensureDataset(txn, identity, name, now: now)
            var skipped: [String] = []
            func unchanged(_ key: String, _ current: LocalRecord?) -> Bool { current?.version == snapshot[key]?.version }
            for r in remote {
                let current = try record(txn, d.id, r.key)
                guard unchanged(r.key, current) else { skipped.append(r.key); continue }
                var next = LocalRecord(value: r.value, syncCount: r.syncCount, lastModified: r.lastModified, lastModifiedBy: r.lastModifiedBy,
                                       deviceLastModified: r.deviceLastModified, isDirty: false, version: (current?.version ?? 0) &+ 1)
                if let (resolution, _) = resolutions[r.key], let current {
                    switch resolution {
                    case .remote: break
                    case .local:
                        next.value = current.value
                        next.isDirty = true
                        next.deviceLastModified = current.deviceLastModified
                    case .value(let v):
                        next.value = v
                        next.isDirty = true
                        next.deviceLastModified = now
                    }
                }
                adjust(&d, removing: current.map { (r.key, $0.value) }, adding: (r.key, next.value))
                try putRecord(txn, d.id, r.key, next)
            }
            if skipped.isEmpty, let cursor, Int64(cursor) > d.lastSyncCount { d.lastSyncCount = Int64(cursor) }
            if !remote.isEmpty { d.lastModified = now }
            try putDataset(txn, identity, name, d)
            return skipped
        }
    }

    /// The records a push sends: the dirty ones (from the dirty index).
    public func dirtyRecords(identity: String, dataset name: String) throws -> [(key: String, record: LocalRecord)] {
        try read { txn in
            guard let d = try dataset(txn, identity, name) else { return [] }
            return try dirtyRecords(txn, d.id)
        }
    }

    /// Writes a push's answer: each record the server accepted is clean with the server's sync
    /// count — unless it changed locally during the push: then it stays dirty with its new
    /// value, based on the sync count just accepted (so the next push passes). The cursor moves
    /// to the new sync count only when it follows the old one directly (no other device wrote
    /// in between, whose changes the next pull must bring).
    func applyPush(identity: String, dataset name: String, accepted: [RemoteRecord], snapshot: [String: LocalRecord], now: Date) throws {
        try write { txn in
            var d = try ensureDataset(txn, identity, name, now: now)
            for r in accepted {
                let current = try record(txn, d.id, r.key)
                var next: LocalRecord
                if let current, current.version != snapshot[r.key]?.version {
                    next = current
                    next.syncCount = r.syncCount
                } else {
                    next = LocalRecord(value: r.value, syncCount: r.syncCount, lastModified: r.lastModified, lastModifiedBy: r.lastModifiedBy,
                                       deviceLastModified: r.deviceLastModified ?? current?.deviceLastModified, isDirty: false,
                                       version: (current?.version ?? 0) &+ 1)
                    adjust(&d, removing: current.map { (r.key, $0.value) }, adding: (r.key, next.value))
                }
                try putRecord(txn, d.id, r.key, next)
            }
            if let newest = accepted.map(\.syncCount).max(), Int64(newest) == d.lastSyncCount + 1 { d.lastSyncCount = Int64(newest) }
            d.lastModified = now
            try putDataset(txn, identity, name, d)
        }
    }

    /// Sets the cursor back (a push met a conflict: the next pull must fetch from there).
    func rewind(identity: String, dataset name: String, to cursor: UInt64) throws {
        try write { txn in
            guard var d = try dataset(txn, identity, name), d.lastSyncCount > Int64(cursor) else { return }
            d.lastSyncCount = Int64(cursor)
            try putDataset(txn, identity, name, d)
        }
    }

    /// Remembers how a sync ended.
    func recordSync(identity: String, dataset name: String, outcome: SyncOutcome, error: String?, now: Date) throws {
        try write { txn in
            guard var d = try dataset(txn, identity, name) else { return }
            d.lastSyncTime = now
            d.lastSyncOutcome = outcome
            d.lastSyncError = error
            try putDataset(txn, identity, name, d)
        }
    }

    /// The identity the store's datasets belong to.
    func currentIdentity(pool: String) throws -> String? { try metaValue("identity/\(pool)") }

    /// Moves to identity `new`: each dataset `D` of `old` becomes `D.<old>` of `new` — the name
    /// the server gives the copies when it merges `old` into `new` — with its cursor at 0, so the
    /// next sync of it reads the server's copy and pushes any change not synced yet. A dataset
    /// deleted locally and not synced is dropped with the old identity. One transaction.
    func changeIdentity(pool: String, from old: String?, to new: String) throws {
        try write { txn in
            if let old, old != new {
                let prefix = Array(old.utf8) + [0]
                var moving: [(String, LocalDataset)] = []
                try txn.withCursor(datasets) { cursor in
                    var pair = try cursor.seek(atLeast: prefix)
                    while let current = pair, current.key.starts(with: prefix) {
                        guard let name = String(validating: current.key.dropFirst(prefix.count), as: UTF8.self) else { throw SyncClientError.store("a dataset name is not UTF-8") }
                        moving.append((name, try LocalDataset.decode(current.value)))
                        pair = try cursor.next()
                    }
                }
                for (name, var d) in moving {
                    _ = try txn.delete(datasets, key: Self.datasetKey(old, name))
                    if d.isDeletedLocally {
                        try removeAllRecords(txn, d.id)
                        continue
                    }
                    var target = DatasetName.mergedCopyName(name, source: old)
                    if try dataset(txn, new, target) != nil { target = DatasetName.mergedCopyName(target, source: UUID().uuidString.lowercased()) }
                    d.lastSyncCount = 0
                    try putDataset(txn, new, target, d)
                }
            }
            try txn.put(meta, key: Array("identity/\(pool)".utf8), value: Array(new.utf8))
        }
    }
}
