import Foundation
import LedgerStorage

/// What one read of a pool's datasets gives a running bulk publish.
public struct BulkPublishBatch: Sendable {
    /// One record per dataset: its current state (see ``StreamRecord/init(bulkState:)``).
    public var records: [StreamRecord]
    /// The last dataset read (published, or passed over as deleted or internal): the next
    /// batch starts after it. Nil when nothing was read.
    public var last: StreamName?
    /// Whether the pool has no dataset after `last`.
    public var finished: Bool
}

extension StreamRecord {
    /// A dataset's current state as one stream record, for a bulk publish: Cognito's stream JSON
    /// with `operation` `replace`, every live record (`op` `replace`, no removed ones) with the
    /// sync count, server time and device time of its last change, the dataset's `syncCount` and
    /// `lastModifiedDate`, and `"bulkPublish":true`. Its `sequence` is the feed position of the
    /// dataset's last entry — the state is as of it — so a consumer that keeps, per dataset, the
    /// highest sequence applied can drop a bulk record older than what it holds.
    init(bulkState stream: StreamName, sequence: UInt64, dataset: DatasetState, records: [(key: String, state: RecordState)],
         reference: StreamPayloadReference?) {
        self.init(stream: stream, sequence: sequence, operation: "replace", items: Self.items(records),
                  fields: ["lastModifiedDate": dataset.lastModified.milliseconds, "syncCount": dataset.syncCount], bulk: true, reference: reference)
    }

    /// The `kinesisSyncRecords` of a dataset's state: its live records, in the order given.
    static func items(_ records: [(key: String, state: RecordState)]) -> [[String: Any]] {
        records.compactMap { key, state in
            guard let value = state.value else { return nil }
            let time = state.lastModified.milliseconds
            return ["key": key, "value": value, "syncCount": state.syncCount, "lastModifiedDate": time,
                    "deviceLastModifiedDate": state.deviceModified?.milliseconds ?? time, "op": "replace"]
        }
    }
}

extension Ledger {
    /// The next datasets of `pool` for a bulk publish, in stream-name order after `after`
    /// (from the first when nil): one record per live dataset, at most `maxRecords` and at most
    /// `maxBytes` of JSON unless one record alone is larger. Deleted datasets, datasets with no
    /// entry and SyncLedger's internal streams are passed over.
    ///
    /// Each batch is read in one read transaction, so each record is a consistent state of its
    /// dataset; changes committed while a bulk publish runs reach the stream as ordinary syncs
    /// (a record may be both in the bulk and an update, as in Cognito). Memory follows the batch.
    ///
    /// - Parameter scanLimit: the most datasets looked at in one call (passed-over ones too),
    ///   so one call holds its read transaction briefly.
    public func bulkPublishBatch(pool: IdentityPoolID, after: StreamName?, maxRecords: Int = 500, maxBytes: Int = 1 << 20,
                                 scanLimit: Int = 10_000, reference: StreamPayloadReference? = nil) throws -> BulkPublishBatch {
        if let after, after.pool != pool {
            throw LedgerError(.invalidParameter, "a bulk publish of pool \(pool) cannot resume after a dataset of pool \(after.pool)", stream: after)
        }
        return try read { txn in
            var batch = BulkPublishBatch(records: [], last: after, finished: true)
            var bytes = 0
            var scanned = 0
            let prefix = StreamName.prefix(pool: pool)
            // The smallest key after `after`'s: its key followed by a NUL byte.
            try forEachStream(txn, prefix: prefix, from: after.map { $0.key + [0] }) { stream, head in
                if scanned == scanLimit {
                    batch.finished = false
                    return false
                }
                scanned += 1
                guard !stream.isInternal, head.offset > 0, let meta = try dataset(txn, id: head.id, stream: stream), !meta.deleted else {
                    batch.last = stream
                    return true
                }
                guard let sequence = try txn.get(schema.index, key: .bigEndian(head.id) + .bigEndian(head.offset)) else {
                    throw LedgerError(.corruptData, "the index lacks the stream's last entry", stream: stream, offset: head.offset)
                }
                let record = StreamRecord(bulkState: stream, sequence: sequence.bigEndianUInt64(), dataset: meta,
                                          records: try schema.storedRecords(txn, streamID: head.id, stream: stream), reference: reference)
                if !batch.records.isEmpty, batch.records.count >= maxRecords || bytes + record.json.count > maxBytes {
                    batch.finished = false
                    return false
                }
                batch.records.append(record)
                bytes += record.json.count
                batch.last = stream
                return true
            }
            return batch
        }
    }
}

extension Schema {
    /// Every record of a stream's view, tombstones too, with its state, in stored-key order.
    func storedRecords(_ txn: Transaction, streamID: UInt64, stream: StreamName) throws -> [(key: String, state: RecordState)] {
        let start = [UInt8].bigEndian(streamID)
        var result: [(key: String, state: RecordState)] = []
        try txn.withCursor(records) { cursor in
            var pair = try cursor.seek(atLeast: start)
            while let current = pair, current.key.starts(with: start) {
                guard let (key, state) = try? Schema.decodeRecord(key: current.key, value: current.value) else {
                    throw LedgerError(.corruptData, "a record does not decode", stream: stream)
                }
                result.append((key, state))
                pair = try cursor.next()
            }
        }
        return result
    }
}
