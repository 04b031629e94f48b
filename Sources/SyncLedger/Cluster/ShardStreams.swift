import LedgerStorage

/// One message of a shard's log as this replica applied it: where its entries landed in this
/// node's change feed.
public struct AppliedShardMessage: Sendable, Hashable {
    /// The message's sequence in the shard's log.
    public let sequence: UInt64
    /// The change-feed position of its first entry on this node.
    public let firstLocal: UInt64
    /// How many entries it carried.
    public let count: Int
}

/// What one read of a shard's applied messages gives a Cognito stream target on a cluster node.
public struct ShardStreamBatch: Sendable {
    /// The records, in the shard's order (so in order per dataset).
    public var records: [StreamRecord]
    /// The shard sequence to move the target's cursor to once the records are acknowledged (the
    /// cursor given when nothing was read).
    public var last: UInt64
}

/// The index from a shard's messages to this replica's change feed, kept in the same commit as
/// each applied message (one small key per message that carried entries; a fence carries none).
/// It lets a cursor counted in the shard's own sequences — the same on every node — be read from
/// any replica: a Cognito stream target's delivery moves with the shard's owner.
extension Ledger {
    static func shardAppliedKey(_ shard: Int, _ sequence: UInt64) -> [UInt8] {
        .bigEndian(UInt64(shard)) + .bigEndian(sequence)
    }

    static func shardIndexStartKey(_ shard: Int) -> [UInt8] { Array("shard-indexed-from/".utf8) + .bigEndian(UInt64(shard)) }

    /// Notes, at the first message of `shard` this replica applies with the index kept (a
    /// replica that applied earlier ones with a version that kept none), where the index starts.
    func noteIndexStart(_ txn: Transaction, shard: Int, sequence: UInt64) throws {
        let key = Self.shardIndexStartKey(shard)
        if try txn.get(schema.meta, key: key) == nil { try txn.put(schema.meta, key: key, value: .bigEndian(sequence)) }
    }

    /// The first message of `shard` from which this replica's index is complete: 1 for a replica
    /// that applied the shard from its start with it, later for one that applied earlier messages
    /// before it kept the index. A cursor or event id before it cannot be read on this replica.
    public func shardIndexStart(_ shard: Int) throws -> UInt64 {
        try read { txn in
            if let stored = try txn.get(schema.meta, key: Self.shardIndexStartKey(shard)) { return stored.bigEndianUInt64() }
            return try shardCheckpoint(txn, shard) + 1
        }
    }

    /// Throws when this replica cannot read `shard` from after `position` (see ``shardIndexStart(_:)``).
    func requireIndexed(_ shard: Int, after position: UInt64) throws {
        let start = try shardIndexStart(shard)
        guard position + 1 >= start else {
            throw LedgerError(.unavailable, "this replica keeps the index of shard \(shard) from message \(start) on (it applied earlier ones with a version that kept none), so it cannot read from message \(position + 1): let a node started on an empty directory own the shard, or rebuild this one from an empty directory")
        }
    }

    /// Notes that message `sequence` of `shard` put its `count` entries at `firstLocal` on.
    func recordShardMessage(_ txn: Transaction, shard: Int, sequence: UInt64, firstLocal: UInt64, count: Int) throws {
        guard count > 0 else { return }
        try txn.put(schema.shardIndex, key: Self.shardAppliedKey(shard, sequence), value: .bigEndian(firstLocal) + .bigEndian(UInt64(count)))
    }

    /// The change-feed position on this replica just before the first entry of `shard` that
    /// comes after the first `entries` entries of its message `sequence` (0: the whole message
    /// comes after; its count or more: none of it): where reading on finds what follows that
    /// point of the shard, and nothing of it before. Past a whole message that is just before
    /// the shard's next message this replica applied (what lies between belongs to other
    /// shards), or the feed's end when there is none yet; a message this replica has not
    /// applied, or that carried no entries, is treated the same way.
    public func feedPosition(shard: Int, sequence: UInt64, entries: Int) throws -> UInt64 {
        try requireIndexed(shard, after: sequence)
        if sequence > 0, let message = try read({ txn in try txn.get(schema.shardIndex, key: Self.shardAppliedKey(shard, sequence)) })
            .map({ try Self.decodeApplied(key: Self.shardAppliedKey(shard, sequence), value: $0, shard: shard) }), entries < message.count {
            return message.firstLocal - 1 + UInt64(max(entries, 0))
        }
        if let next = try appliedShardMessages(shard, after: sequence, limit: 1).first { return next.firstLocal - 1 }
        return try lastSequence
    }

    /// Up to `limit` messages of `shard` that carried entries, after shard sequence `after`, in
    /// order, as this replica applied them.
    public func appliedShardMessages(_ shard: Int, after: UInt64, limit: Int) throws -> [AppliedShardMessage] {
        guard after < UInt64.max, limit > 0 else { return [] }
        let prefix: [UInt8] = .bigEndian(UInt64(shard))
        return try read { txn in
            try txn.withCursor(schema.shardIndex) { cursor in
                var result: [AppliedShardMessage] = []
                var pair = try cursor.seek(atLeast: Self.shardAppliedKey(shard, after + 1))
                while let current = pair, result.count < limit, current.key.starts(with: prefix) {
                    result.append(try Self.decodeApplied(key: current.key, value: current.value, shard: shard))
                    pair = try cursor.next()
                }
                return result
            }
        }
    }

    /// The sequence of `shard`'s last message whose entries this replica applied before change-feed
    /// position `local` (at or before it): a stream target that starts at `local` on this node
    /// starts after it. 0 when none did.
    public func shardSequence(_ shard: Int, appliedThrough local: UInt64) throws -> UInt64 {
        try lastShardMessage(shard, appliedThrough: local)?.sequence ?? 0
    }

    /// `shard`'s last message whose first entry this replica applied at or before feed position
    /// `local` (nil: none).
    public func lastShardMessage(_ shard: Int, appliedThrough local: UInt64) throws -> AppliedShardMessage? {
        try read { txn in try lastMessage(txn, shard, appliedThrough: local) }
    }

    /// `shard`'s last message whose first entry this replica applied at or before `local`.
    func lastMessage(_ txn: Transaction, _ shard: Int, appliedThrough local: UInt64) throws -> AppliedShardMessage? {
        let prefix: [UInt8] = .bigEndian(UInt64(shard))
        return try txn.withCursor(schema.shardIndex) { cursor -> AppliedShardMessage? in
            // The shard's last indexed message: the first key past the shard's (there is none
            // at sequence UInt64.max), then one back.
            let beyond = try cursor.seek(atLeast: Self.shardAppliedKey(shard, .max))
            guard let lastPair = try beyond == nil ? cursor.last() : cursor.previous(), lastPair.key.starts(with: prefix) else { return nil }
            let last = try Self.decodeApplied(key: lastPair.key, value: lastPair.value, shard: shard)
            if last.firstLocal <= local { return last }
            // Feed positions grow with the shard's sequences: a binary search over them, `low`
            // an indexed message at or before `local` (nil: none), `high` one after it.
            var low: AppliedShardMessage?
            var high = last.sequence
            while high - (low?.sequence ?? 0) > 1 {
                let middle = (low?.sequence ?? 0) + (high - (low?.sequence ?? 0)) / 2
                // The first indexed message at or after `middle`.
                let pair = try cursor.seek(atLeast: Self.shardAppliedKey(shard, middle))
                guard let pair, pair.key.starts(with: prefix),
                      case let found = try Self.decodeApplied(key: pair.key, value: pair.value, shard: shard), found.sequence < high else {
                    high = middle  // nothing indexed in [middle, high)
                    continue
                }
                if found.firstLocal <= local { low = found } else { high = found.sequence }
            }
            return low
        }
    }

    /// For each change-feed position of `positions`, with the shard its entry belongs to, the
    /// message of that shard whose entries this replica applied there, and the position's place
    /// among them (1-based). Nil for a position no shard message put there (an entry written
    /// before this ledger joined a cluster). One read transaction for all; a binary search over
    /// the shard's index each.
    public func shardMessages(containing positions: [(position: UInt64, shard: Int)]) throws -> [(message: AppliedShardMessage, shard: Int, index: Int)?] {
        try read { txn in
            try positions.map { local, shard in try place(txn, shard, local).map { ($0.message, shard, $0.index) } }
        }
    }

    /// The message of `shard` that put feed position `local` here, and the entry's place in it
    /// (from 1); nil when none did.
    func place(_ txn: Transaction, _ shard: Int, _ local: UInt64) throws -> (message: AppliedShardMessage, index: Int)? {
        guard let message = try lastMessage(txn, shard, appliedThrough: local), local - message.firstLocal < UInt64(message.count) else { return nil }
        return (message, Int(local - message.firstLocal) + 1)
    }

    static func decodeApplied(key: some Collection<UInt8>, value: some Collection<UInt8>, shard: Int) throws -> AppliedShardMessage {
        let k = Array(key), v = Array(value)
        guard k.count == 16, v.count == 16 else {
            throw LedgerError(.corruptData, "an applied-message index key of shard \(shard) does not decode")
        }
        return AppliedShardMessage(sequence: Array(k.suffix(8)).bigEndianUInt64(), firstLocal: v.bigEndianUInt64(),
                                   count: Int(Array(v.suffix(8)).bigEndianUInt64()))
    }

    /// The records of `pool`'s user datasets in the messages of `shard` after shard sequence
    /// `cursor` that this replica applied at or before change-feed position `through` (the
    /// position at which the caller read the pool's settings: what was applied later waits for
    /// the next read of them, as a single node's batch ends before a configuration change). At
    /// most `maxRecords` records and `maxBytes` of JSON, unless one message alone carries more:
    /// a batch ends between messages, so a cursor is always a shard sequence.
    ///
    /// Each record is Cognito's stream JSON (``StreamRecord``) with `sequence` this node's feed
    /// position and, beside it, `shard` and `shardSequence`: the same on every node.
    public func shardStreamBatch(pool: IdentityPoolID, shard: Int, after cursor: UInt64, through: UInt64, maxRecords: Int = 500,
                                 maxBytes: Int = 1 << 20, scanLimit: Int = 20_000, reference: StreamPayloadReference? = nil) throws -> ShardStreamBatch {
        try requireIndexed(shard, after: cursor)
        var batch = ShardStreamBatch(records: [], last: cursor)
        var bytes = 0
        var scanned = 0
        while scanned < scanLimit {
            let want = min(1024, scanLimit - scanned)
            let messages = try appliedShardMessages(shard, after: batch.last, limit: want)
            for message in messages {
                if message.firstLocal > through { return batch }
                var records: [StreamRecord] = []
                for s in try commitSummaries(after: message.firstLocal - 1, limit: message.count) where s.stream.pool == pool && !s.stream.isInternal {
                    records.append(StreamRecord(entry: try entry(of: s), extra: ["shard": shard, "shardSequence": message.sequence], reference: reference))
                }
                let size = records.reduce(0) { $0 + $1.json.count }
                if !batch.records.isEmpty, !records.isEmpty, batch.records.count + records.count > maxRecords || bytes + size > maxBytes { return batch }
                batch.records += records
                bytes += size
                batch.last = message.sequence
            }
            scanned += messages.count
            if messages.count < want { break }
        }
        return batch
    }
}
