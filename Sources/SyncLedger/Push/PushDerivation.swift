import Foundation

extension Ledger {
    /// The notifications that the commits after change-feed position `cursor` call for: for
    /// every entry of a user's dataset, one per device of that identity subscribed to the
    /// dataset — except the device that made the change (the entry's `DeviceId`), devices
    /// whose token a push service reported dead, and pools with no push sync configured.
    ///
    /// This is the one place notifications come from, so every path into a dataset
    /// (UpdateRecords, DeleteDataset, an offline merge, a later sync hook) is covered by
    /// construction: it reads the log, not the requests.
    ///
    /// - Parameters:
    ///   - cursor: the last position already derived.
    ///   - limit: the most commits to read.
    /// - Returns: the notifications; the skipped ones per transport (disabled tokens); and
    ///   the position of the last commit read (`cursor` when there was none).
    public func pushNotifications(after cursor: UInt64, limit: Int) throws -> (notifications: [PushNotification], skipped: [PushTransportKind: Int64], last: UInt64) {
        var notifications: [PushNotification] = []
        var skipped: [PushTransportKind: Int64] = [:]
        var last = cursor
        var read = 0
        var pushPools: [IdentityPoolID: Bool] = [:]
        var subscribersOf: [StreamName: [Device]] = [:]
        try forEachCommit(after: cursor) { entry in
            read += 1
            last = entry.sequence
            let stream = entry.stream
            guard stream.identity != Self.systemIdentity else { return read < limit }
            let pushOn = try pushPools[stream.pool] ?? {
                let arns = try poolConfiguration(stream.pool).pushSync?.applicationArns ?? []
                pushPools[stream.pool] = !arns.isEmpty
                return !arns.isEmpty
            }()
            guard pushOn else { return read < limit }
            let devices = try subscribersOf[stream] ?? {
                let found = try subscribers(of: stream)
                subscribersOf[stream] = found
                return found
            }()
            for device in devices where device.id != entry.device {
                guard device.isEnabled else {
                    skipped[PushTransportKind(platform: device.platform), default: 0] += 1
                    continue
                }
                notifications.append(PushNotification(
                    pool: stream.pool.rawValue, identity: stream.identity.rawValue, dataset: stream.dataset.rawValue,
                    deviceID: device.id, platform: device.platform, token: device.token,
                    syncCount: entry.offset, sequence: entry.sequence, committed: entry.time))
            }
            return read < limit
        }
        return (notifications, skipped, last)
    }
}
