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

    /// The stored form: JSON with sorted keys, the same bytes for the same message —
    /// JSONEncoder's (`Ledger.json`), written directly when no string needs escaping.
    var canonical: String { fastCanonical() ?? Ledger.json(self) }

    /// JSONEncoder's bytes with sorted keys, when every string is printable ASCII without `"`,
    /// `\` or `/` (which it escapes); nil otherwise. A test holds the two to the same bytes.
    func fastCanonical() -> String? {
        func plain(_ s: String) -> Bool { s.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7f && $0 != 0x22 && $0 != 0x5c && $0 != 0x2f } }
        guard plain(messageId), data.allSatisfy({ plain($0.key) && plain($0.value) }) else { return nil }
        var out = "{\"Data\":{"
        for (i, (key, value)) in data.sorted(by: { $0.key < $1.key }).enumerated() {
            if i > 0 { out += "," }
            out += "\"" + key + "\":\"" + value + "\""
        }
        out += "},\"MessageId\":\"" + messageId + "\""
        if let sentAt { out += ",\"SentAt\":" + String(sentAt.milliseconds) }
        out += ",\"TimeToLive\":" + String(timeToLive) + "}"
        return out
    }
}

/// A message `postMessage` is appending, already parsed and hashed, so that indexing it on the
/// writer thread parses nothing (a merge or a rebuild passes none and parses the entry).
struct KnownMessage: Sendable {
    let value: String
    let message: DeviceMessage
    let hash: [UInt8]
    let key: [UInt8]
}

/// Who may send from a device, by pool and device code, with the version (the record's sync
/// count) it was read at: a message decodes the device's JSON only when its record changed.
final class DeviceReachCache: Sendable {
    struct Reach { let version: UInt64; let owner: String?; let identity: String? }
    private let entries = Mutex<[String: Reach]>([:])

    func get(_ key: String) -> Reach? { entries.withLock { $0[key] } }

    func set(_ key: String, _ reach: Reach) {
        entries.withLock { cache in
            if cache.count >= 100_000 { cache.removeAll() }
            cache[key] = reach
        }
    }
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

    /// The idempotency key of a message: the first 16 bytes of SHA-256(pool␀identity␀device␀
    /// message id). Small keys keep the tree shallow and its pages few (a collision needs some
    /// 2^64 keys).
    static func messageKey(pool: IdentityPoolID, identity: IdentityID, device: String, messageId: String) -> [UInt8] {
        var key = StreamName.prefix(pool: pool, identity: identity)
        key.append(contentsOf: device.utf8)
        key.append(0)
        key.append(contentsOf: messageId.utf8)
        return Array(SHA256.hash(data: key).prefix(16))
    }

    /// Whether the message id has a control character (C0, DEL or C1), read from its bytes.
    static func hasControlCharacter(_ s: String) -> Bool {
        var previous: UInt8 = 0
        for b in s.utf8 {
            if b < 0x20 || b == 0x7f || (previous == 0xc2 && (0x80...0x9f).contains(b)) { return true }
            previous = b
        }
        return false
    }

    /// Whether `identity` may send from device `code`: it created it or is logged in on it.
    /// The device's JSON is decoded only when its record changed since the last look.
    func deviceReachable(_ txn: Transaction, pool: IdentityPoolID, code: String, identity: IdentityID) throws -> Bool {
        let stream = Self.devicesStream(pool)
        guard let head = try head(txn, stream) else { return false }
        let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id)
        guard let record = try view.storedRecord("device/\(code)"), let text = record.value else { return false }
        let cacheKey = pool.rawValue + "\u{0}" + code
        if let hit = deviceReach.get(cacheKey), hit.version == record.syncCount {
            return hit.owner == identity.rawValue || hit.identity == identity.rawValue
        }
        let device = try Self.decode(Device.self, text, stream: stream)
        deviceReach.set(cacheKey, .init(version: record.syncCount, owner: device.owner, identity: device.identity))
        return device.isReachable(by: identity.rawValue)
    }

    /// Checks a message: the id is 1-256 bytes without control characters, the time to live
    /// 0-2,419,200 seconds, the data at most ``Limits/maxMessageBytes`` bytes of keys and
    /// values with keys of 1-256 bytes.
    /// - Throws: `.invalidParameter` or `.limitExceeded` naming the field.
    public func validateMessage(_ message: DeviceMessage) throws(LedgerError) {
        let id = message.messageId
        guard (1...256).contains(id.utf8.count), !Self.hasControlCharacter(id) else {
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
        let (stored, reachable) = try read { txn -> (MessageAck?, Bool) in
            if let ack = try storedAck(txn, key: key, hash: hash, messageId: message.messageId) { return (ack, true) }
            return (nil, try deviceReachable(txn, pool: pool, code: deviceCode, identity: identity))
        }
        if let stored { return stored }
        guard reachable else { throw Self.unknownDevice(deviceCode, pool: pool) }
        let now = options.clock()
        let expires = message.expires(received: now)
        guard expires >= now else {
            throw LedgerError(.expired, "message \(quoted(message.messageId)) expired at \(expires), before it arrived at \(now); nothing was stored")
        }
        let stream = Self.messageStream(pool: pool, identity: identity)
        return try await write(on: stream) { [self] txn in
            if let ack = try self.storedAck(txn, key: key, hash: hash, messageId: message.messageId) { return ack }
            let known = KnownMessage(value: value, message: message, hash: hash, key: key)
            let (entry, _) = try self.append(txn, to: stream, author: identity.rawValue, device: deviceCode,
                                             events: [.put(key: "message", value: value, deviceModified: message.sentAt)], message: known)
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
    /// entry that is not a message as this version writes them is left unindexed. A key seen
    /// before moves to this entry, and the entry is indexed all the same: the writer took it as
    /// a new message (its own copy of the key was purged), so every replica — purged or not —
    /// shows it to consumers and answers a resend with it.
    func indexMessage(_ txn: Transaction, _ entry: LogEntry, streamID: UInt64, known: KnownMessage?) throws {
        guard entry.events.count == 1, case .put("message", let value, _) = entry.events[0] else { return }
        let message: DeviceMessage, key: [UInt8], hash: [UInt8]
        if let known, known.value == value {
            // postMessage parsed and hashed it, and found no key in this transaction.
            (message, key, hash) = (known.message, known.key, known.hash)
        } else {
            guard let decoded = try? JSONDecoder().decode(DeviceMessage.self, from: Data(value.utf8)) else { return }
            message = decoded
            key = Self.messageKey(pool: entry.stream.pool, identity: entry.stream.identity, device: entry.device ?? "", messageId: message.messageId)
            hash = Array(SHA256.hash(data: Array(value.utf8)))
        }
        var ack = ByteWriter(capacity: 40)
        ack.fixed64(entry.sequence)
        ack.raw(hash)
        try txn.put(schema.messageIDs, key: key, value: ack.bytes)
        let row = MessageIndexRow(received: entry.time, expires: message.expires(received: entry.time), streamID: streamID, key: key)
        try txn.put(schema.messageIndex, key: .bigEndian(entry.sequence), value: row.encoded())
    }
}
