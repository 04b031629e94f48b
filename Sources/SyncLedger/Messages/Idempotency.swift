import Foundation
import Crypto
import LedgerStorage

/// An UpdateRecords call's `Idempotency-Key`, checked: its storage key and the hash of the
/// request it stands for.
struct IdempotencyRequest: Sendable {
    let key: [UInt8]
    let name: String
    let hash: [UInt8]

    /// Checks the key (1-256 bytes of printable ASCII) and hashes the request: the stream, the
    /// device and every patch, in order.
    init(_ name: String, stream: StreamName, deviceID: String?, patches: [RecordPatch]) throws(LedgerError) {
        guard (1...256).contains(name.utf8.count), name.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7f }) else {
            throw LedgerError(.invalidParameter, "Idempotency-Key must be 1-256 bytes of printable ASCII, not \(quoted(name))", stream: stream)
        }
        self.name = name
        key = stream.key + [0] + Array(name.utf8)
        var w = ByteWriter(capacity: 64 + patches.count * 32)
        w.string(deviceID ?? "")
        w.varint(UInt64(patches.count))
        for patch in patches {
            w.byte(patch.op == .replace ? 1 : 2)
            w.string(patch.key)
            if let value = patch.value { w.byte(1); w.string(value) } else { w.byte(0) }
            w.varint(patch.syncCount)
            if let device = patch.deviceModified { w.byte(1); w.signed(device.milliseconds) } else { w.byte(0) }
        }
        hash = Array(SHA256.hash(data: w.bytes))
    }
}

/// What an UpdateRecords call with an idempotency key returned, kept to answer its retries.
private struct StoredUpdate: Codable {
    struct StoredRecord: Codable {
        var key: String
        var value: String?
        var syncCount: UInt64
        var lastModified: Timestamp
        var lastModifiedBy: String
        var deviceModified: Timestamp?
    }
    var syncCount: UInt64
    var records: [StoredRecord]
}

/// How many idempotency keys a purge removed.
public struct IdempotencyPurge: Sendable, Hashable {
    /// Keys of device messages.
    public var messageKeys = 0
    /// Keys of device messages sent without `SentAt`, whose places for consumers went but whose
    /// keys stay: only the key tells a resend of such a message from a new one.
    public var messageKeysKept = 0
    /// Message entries whose log entry could not be read or decoded when the purge asked
    /// whether they had `SentAt`: their keys went like any other (one bad entry does not stop
    /// the purge); the server logs their count as a warning.
    public var undecodableEntries = 0
    /// Keys of UpdateRecords calls.
    public var updateKeys = 0
}

extension Ledger {
    /// The shortest time idempotency keys are kept: four weeks, the longest time to live of a
    /// message, so that a resend within its time to live always finds its key.
    public static let minimumIdempotencyRetention: Duration = .seconds(28 * 86_400)

    /// The stored answer to a call with this key, nil when there is none.
    /// - Throws: `.idempotencyConflict` when the key was used for another request.
    func storedUpdate(_ txn: Transaction, _ request: IdempotencyRequest) throws -> UpdateResult? {
        guard let bytes = try txn.get(schema.idempotency, key: request.key) else { return nil }
        guard bytes.count >= 40 else { throw LedgerError(.corruptData, "a stored idempotency key has \(bytes.count) bytes") }
        guard bytes[8..<40].elementsEqual(request.hash) else {
            throw LedgerError(.idempotencyConflict, "Idempotency-Key \(quoted(request.name)) was used for another request to this dataset; a retry must send the same records")
        }
        let stored: StoredUpdate
        do { stored = try JSONDecoder().decode(StoredUpdate.self, from: Data(bytes[40...])) } catch {
            throw LedgerError(.corruptData, "a stored UpdateRecords answer does not decode: \(error)")
        }
        let records = stored.records.map {
            Record(key: $0.key, state: RecordState(value: $0.value, syncCount: $0.syncCount, lastModified: $0.lastModified, lastModifiedBy: $0.lastModifiedBy, deviceModified: $0.deviceModified))
        }
        return UpdateResult(records: records, syncCount: stored.syncCount, replayed: true)
    }

    /// Keeps `result` as the answer to the call with this key, on this node (in cluster mode the
    /// key travels with no entry: it is kept by the node that answered).
    func storeUpdate(_ scope: WriteScope, _ request: IdempotencyRequest, _ result: UpdateResult, at time: Timestamp) throws {
        let stored = StoredUpdate(syncCount: result.syncCount, records: result.records.map {
            .init(key: $0.key, value: $0.state.value, syncCount: $0.state.syncCount, lastModified: $0.state.lastModified,
                  lastModifiedBy: $0.state.lastModifiedBy, deviceModified: $0.state.deviceModified)
        })
        let timeKey = [UInt8].bigEndian(UInt64(bitPattern: max(time.milliseconds, 0)))
        let value = timeKey + request.hash + Array(Self.json(stored).utf8)
        try scope.keepOnThisNode(schema.idempotency, key: request.key, value: value)
        try scope.keepOnThisNode(schema.idempotencyByTime, key: timeKey + request.key, value: [])
    }

    /// Removes the idempotency keys of messages and UpdateRecords calls older than
    /// `retention` (at least ``minimumIdempotencyRetention``), a batch per transaction (1,000:
    /// a purge never holds the writer long, and frees pages a few at a time for reuse). A
    /// message's entry stays in the log; only its key and its place for consumers go (it has
    /// expired by then). The key of a message sent without `SentAt` stays (counted in
    /// ``IdempotencyPurge/messageKeysKept``): its time to live counts from its arrival, so
    /// without the key a late resend would be taken as a new message.
    /// - Throws: `.invalidParameter` for a retention under four weeks.
    @discardableResult
    public func purgeIdempotencyKeys(retention: Duration = Ledger.minimumIdempotencyRetention, batch: Int = 1000) async throws -> IdempotencyPurge {
        guard retention >= Self.minimumIdempotencyRetention else {
            throw LedgerError(.invalidParameter, "idempotency keys are kept at least 28 days, not \(retention)")
        }
        let cutoff = Timestamp(milliseconds: options.clock().milliseconds - retention.components.seconds * 1000)
        var total = IdempotencyPurge()
        while true {
            let round = try await write { [self] txn in
                var purge = IdempotencyPurge()
                var purged = 0  // rows of the consumer index
                try txn.withCursor(self.schema.messageIndex) { c in
                    var pair = try c.first()
                    while let current = pair, purged < batch {
                        let row = try MessageIndexRow(decoding: current.value)
                        guard row.received < cutoff else { break }
                        // The key goes with the row of the entry it names (a message taken again
                        // after an earlier purge moved it to the newer entry) — unless the message
                        // had no SentAt: its time to live counts from its arrival, so a resend
                        // without its key would be taken as a new message, however late.
                        let hadNoSentAt: Bool
                        do {
                            hadNoSentAt = try self.messageHadNoSentAt(txn, sequence: Array(current.key))
                        } catch {
                            // One unreadable entry must not stop the hourly purge: its key may go.
                            hadNoSentAt = false
                            purge.undecodableEntries += 1
                        }
                        if hadNoSentAt {
                            purge.messageKeysKept += 1
                        } else if let ack = try txn.get(self.schema.messageIDs, key: row.key), ack.count >= 8,
                                  Array(ack.prefix(8)).bigEndianUInt64() == current.key.bigEndianUInt64() {
                            _ = try txn.delete(self.schema.messageIDs, key: row.key)
                            purge.messageKeys += 1
                        }
                        try c.deleteCurrent()
                        purged += 1
                        pair = try c.seek(atLeast: current.key)
                    }
                }
                try txn.withCursor(self.schema.idempotencyByTime) { c in
                    var pair = try c.first()
                    while let current = pair, purge.updateKeys < batch {
                        guard current.key.count > 8, Int64(bitPattern: Array(current.key[0..<8]).bigEndianUInt64()) < cutoff.milliseconds else { break }
                        _ = try txn.delete(self.schema.idempotency, key: Array(current.key[8...]))
                        try c.deleteCurrent()
                        purge.updateKeys += 1
                        pair = try c.seek(atLeast: current.key)
                    }
                }
                return (purge, purged)
            }
            total.messageKeys += round.0.messageKeys
            total.messageKeysKept += round.0.messageKeysKept
            total.undecodableEntries += round.0.undecodableEntries
            total.updateKeys += round.0.updateKeys
            if round.1 < batch && round.0.updateKeys < batch { return total }
        }
    }

    /// Whether the message entry at `sequence` carries a message without `SentAt` (false for
    /// anything else: such a key may go).
    func messageHadNoSentAt(_ txn: Transaction, sequence: [UInt8]) throws -> Bool {
        guard let bytes = try txn.get(schema.log, key: sequence) else { return false }
        let (entry, _) = try decodeEntry(Array(bytes), sequence: sequence.bigEndianUInt64(), stream: nil, txn: txn)
        guard entry.events.count == 1, case .put("message", let value, _) = entry.events[0],
              let message = try? JSONDecoder().decode(DeviceMessage.self, from: Data(value.utf8)) else { return false }
        return message.sentAt == nil
    }

    /// Entries, pages and bytes of the idempotency databases (for `syncledger messages stats`
    /// and the benchmark).
    public func idempotencyFootprint() throws -> [(name: String, entries: Int, pages: Int)] {
        try read { txn in
            try [("message-ids", schema.messageIDs), ("messages", schema.messageIndex), ("idempotency", schema.idempotency), ("idempotency-by-time", schema.idempotencyByTime)].map { name, db in
                let stat = try txn.statistics(db)
                return (name, stat.entries, stat.pages)
            }
        }
    }
}
