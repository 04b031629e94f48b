import Foundation
import LedgerStorage
import Synchronization

/// What the dispatcher remembers between passes: the subscribers of each dataset and which
/// pools have push sync configured. Both live in system streams, so an entry of a pool's
/// `devices`, `subscriptions` or `configuration` stream in the feed forgets that pool's part.
public final class PushDerivationCache: Sendable {
    struct State {
        var pushPools: [IdentityPoolID: Bool] = [:]
        var subscribers: [StreamName: [Device]] = [:]
    }

    let state = Mutex(State())

    /// An empty cache.
    public init() {}

    func forget(pool: IdentityPoolID) {
        state.withLock { s in
            s.pushPools[pool] = nil
            s.subscribers = s.subscribers.filter { $0.key.pool != pool }
        }
    }
}

/// What one pass over the change feed calls for.
public struct PushDerivation: Sendable {
    /// One per device and dataset, with the newest sync count of the stretch read.
    public var notifications: [PushNotification]
    /// Changes not notified to a device whose token was reported dead, per transport.
    public var skipped: [PushTransportKind: Int64]
    /// Notifications replaced by a newer one of the same stretch, per transport.
    public var collapsed: [PushTransportKind: Int64]
    /// The position of the last commit read (the cursor given when there was none).
    public var last: UInt64
}

extension Ledger {
    /// The dataset's sync count now (the offset of its last entry; 0 for a stream that does
    /// not exist): what a notification sent now announces, however many changes it stands for.
    public func currentSyncCount(_ stream: StreamName) throws -> UInt64 {
        try read { txn in try head(txn, stream)?.offset ?? 0 }
    }

    /// The notifications that the commits after change-feed position `cursor` call for: for
    /// every entry of a user's dataset, one per device of that identity subscribed to the
    /// dataset — except the device that made the change (the entry's `DeviceId`), devices
    /// whose token a push service reported dead, and pools with no push sync configured.
    /// Several changes of one dataset in the stretch read give one notification per device,
    /// with the newest sync count (collapse starts here).
    ///
    /// This is the one place notifications come from, so every path into a dataset
    /// (UpdateRecords, DeleteDataset, an offline merge, a later sync hook) is covered by
    /// construction: it reads the log, not the requests.
    ///
    /// - Parameters:
    ///   - cursor: the last position already derived.
    ///   - limit: the most commits to read.
    ///   - cache: subscribers and pool settings kept from earlier passes (by default a fresh one).
    /// - Returns: the notifications, what was skipped and collapsed, and the position of the
    ///   last commit read.
    ///   - include: in cluster mode, the entries this node derives: those of the shards it owns,
    ///     written since a given time (nil: every entry).
    public func pushNotifications(after cursor: UInt64, limit: Int, cache: PushDerivationCache = PushDerivationCache(),
                                  include: (@Sendable (StreamName, Timestamp) -> Bool)? = nil) throws -> PushDerivation {
        var newest: [[UInt8]: PushNotification] = [:]
        var order: [[UInt8]] = []
        var skipped: [PushTransportKind: Int64] = [:]
        var collapsed: [PushTransportKind: Int64] = [:]
        var last = cursor
        for entry in try commitSummaries(after: cursor, limit: limit) {
            last = entry.sequence
            let stream = entry.stream
            guard !entry.stream.isInternal else {
                if ["devices", "subscriptions", "configuration"].contains(stream.dataset.rawValue) { cache.forget(pool: stream.pool) }
                continue
            }
            let pushOn = try cache.state.withLock({ $0.pushPools[stream.pool] }) ?? {
                let on = !(try poolConfiguration(stream.pool).pushSync?.applicationArns ?? []).isEmpty
                cache.state.withLock { $0.pushPools[stream.pool] = on }
                return on
            }()
            guard pushOn else { continue }
            if let include, !include(stream, entry.time) { continue }
            let devices = try cache.state.withLock({ $0.subscribers[stream] }) ?? {
                let found = try subscribers(of: stream)
                cache.state.withLock { s in
                    if s.subscribers.count > 100_000 { s.subscribers.removeAll() }
                    s.subscribers[stream] = found
                }
                return found
            }()
            for device in devices where device.id != entry.device {
                guard let platform = device.platform, let token = device.token else { continue }  // no push token (yet)
                guard device.isEnabled else {
                    skipped[PushTransportKind(platform: platform), default: 0] += 1
                    continue
                }
                let n = PushNotification(
                    pool: stream.pool.rawValue, identity: stream.identity.rawValue, dataset: stream.dataset.rawValue,
                    deviceID: device.id, platform: platform, token: token,
                    syncCount: entry.offset, sequence: entry.sequence, committed: entry.time)
                let key = n.key
                if newest.updateValue(n, forKey: key) == nil { order.append(key) } else { collapsed[n.transport, default: 0] += 1 }
            }
        }
        return PushDerivation(notifications: order.compactMap { newest[$0] }, skipped: skipped, collapsed: collapsed, last: last)
    }
}

extension Ledger {
    /// The first commit sequence whose entry was written at `time` or later, by a binary search
    /// over the log (commit order follows the server's clock but for clock steps, so this may be
    /// off by a few entries around such a step): where to re-derive a time window from.
    public func firstSequence(notBefore time: Timestamp) throws -> UInt64 {
        try read { txn in
            var low: UInt64 = 1
            var high = try nextSequence(txn)  // one past the last
            while low < high {
                let mid = low + (high - low) / 2
                guard let stored = try txn.get(schema.log, key: .bigEndian(mid)), stored.count > 40,
                      let entryTime = try? LogEntry.peekOffsetAndTime(stored[40...]).time else { return low }
                if entryTime < time { low = mid + 1 } else { high = mid }
            }
            return low
        }
    }
}

extension Ledger {
    /// Custom data notifications for every device logged in as `identity` that has a live
    /// token (`POST /devices/notify`): one per device, named `notify/<id>` in the outbox.
    /// - Throws: `.invalidParameter` when the data is empty or the pool has no push sync;
    ///   `.limitExceeded` when the APNs payload it makes (`{"aps":{"content-available":1},
    ///   "data":…}`, the largest wrapping of the three transports) would pass APNs' 4,096 bytes.
    public func customNotifications(pool: IdentityPoolID, identity: IdentityID, data: [String: String]) throws -> (id: String, notifications: [PushNotification]) {
        try Self.requireUserIdentity(identity)
        guard !data.isEmpty else { throw LedgerError(.invalidParameter, "Data must hold at least one entry") }
        let payload: [String: Any] = ["aps": ["content-available": 1], "data": data]
        let size = (try? JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys, .withoutEscapingSlashes]).count) ?? Int.max
        guard size <= 4096 else {
            throw LedgerError(.limitExceeded, "Data makes a push payload of \(size) bytes as JSON; APNs carries at most 4096 (keep Data under about 4,000 bytes)")
        }
        guard !(try poolConfiguration(pool).pushSync?.applicationArns ?? []).isEmpty else {
            throw LedgerError(.invalidParameter, "identity pool \(pool) has no PushSync.ApplicationArns configured, so no notification can be sent (SetIdentityPoolConfiguration)")
        }
        let id = UUID().uuidString.lowercased()
        let now = options.clock()
        let sequence = try read { txn in try nextSequence(txn) } - 1
        let notifications = try devices(pool: pool, identity: identity).compactMap { device -> PushNotification? in
            guard device.isEnabled, let platform = device.platform, let token = device.token else { return nil }
            var n = PushNotification(pool: pool.rawValue, identity: identity.rawValue, dataset: "notify/\(id)", deviceID: device.id,
                                     platform: platform, token: token, syncCount: 0, sequence: sequence, committed: now)
            n.custom = data
            return n
        }
        return (id, notifications)
    }
}
