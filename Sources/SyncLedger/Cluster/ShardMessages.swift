import LedgerStorage

/// A device message's row in the consumers' index as a cluster node sees it: where it is in
/// this node's change feed and where in its shard's log — the place that is the same on every node.
public struct ShardMessageRow: Sendable, Hashable {
    /// Its change-feed position on this node.
    public let sequence: UInt64
    /// The shard of its identity.
    public let shard: Int
    /// The shard message that carried it (nil: none did — it was written before this ledger
    /// joined a cluster, and no other node has it).
    public let message: AppliedShardMessage?
    /// Its place among that message's entries, from 1.
    public let index: Int
    /// When it expires.
    public let expires: Timestamp
}

/// What a cluster consumer's walk does with a row.
public enum ShardMessageStep: Sendable {
    /// Already settled: go on (counts toward the walk's `maxSettled`, not `maxRows`).
    case settled
    /// Go on without reading the message.
    case pass
    /// Read the message into the answer, and go on.
    case read
    /// End the walk before this row.
    case stop
}

/// What a walk of the device messages read, and how far it went.
public struct ShardMessageWalk: Sendable {
    /// The messages the step asked to read, in walking order.
    public var messages: [ReceivedMessage]
    /// The change-feed position the walk covered: every device message at or before it (after
    /// the start) was shown to the step. The feed's end when the walk ran out of messages.
    public var through: UInt64
}

extension Ledger {
    /// Walks the device messages after change-feed position `start` in this replica's order,
    /// placing each in its shard's log (`shardOf` names the shard of a stream), and reads those
    /// `step` asks for. It ends after `maxRows` rows the step passed or read, or `maxSettled`
    /// it called settled (so a walk over what a reader settled long ago is bounded too, and
    /// still says how far it got). One read transaction.
    ///
    /// Within a shard this order is the shard's own, so a consumer that keeps one position per
    /// shard (what it has settled) can walk any replica and find the same messages after it.
    /// Rows of messages no shard message carried (written before this ledger joined a cluster)
    /// come with `message` nil.
    public func walkShardMessages(after start: UInt64, maxRows: Int, maxSettled: Int = 100_000, shardOf: (StreamName) -> Int,
                                  step: (ShardMessageRow) throws -> ShardMessageStep) throws -> ShardMessageWalk {
        try read { txn in
            var names: [UInt64: StreamName] = [:]
            var walk = ShardMessageWalk(messages: [], through: 0)
            var (rows, settled) = (0, 0)
            var ended = false
            try txn.withCursor(schema.messageIndex) { c in
                var pair = try c.seek(atLeast: .bigEndian(start &+ 1))
                while let current = pair {
                    let sequence = current.key.bigEndianUInt64()
                    let row = try MessageIndexRow(decoding: current.value)
                    if names[row.streamID] == nil { names[row.streamID] = try streamName(txn, id: row.streamID) }
                    let shard = shardOf(names[row.streamID]!)
                    let place = try self.place(txn, shard, sequence)
                    switch try step(ShardMessageRow(sequence: sequence, shard: shard, message: place?.message, index: place?.index ?? 0, expires: row.expires)) {
                    case .stop:
                        (walk.through, ended) = (sequence - 1, true)
                        return
                    case .settled: settled += 1
                    case .pass: rows += 1
                    case .read:
                        rows += 1
                        if let message = try receivedMessage(txn, at: sequence, row, names: &names) { walk.messages.append(message) }
                    }
                    if rows >= maxRows || settled >= maxSettled {
                        (walk.through, ended) = (sequence, true)
                        return
                    }
                    pair = try c.next()
                }
            }
            if !ended { walk.through = try nextSequence(txn) - 1 }
            return walk
        }
    }
}
