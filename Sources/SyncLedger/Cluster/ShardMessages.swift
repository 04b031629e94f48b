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
    /// `step` asks for. At most `maxRows` rows are walked. One read transaction.
    ///
    /// Rows of messages no shard message carried (written before this ledger joined a cluster)
    /// come with `message` nil.
    ///
    /// Within a shard this order is the shard's own, so a consumer that keeps one position per
    /// shard (what it has settled) can walk any replica and find the same messages after it.
    public func walkShardMessages(after start: UInt64, maxRows: Int, shardOf: (StreamName) -> Int,
                                  step: (ShardMessageRow) throws -> ShardMessageStep) throws -> ShardMessageWalk {
        try read { txn in
            var names: [UInt64: StreamName] = [:]
            var rows: [(UInt64, MessageIndexRow, ShardMessageRow)] = []
            // The index rows first, then their shard places: a binary search of the shard index
            // each, on cursors of their own.
            try txn.withCursor(schema.messageIndex) { c in
                var pair = try c.seek(atLeast: .bigEndian(start &+ 1))
                while let current = pair, rows.count < maxRows {
                    let sequence = current.key.bigEndianUInt64()
                    let row = try MessageIndexRow(decoding: current.value)
                    if names[row.streamID] == nil { names[row.streamID] = try streamName(txn, id: row.streamID) }
                    let shard = shardOf(names[row.streamID]!)
                    rows.append((sequence, row, ShardMessageRow(sequence: sequence, shard: shard, message: nil, index: 0, expires: row.expires)))
                    pair = try c.next()
                }
            }
            var walk = ShardMessageWalk(messages: [], through: rows.count == maxRows ? rows[rows.count - 1].0 : try nextSequence(txn) - 1)
            for (sequence, row, unplaced) in rows {
                var placed = unplaced
                if let message = try lastMessage(txn, unplaced.shard, appliedThrough: sequence), sequence - message.firstLocal < UInt64(message.count) {
                    placed = ShardMessageRow(sequence: sequence, shard: unplaced.shard, message: message,
                                             index: Int(sequence - message.firstLocal) + 1, expires: row.expires)
                }
                switch try step(placed) {
                case .pass: continue
                case .stop:
                    walk.through = sequence - 1
                    return walk
                case .read:
                    if let message = try receivedMessage(txn, at: sequence, row, names: &names) { walk.messages.append(message) }
                }
            }
            return walk
        }
    }
}
