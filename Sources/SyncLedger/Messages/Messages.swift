import Foundation
import Crypto
import LedgerStorage
import Synchronization

/// A device-to-server message as it is stored: the value of the one record (`message`) of an
/// entry in the sender identity's `_syncledger.messages` stream. The entry's device is the
/// sending device's code, its author the identity, its time when the server took it.
public struct DeviceMessage: Sendable, Hashable, Codable {
    /// Unique per device: the idempotency key (with pool, identity and device).
    public var messageId: String
    /// Seconds the message is worth consuming after it was sent (0 to 2,419,200: four weeks).
    public var timeToLive: Int64
    /// When the device says it sent it (its first attempt), if it said.
    public var sentAt: Timestamp?
    /// The payload.
    public var data: [String: String]

    enum CodingKeys: String, CodingKey {
        case messageId = "MessageId", timeToLive = "TimeToLive", sentAt = "SentAt", data = "Data"
    }

    /// A message.
    public init(messageId: String, timeToLive: Int64, sentAt: Timestamp? = nil, data: [String: String]) {
        self.messageId = messageId
        self.timeToLive = timeToLive
        self.sentAt = sentAt
        self.data = data
    }

    /// The longest time to live: four weeks, as FCM's.
    public static let maxTimeToLive: Int64 = 2_419_200

    /// When it expires, for a message the server took at `received`: its time to live counts
    /// from when it was sent, but never from later than it arrived (a device clock ahead of
    /// the server's gains nothing).
    public func expires(received: Timestamp) -> Timestamp {
        let sent = min(sentAt ?? received, received)
        return Timestamp(milliseconds: sent.milliseconds &+ timeToLive * 1000)
    }

    /// The stored form: JSON with sorted keys, the same bytes for the same message.
    var canonical: String { Ledger.json(self) }
}

/// What `POST /messages` answers: the message id and the commit sequence of its entry.
public struct MessageAck: Sendable, Hashable {
    /// The message id.
    public let messageId: String
    /// The position of its entry in the change feed (what consumers acknowledge).
    public let sequence: UInt64
    /// Whether this answer repeats the first one (a resend: nothing was appended).
    public let replayed: Bool
}

/// One row of the message index (`messages`): when the message arrived and expires, its
/// stream, and its idempotency key.
struct MessageIndexRow {
    var received: Timestamp
    var expires: Timestamp
    var streamID: UInt64
    var key: [UInt8]

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 32 + key.count)
        w.fixed64(UInt64(bitPattern: received.milliseconds))
        w.fixed64(UInt64(bitPattern: expires.milliseconds))
        w.fixed64(streamID)
        w.raw(key)
        return w.bytes
    }

    init(received: Timestamp, expires: Timestamp, streamID: UInt64, key: [UInt8]) {
        self.received = received
        self.expires = expires
        self.streamID = streamID
        self.key = key
    }

    init(decoding bytes: [UInt8]) throws {
        guard bytes.count >= 24 else { throw LedgerError(.corruptData, "a message index row has \(bytes.count) bytes, fewer than 24") }
        received = Timestamp(milliseconds: Int64(bitPattern: Array(bytes[0..<8]).bigEndianUInt64()))
        expires = Timestamp(milliseconds: Int64(bitPattern: Array(bytes[8..<16]).bigEndianUInt64()))
        streamID = Array(bytes[16..<24]).bigEndianUInt64()
        key = Array(bytes[24...])
    }
}

extension Ledger {
    /// The stream of `identity`'s device messages.
    public static func messageStream(pool: IdentityPoolID, identity: IdentityID) -> StreamName {
        StreamName(pool: pool, identity: identity, dataset: .messages)
    }

    /// The idempotency key of a message: pool␀identity␀device␀message id.
    static func messageKey(pool: IdentityPoolID, identity: IdentityID, device: String, messageId: String) -> [UInt8] {
        var key = StreamName.prefix(pool: pool, identity: identity)
        key.append(contentsOf: device.utf8)
        key.append(0)
        key.append(contentsOf: messageId.utf8)
        return key
    }

    /// Checks a message: the id is 1-256 bytes without control characters, the time to live
    /// 0-2,419,200 seconds, the data at most ``Limits/maxMessageBytes`` bytes of keys and
    /// values with keys of 1-256 bytes.
    /// - Throws: `.invalidParameter` or `.limitExceeded` naming the field.
    public func validateMessage(_ message: DeviceMessage) throws(LedgerError) {
        let id = message.messageId
        guard (1...256).contains(id.utf8.count), !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw LedgerError(.invalidParameter, "MessageId must be 1-256 bytes without control characters, not \(quoted(id))")
        }
        guard (0...DeviceMessage.maxTimeToLive).contains(message.timeToLive) else {
            throw LedgerError(.invalidParameter, "TimeToLive must be 0-\(DeviceMessage.maxTimeToLive) seconds (four weeks), not \(message.timeToLive)")
        }
        if let sent = message.sentAt, !Self.deviceTimeRange.contains(sent.milliseconds) {
            throw LedgerError(.invalidParameter, "SentAt is out of range (\(sent.milliseconds) ms)")
        }
        var size = 0
        for (key, value) in message.data {
            guard (1...256).contains(key.utf8.count) else {
                throw LedgerError(.invalidParameter, "Data key \(quoted(key)) must be 1-256 bytes")
            }
            size += key.utf8.count + value.utf8.count
        }
        let limit = options.limits.maxMessageBytes
        guard size <= limit else {
            throw LedgerError(.limitExceeded, "Data holds \(size) bytes of keys and values; the limit is \(limit)")
        }
    }

    /// Takes a message from a device: appends it to the identity's message stream in the same
    /// transaction as its idempotency key, and returns the acknowledgement.
    ///
    /// A resend of the same message id from the same device returns the first acknowledgement
    /// and appends nothing — after a restart too, since the key is written with the entry.
    ///
    /// - Throws: `.notFound` when the pool has no such device or the identity may not send
    ///   from it (it must own it or be logged in on it); `.idempotencyConflict` for a used id
    ///   with another body; `.expired` when its time to live had passed on arrival;
    ///   `.invalidParameter` / `.limitExceeded` for a bad message. Nothing is stored then.
    public func postMessage(pool: IdentityPoolID, identity: IdentityID, deviceCode: String, message: DeviceMessage) async throws -> MessageAck {
        try Self.requireUserIdentity(identity)
        try Self.validateDeviceCode(deviceCode)
        try validateMessage(message)
        let key = Self.messageKey(pool: pool, identity: identity, device: deviceCode, messageId: message.messageId)
        let value = message.canonical
        let hash = Array(SHA256.hash(data: Array(value.utf8)))
        if let ack = try read({ txn in try storedAck(txn, key: key, hash: hash, messageId: message.messageId) }) { return ack }
        guard let device = try device(pool: pool, id: deviceCode), device.isReachable(by: identity.rawValue) else {
            throw Self.unknownDevice(deviceCode, pool: pool)
        }
        let now = options.clock()
        let expires = message.expires(received: now)
        guard expires >= now else {
            throw LedgerError(.expired, "message \(quoted(message.messageId)) expired at \(expires), before it arrived at \(now); nothing was stored")
        }
        let stream = Self.messageStream(pool: pool, identity: identity)
        return try await write { [self] txn in
            if let ack = try self.storedAck(txn, key: key, hash: hash, messageId: message.messageId) { return ack }
            let (entry, _) = try self.append(txn, to: stream, author: identity.rawValue, device: deviceCode,
                                             events: [.put(key: "message", value: value, deviceModified: message.sentAt)])
            return MessageAck(messageId: message.messageId, sequence: entry.sequence, replayed: false)
        }
    }

    /// The stored acknowledgement of a message key, nil when there is none.
    /// - Throws: `.idempotencyConflict` when the stored message differs from `hash`.
    private func storedAck(_ txn: Transaction, key: [UInt8], hash: [UInt8], messageId: String) throws -> MessageAck? {
        guard let stored = try txn.get(schema.messageIDs, key: key), stored.count == 40 else { return nil }
        guard stored[8...].elementsEqual(hash) else {
            throw LedgerError(.idempotencyConflict, "message id \(quoted(messageId)) was used by this device for another message; a resend must carry the same TimeToLive, SentAt and Data")
        }
        return MessageAck(messageId: messageId, sequence: Array(stored[0..<8]).bigEndianUInt64(), replayed: true)
    }

    /// Indexes a message entry (its idempotency key and its place for consumers), whichever
    /// path appended it: a device's POST, a merge or replication, a rebuild of the views. An
    /// entry that is not a message as this version writes them is left unindexed; a key seen
    /// before keeps its first entry.
    func indexMessage(_ txn: Transaction, _ entry: LogEntry, streamID: UInt64) throws {
        guard entry.events.count == 1, case .put("message", let value, _) = entry.events[0],
              let message = try? JSONDecoder().decode(DeviceMessage.self, from: Data(value.utf8)) else { return }
        let key = Self.messageKey(pool: entry.stream.pool, identity: entry.stream.identity, device: entry.device ?? "", messageId: message.messageId)
        guard try txn.get(schema.messageIDs, key: key) == nil else { return }
        var ack = ByteWriter(capacity: 40)
        ack.fixed64(entry.sequence)
        ack.raw(SHA256.hash(data: Array(value.utf8)))
        try txn.put(schema.messageIDs, key: key, value: ack.bytes)
        let row = MessageIndexRow(received: entry.time, expires: message.expires(received: entry.time), streamID: streamID, key: key)
        try txn.put(schema.messageIndex, key: .bigEndian(entry.sequence), value: row.encoded())
    }
}
