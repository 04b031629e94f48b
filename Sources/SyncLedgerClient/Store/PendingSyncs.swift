public import Foundation
import LedgerStorage
import SyncLedgerWire

/// A sync waiting to run: kept in the store, so it survives restarts.
public struct PendingSync: Sendable, Hashable {
    /// The dataset.
    public var dataset: String
    /// Why it was asked for (the latest reason).
    public var reason: String
    /// When it was first asked for (requests coalesce into one).
    public var since: Date
    /// Bumped by every request, so a run that started before a request does not take it away.
    public var generation: UInt64
}

extension ClientStore {
    static func queueKey(_ identity: String, _ dataset: String) -> [UInt8] { datasetKey(identity, dataset) }

    /// Asks for a sync of the dataset; requests for one dataset coalesce into one entry.
    func enqueue(identity: String, dataset: String, reason: String, now: Date = Date()) throws {
        try write { txn in
            let key = Self.queueKey(identity, dataset)
            var entry = try txn.get(queue, key: key).map(Self.decodePending) ?? PendingSync(dataset: dataset, reason: reason, since: now, generation: 0)
            entry.reason = reason
            entry.generation &+= 1
            try txn.put(queue, key: key, value: Self.encodePending(entry))
        }
    }

    /// The syncs waiting for `identity`, oldest first.
    public func pendingSyncs(identity: String) throws -> [PendingSync] {
        try read { txn in
            let prefix = Array(identity.utf8) + [0]
            var found: [PendingSync] = []
            try txn.withCursor(queue) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    found.append(try Self.decodePending(current.value))
                    pair = try cursor.next()
                }
            }
            return found.sorted { $0.since < $1.since }
        }
    }

    /// Takes a sync off the queue, unless it was asked for again after `generation` (then it
    /// stays, to run once more).
    func dequeue(identity: String, dataset: String, generation: UInt64) throws {
        try write { txn in
            let key = Self.queueKey(identity, dataset)
            guard let bytes = try txn.get(queue, key: key), try Self.decodePending(bytes).generation == generation else { return }
            _ = try txn.delete(queue, key: key)
        }
    }

    static func encodePending(_ p: PendingSync) -> [UInt8] {
        var w = ByteWriter(capacity: 32 + p.dataset.utf8.count + p.reason.utf8.count)
        w.string(p.dataset)
        w.string(p.reason)
        w.signed(Timestamp(p.since).milliseconds)
        w.varint(p.generation)
        return w.bytes
    }

    static func decodePending(_ bytes: [UInt8]) throws -> PendingSync {
        do {
            var r = ByteReader(bytes)
            return PendingSync(dataset: try r.string(), reason: try r.string(), since: Date(timeIntervalSince1970: Double(try r.signed()) / 1000),
                               generation: try r.varint())
        } catch {
            throw SyncClientError.store("a queued sync does not decode: \(error)")
        }
    }
}
