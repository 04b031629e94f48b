import LedgerStorage

/// What ``Ledger/mergeOffline(_:deviceID:caller:partial:)`` did with a device's offline changes.
public struct OfflineMergeReport: Sendable, Equatable {
    /// The records written (each carrying the dataset's sync count after the merge).
    public var applied: [Record] = []
    /// Keys the server changed after the device's base sync count (not written).
    public var conflicts: [LedgerError.Conflict] = []
    /// Whether the device's entries were appended one for one (the server had not moved on).
    public var fastForward = false
    /// The dataset's sync count afterwards.
    public var syncCount: UInt64 = 0
}

extension Event {
    /// The event with `time` as its device time when it carries none.
    func withDeviceTime(default time: Timestamp) -> Event {
        switch self {
        case .put(let key, let value, nil): .put(key: key, value: value, deviceModified: time)
        case .remove(let key, nil): .remove(key: key, deviceModified: time)
        default: self
        }
    }
}

extension Ledger {
    /// The most entries one offline merge may carry (each becomes a server entry on a
    /// fast-forward): what one request may make the server write stays bounded.
    public static let maxOfflineEntries = 1024

    /// Merges a device's offline changes: a stream segment of entries the device made on top of
    /// its last synced state (the base sync count is the segment's first offset − 1).
    ///
    /// Only the device's *changes* are taken from the segment: every entry written is the
    /// server's own, made through the same rules as UpdateRecords (``validateChange(_:for:describe:)``
    /// and the dataset limits), stamped with the server's time and the caller's origin. A
    /// device entry's time becomes the device time of its events that carry none.
    ///
    /// When the server's stream is still at the base and the segment chains to it, each device
    /// entry becomes one server entry (fast-forward). Otherwise the Cognito rule applies per
    /// record: a key the server changed after the base is a conflict. By default
    /// (all-or-nothing, like UpdateRecords) any conflict refuses the whole merge with a
    /// `.conflict` error naming each key and both sync counts; with `partial`, the other keys
    /// are written as one new entry and the conflicts are reported.
    ///
    /// A dataset deleted on the server after the device's base is a conflict too (the device's
    /// edits were made to records the delete removed), as it is for UpdateRecords.
    ///
    /// - Parameters:
    ///   - deviceID: the device the changes come from (1-256 bytes), recorded with the entries.
    ///   - caller: the authenticated caller, recorded as the author (defaults to the identity).
    ///   - sessionToken: a sync session token for this stream, as UpdateRecords needs.
    /// - Throws: ``LedgerError`` `.conflict`, `.limitExceeded`, `.invalidParameter`,
    ///   `.invalidSessionToken`; nothing is written then.
    public func mergeOffline(_ segment: Segment, deviceID: String? = nil, caller: String? = nil, sessionToken: String?, partial: Bool = false) async throws -> OfflineMergeReport {
        guard case .stream(let stream) = segment.scope, let first = segment.entries.first else {
            throw LedgerError(.invalidParameter, "offline changes come as a non-empty stream segment")
        }
        try Self.requireUserIdentity(stream.identity)
        try checkSessionToken(sessionToken, for: stream)
        guard segment.entries.count <= Self.maxOfflineEntries else {
            throw LedgerError(.limitExceeded, "offline changes come in at most \(Self.maxOfflineEntries) entries, not \(segment.entries.count)", stream: stream)
        }
        let origin = try ChangeOrigin(author: caller ?? stream.identity.rawValue, device: deviceID)
        let base = first.offset - 1
        // Every device entry, checked by the same rules as UpdateRecords.
        var changes: [UserChange] = []
        for (n, e) in segment.entries.enumerated() {
            let decoded = try e.entry
            let events = decoded.events.map { $0.withDeviceTime(default: decoded.time) }
            changes.append(try validateChange(events, for: stream, describe: { "entry \(n) (offset \(e.offset)), event \($0)" }))
        }
        // The device's last intent per key, in the order first touched.
        var order: [RecordKey] = []
        var final: [RecordKey: Event] = [:]
        var deletes = false
        for change in changes {
            for event in change.events {
                guard let key = event.key else { deletes = true; continue }
                let k = RecordKey(key)
                if final[k] == nil { order.append(k) }
                final[k] = event
            }
        }
        // The last intent per key, as one change (none when the device only deleted the dataset).
        let collapsed = order.isEmpty ? nil : try validateChange(order.map { final[$0]! }, for: stream)
        return try await write(on: stream) { [self, order, changes, deletes] txn in
            let head = try self.head(txn, stream)
            if (head?.offset ?? 0) == base, (head?.hash ?? LogEntry.genesisHash) == segment.previousHash {
                var report = OfflineMergeReport()
                report.fastForward = true
                for change in changes {
                    report.syncCount = try self.appendUser(txn, to: stream, origin: origin, change: change).entry.offset
                }
                let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: try self.head(txn, stream)!.id)
                report.applied = try order.compactMap { k in try view.storedRecord(k.string).map { Record(key: k.string, state: $0) } }
                return report
            }
            if deletes {
                throw LedgerError(.conflict, "the device deleted the dataset offline, but the server moved on from sync count \(base) to \(head?.offset ?? 0)", stream: stream)
            }
            if let id = head?.id, let deleted = try self.dataset(txn, id: id, stream: stream)?.lastDeleteSyncCount, deleted > base {
                throw LedgerError(.conflict, "the dataset was deleted on the server (sync count \(deleted)) after the device's base sync count \(base)", stream: stream)
            }
            guard let collapsed else {
                throw LedgerError(.conflict, "the server moved on from sync count \(base) to \(head?.offset ?? 0); the device's changes hold no record to merge", stream: stream)
            }
            var report = OfflineMergeReport()
            let written = try self.appendUser(txn, to: stream, origin: origin, change: collapsed, expecting: .unchangedSince(base: base, partial: partial))
            report.conflicts = written.skipped
            report.applied = written.events.compactMap { $0.key }.map { Record(key: $0, state: written.view.changed[RecordKey($0)]!) }
            report.syncCount = written.entry.offset
            return report
        }
    }
}
