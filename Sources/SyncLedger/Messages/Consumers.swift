import Foundation
import LedgerStorage
import Synchronization

/// A server-side reader of device messages with a durable cursor, which it advances by
/// acknowledging: what it has not acknowledged it reads again (after a crash too).
public struct MessageConsumer: Sendable, Hashable, Codable {
    /// Its name.
    public var name: String
    /// The commit sequence up to which it has acknowledged.
    public var cursor: UInt64
    /// Messages acknowledged within their time to live (consumed).
    public var acknowledged: UInt64
    /// Messages whose time to live passed before it acknowledged them (expired).
    public var expired: UInt64
    /// When it first acknowledged.
    public var created: Timestamp
    /// When it last acknowledged.
    public var updated: Timestamp

    /// Checks a consumer name: 1-64 characters of `[A-Za-z0-9_.-]`.
    public static func validate(name: String) throws(LedgerError) {
        guard (1...64).contains(name.utf8.count), name.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) || $0 == 0x5f || $0 == 0x2e || $0 == 0x2d }) else {
            throw LedgerError(.invalidParameter, "consumer name \(quoted(name)) must be 1-64 characters of A-Z a-z 0-9 _ . -")
        }
    }

    /// The most consumers a ledger keeps.
    public static let maxConsumers = 1000
}

/// A message as a consumer reads it.
public struct ReceivedMessage: Sendable, Hashable {
    /// Its position in the change feed (what the consumer acknowledges).
    public let sequence: UInt64
    /// The identity pool.
    public let pool: IdentityPoolID
    /// The identity that sent it.
    public let identity: IdentityID
    /// The device it came from.
    public let deviceCode: String
    /// When the server took it.
    public let received: Timestamp
    /// When it expires.
    public let expires: Timestamp
    /// The message.
    public let message: DeviceMessage
}

/// A page of messages for a consumer.
public struct MessagePage: Sendable {
    /// The live messages after the consumer's cursor, oldest first.
    public var messages: [ReceivedMessage]
    /// The last position examined (expired messages skipped included): acknowledging it
    /// settles everything in the page.
    public var last: UInt64
    /// Messages skipped because they expired.
    public var skippedExpired: Int
}

extension Ledger {
    /// The consumer named `name` (a consumer that never acknowledged starts at the beginning).
    public func consumer(_ name: String) throws -> MessageConsumer? {
        try MessageConsumer.validate(name: name)
        return try read { txn in try self.storedConsumer(txn, name) }
    }

    /// Every consumer that has acknowledged something, by name.
    public func consumers() throws -> [MessageConsumer] {
        try read { txn in
            try txn.withCursor(schema.consumers) { cursor in
                var all: [MessageConsumer] = []
                var pair = try cursor.first()
                while let current = pair {
                    all.append(try decodeConsumer(current.value))
                    pair = try cursor.next()
                }
                return all
            }
        }
    }

    private func storedConsumer(_ txn: Transaction, _ name: String) throws -> MessageConsumer? {
        try txn.get(schema.consumers, key: Array(name.utf8)).map(decodeConsumer)
    }

    private func decodeConsumer(_ bytes: [UInt8]) throws -> MessageConsumer {
        do { return try JSONDecoder().decode(MessageConsumer.self, from: Data(bytes)) } catch {
            throw LedgerError(.corruptData, "a stored message consumer does not decode: \(error)")
        }
    }

    /// The messages after `cursor` that have not expired at `now`: at most `limit`, and at
    /// most ten times that many examined.
    public func messages(after cursor: UInt64, limit: Int, now: Timestamp? = nil) throws -> MessagePage {
        let now = now ?? options.clock()
        let limit = max(1, min(limit, 10_000))
        return try read { txn in
            var page = MessagePage(messages: [], last: cursor, skippedExpired: 0)
            var names: [UInt64: StreamName] = [:]
            var examined = 0
            try txn.withCursor(schema.messageIndex) { c in
                var pair = try c.seek(atLeast: .bigEndian(cursor &+ 1))
                while let current = pair, page.messages.count < limit, examined < limit * 10 {
                    examined += 1
                    let sequence = current.key.bigEndianUInt64()
                    page.last = sequence
                    let row = try MessageIndexRow(decoding: current.value)
                    if row.expires < now {
                        page.skippedExpired += 1
                    } else if let message = try receivedMessage(txn, at: sequence, row, names: &names) {
                        page.messages.append(message)
                    }
                    pair = try c.next()
                }
            }
            return page
        }
    }

    /// The message whose index row `row` is at feed position `sequence` (nil: its entry is
    /// gone or is not a device message). `names` caches stream names by id.
    func receivedMessage(_ txn: Transaction, at sequence: UInt64, _ row: MessageIndexRow, names: inout [UInt64: StreamName]) throws -> ReceivedMessage? {
        guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)) else { return nil }
        if names[row.streamID] == nil { names[row.streamID] = try streamName(txn, id: row.streamID) }
        let (entry, _) = try decodeEntry(bytes, sequence: sequence, stream: names[row.streamID], txn: txn)
        guard case .put(_, let value, _)? = entry.events.first,
              let message = try? JSONDecoder().decode(DeviceMessage.self, from: Data(value.utf8)) else { return nil }
        return ReceivedMessage(sequence: sequence, pool: entry.stream.pool, identity: entry.stream.identity,
                               deviceCode: entry.device ?? "", received: entry.time, expires: row.expires, message: message)
    }

    /// The messages after consumer `name`'s cursor (see ``messages(after:limit:now:)``).
    public func messages(for name: String, limit: Int) throws -> (MessageConsumer?, MessagePage) {
        let consumer = try consumer(name)
        return (consumer, try messages(after: consumer?.cursor ?? 0, limit: limit))
    }

    /// The most messages one acknowledgement passes (see ``acknowledgeMessages(consumer:through:)``).
    public static let maxAcknowledgedPerCall = 100_000

    /// Acknowledges every message up to `sequence` for consumer `name` (creating it): its
    /// cursor moves there, and each message passed counts as acknowledged or — when its time
    /// to live had passed — expired. An acknowledgement at or below the cursor changes nothing.
    /// One call passes at most ``maxAcknowledgedPerCall`` messages: beyond them the cursor
    /// stops short (the returned consumer's cursor says where) and the caller acknowledges again.
    /// - Throws: `.invalidParameter` for a sequence beyond the change feed or a bad name;
    ///   `.limitExceeded` for a new consumer beyond ``MessageConsumer/maxConsumers``.
    @discardableResult
    public func acknowledgeMessages(consumer name: String, through sequence: UInt64) async throws -> MessageConsumer {
        try MessageConsumer.validate(name: name)
        let now = options.clock()
        return try await write { [self] txn in
            let last = try self.nextSequence(txn) - 1
            guard sequence <= last else {
                throw LedgerError(.invalidParameter, "Sequence \(sequence) is beyond the change feed's last position \(last)")
            }
            var consumer: MessageConsumer
            if let stored = try self.storedConsumer(txn, name) {
                consumer = stored
            } else {
                let count = try txn.count(self.schema.consumers)
                guard count < MessageConsumer.maxConsumers else {
                    throw LedgerError(.limitExceeded, "there are \(count) message consumers; the limit is \(MessageConsumer.maxConsumers)")
                }
                consumer = MessageConsumer(name: name, cursor: 0, acknowledged: 0, expired: 0, created: now, updated: now)
            }
            guard sequence > consumer.cursor else { return consumer }
            var reached = sequence
            try txn.withCursor(self.schema.messageIndex) { c in
                var pair = try c.seek(atLeast: .bigEndian(consumer.cursor + 1))
                var walked = 0
                while let current = pair, current.key.bigEndianUInt64() <= sequence {
                    // A bounded walk per transaction (the writer serves everyone): a far jump
                    // moves the cursor part of the way, and the answer says where.
                    if walked == Self.maxAcknowledgedPerCall { reached = current.key.bigEndianUInt64() - 1; break }
                    walked += 1
                    let row = try MessageIndexRow(decoding: current.value)
                    if row.expires < now { consumer.expired += 1 } else { consumer.acknowledged += 1 }
                    pair = try c.next()
                }
            }
            consumer.cursor = reached
            consumer.updated = now
            try txn.put(self.schema.consumers, key: Array(name.utf8), value: Array(Self.json(consumer).utf8))
            return consumer
        }
    }

    /// Removes a consumer (its cursor and counts).
    /// - Returns: whether there was one.
    @discardableResult
    public func removeConsumer(_ name: String) async throws -> Bool {
        try MessageConsumer.validate(name: name)
        return try await write { [self] txn in try txn.delete(self.schema.consumers, key: Array(name.utf8)) }
    }
}
