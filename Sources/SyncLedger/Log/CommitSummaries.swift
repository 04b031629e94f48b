import LedgerStorage

/// One entry of the change feed as a live event stream and the push dispatcher need it: where
/// it is (its commit sequence, stream and offset), when it was committed, the device it names and
/// whether it deleted the dataset — read without making its records' keys and values.
public struct CommitSummary: Hashable, Sendable {
    /// Its position in the change feed.
    public let sequence: UInt64
    /// The stream it belongs to.
    public let stream: StreamName
    /// Its offset in the stream: the dataset's sync count after it.
    public let offset: UInt64
    /// When it was committed.
    public let time: Timestamp
    /// The device the caller wrote from, when the entry names one.
    public let device: String?
    /// Whether the entry deleted the dataset.
    public let deletesDataset: Bool

    /// A summary (for tests and callers that build their own).
    public init(sequence: UInt64, stream: StreamName, offset: UInt64, time: Timestamp, device: String?, deletesDataset: Bool) {
        self.sequence = sequence
        self.stream = stream
        self.offset = offset
        self.time = time
        self.device = device
        self.deletesDataset = deletesDataset
    }

    /// Whether it belongs to SyncLedger's own streams (identity ``Ledger/systemIdentity``:
    /// devices, push tokens, pool configuration) rather than a user's dataset.
    public var isSystem: Bool { stream.identity == Ledger.systemIdentity }
}

extension Ledger {
    /// Up to `limit` entries of the change feed after `sequence`, summarized, in commit order,
    /// from one short read transaction. It holds the summaries and one stored entry at a time,
    /// never a batch of decoded records, whatever the entries carry.
    ///
    /// - Returns: the summaries; fewer than `limit` means the feed ended.
    public func commitSummaries(after sequence: UInt64, limit: Int) throws -> [CommitSummary] {
        guard sequence < UInt64.max, limit > 0 else { return [] }
        return try read { txn in
            var result: [CommitSummary] = []
            var names: [UInt64: StreamName] = [:]
            try txn.withCursor(schema.log) { cursor in
                var pair = try cursor.seek(atLeast: .bigEndian(sequence + 1))
                while let current = pair, result.count < limit {
                    let seq = current.key.bigEndianUInt64()
                    var reader = ByteReader(current.value)
                    do {
                        let id = try reader.fixed64()
                        _ = try reader.raw(32)  // the hash
                        if names[id] == nil { names[id] = try streamName(txn, id: id) }
                        let body = try LogEntry.summarizeBody(&reader)
                        result.append(CommitSummary(sequence: seq, stream: names[id]!, offset: body.offset, time: body.time, device: body.device, deletesDataset: body.deletesDataset))
                    } catch let failure as DecodeFailure {
                        throw LedgerError(.corruptData, "log entry at sequence \(seq) does not decode: \(failure)")
                    }
                    pair = try cursor.next()
                }
            }
            return result
        }
    }
}
