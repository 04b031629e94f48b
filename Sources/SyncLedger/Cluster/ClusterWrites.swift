import Crypto
import LedgerStorage

/// A write that appended entries in its dry run: what the caller gets, and the entries to commit.
private struct Prepared<T: Sendable>: Error {
    let value: T
    let entries: [Segment.Entry]
}

/// The outcome of running a write's body on the writer in cluster mode.
private enum DryRun<T: Sendable>: Sendable {
    /// It appended nothing to the log: its other changes (session counts, consumer cursors,
    /// purges) were committed locally.
    case local(T)
    /// It appended entries of one shard: they were rolled back and go to the shard's log.
    case publish(T, Segment, shard: Int, after: UInt64)
}

extension Ledger {
    // MARK: Binding

    /// Binds this ledger to a cluster's shard log (nil unbinds): from then on every write that
    /// appends to the log is committed to its shard's log first and applied here only after
    /// that log acknowledged it (see ``ShardLog``). Writes that append nothing (session counts,
    /// consumer cursors, purges) stay local.
    public func bindCluster(_ log: (any ShardLog)?) { cluster.bind(log) }

    /// The shard log this ledger is bound to, if any.
    public var shardLog: (any ShardLog)? { cluster.current }

    // MARK: Checkpoints

    static func shardCheckpointKey(_ shard: Int) -> [UInt8] { Array("shard-checkpoint/".utf8) + .bigEndian(UInt64(shard)) }

    func shardCheckpoint(_ txn: Transaction, _ shard: Int) throws -> UInt64 {
        try txn.get(schema.meta, key: Self.shardCheckpointKey(shard))?.bigEndianUInt64() ?? 0
    }

    /// The sequence of the last message of `shard`'s log applied here (0: none).
    public func shardCheckpoint(_ shard: Int) throws -> UInt64 {
        try read { txn in try shardCheckpoint(txn, shard) }
    }

    /// Whether this ledger is a cluster node's replica: it has applied messages of a shard's log.
    public var isClusterReplica: Bool {
        get throws {
            let prefix = Array("shard-checkpoint/".utf8)
            return try read { txn in
                try txn.withCursor(schema.meta) { cursor in try cursor.seek(atLeast: prefix)?.key.starts(with: prefix) ?? false }
            }
        }
    }

    /// Waits until `shard`'s checkpoint reaches `sequence`, for at most `timeout`.
    /// - Returns: whether it did.
    public func waitForShard(_ shard: Int, atLeast sequence: UInt64, timeout: Duration) async throws -> Bool {
        try await waitForCommits(timeout: timeout) { try shardCheckpoint(shard) >= sequence }
    }

    /// On a cluster, waits until this replica has applied every message `shard`'s log held when
    /// asked, for at most `timeout`. - Returns: whether it did (true when not bound to a cluster).
    public func catchUp(shard: Int, timeout: Duration) async throws -> Bool {
        guard let log = cluster.current else { return true }
        return try await waitForShard(shard, atLeast: try await log.lastSequence(shard), timeout: timeout)
    }

    /// Checks `done` after every commit (this node's, or a replicated one) until it holds, for at
    /// most `timeout`. - Returns: whether it did.
    func waitForCommits(timeout: Duration, until done: () throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            let seen = commitSignal.generation
            if try done() { return true }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return false }
            _ = await commitSignal.wait(after: seen, timeout: left)
        }
    }

    // MARK: Applying a shard's messages

    /// Applies message `sequence` of `shard`'s log — the entries one write appended — to this
    /// replica, in one transaction with the shard's checkpoint. Every entry is chain-checked and
    /// applied by the same code as a follower's merge (``merge(_:)``); an entry of another shard
    /// is refused, and so is the whole message.
    ///
    /// - Returns: ``ShardApplyOutcome/alreadyApplied`` when the checkpoint is already there.
    /// - Throws: `.invalidParameter` when the message is not the next one (a gap: the caller
    ///   must apply `checkpoint + 1` first) or its entries do not chain to this replica, which
    ///   then holds nothing of it.
    @discardableResult
    public func applyShardMessage(_ segment: Segment, shard: Int, of map: ShardMap, sequence: UInt64) async throws -> ShardApplyOutcome {
        try await applyShardMessage(segment, shard: shard, of: map, sequence: sequence, effects: [])
    }

    /// ``applyShardMessage(_:shard:of:sequence:)``, writing `effects` (what only this node keeps
    /// of the write, see ``LocalEffects``) in the same transaction, applied or not.
    func applyShardMessage(_ segment: Segment, shard: Int, of map: ShardMap, sequence: UInt64,
                           effects: [(Database, [UInt8], [UInt8])]) async throws -> ShardApplyOutcome {
        guard (0..<map.count).contains(shard) else {
            throw LedgerError(.invalidParameter, "shard \(shard) is out of range (\(map))")
        }
        for (i, entry) in segment.entries.enumerated() where map.shard(of: entry.stream) != shard {
            throw LedgerError(.invalidParameter, "message \(sequence) of shard \(shard) carries, at entry \(i), stream \(entry.stream) of shard \(map.shard(of: entry.stream)); nothing was applied", stream: entry.stream)
        }
        defer { if segment.touchesConfiguration { dictionaries.configurationChanged() } }
        return try await writeLocal { [self] txn in
            var outcome = ShardApplyOutcome.alreadyApplied
            if try isNextShardMessage(txn, shard, sequence) {
                let first = try nextSequence(txn)
                let report = try merge(segment, txn)
                outcome = .applied(report)
                // Entries already present (a ledger imported into the cluster) are skipped: the
                // ones appended sit together from `first` on.
                try recordShardMessage(txn, shard: shard, sequence: sequence, firstLocal: first, count: report.applied)
                try noteIndexStart(txn, shard: shard, sequence: sequence)
                try txn.put(schema.meta, key: Self.shardCheckpointKey(shard), value: .bigEndian(sequence))
            }
            for (db, key, value) in effects { try txn.put(db, key: key, value: value) }
            return outcome
        }
    }

    /// Whether message `sequence` of `shard` is the next one for this replica (false: already
    /// applied). - Throws: `.invalidParameter` for a gap.
    private func isNextShardMessage(_ txn: Transaction, _ shard: Int, _ sequence: UInt64) throws -> Bool {
        let checkpoint = try shardCheckpoint(txn, shard)
        if sequence <= checkpoint { return false }
        guard sequence == checkpoint + 1 else {
            throw LedgerError(.invalidParameter, "message \(sequence) of shard \(shard) follows \(sequence - 1), but this replica has applied up to \(checkpoint); nothing was applied")
        }
        return true
    }

    static func shardFenceKey(_ shard: Int) -> [UInt8] { Array("shard-fence/".utf8) + .bigEndian(UInt64(shard)) }

    /// Applies a message of `shard`'s log that carries no entries — a new owner's fence — in
    /// order with the others: the checkpoint moves to `sequence` and `note` is kept as the
    /// shard's latest fence (see ``shardFence(_:)``).
    ///
    /// - Returns: false when the checkpoint was already there (nothing changed).
    /// - Throws: `.invalidParameter` when it is not the next message.
    @discardableResult
    public func applyShardFence(_ note: [UInt8], shard: Int, sequence: UInt64) async throws -> Bool {
        try await writeLocal { [self] txn in
            guard try isNextShardMessage(txn, shard, sequence) else { return false }
            try noteIndexStart(txn, shard: shard, sequence: sequence)
            try txn.put(schema.meta, key: Self.shardCheckpointKey(shard), value: .bigEndian(sequence))
            try txn.put(schema.meta, key: Self.shardFenceKey(shard), value: .bigEndian(sequence) + note)
            return true
        }
    }

    /// Passes over message `sequence` of `shard`'s log without applying anything of it — a
    /// message that failed the cluster's authentication (published by someone without the
    /// cluster secret) — in order with the others: only the checkpoint moves, so the shard's
    /// tail goes on after it.
    ///
    /// - Returns: false when the checkpoint was already there (nothing changed).
    /// - Throws: `.invalidParameter` when it is not the next message.
    @discardableResult
    public func skipShardMessage(shard: Int, sequence: UInt64) async throws -> Bool {
        try await writeLocal { [self] txn in
            guard try isNextShardMessage(txn, shard, sequence) else { return false }
            try noteIndexStart(txn, shard: shard, sequence: sequence)
            try txn.put(schema.meta, key: Self.shardCheckpointKey(shard), value: .bigEndian(sequence))
            return true
        }
    }

    /// The latest fence applied for `shard`: its sequence in the shard's log and its note.
    public func shardFence(_ shard: Int) throws -> (sequence: UInt64, note: [UInt8])? {
        try read { txn in
            guard let stored = try txn.get(schema.meta, key: Self.shardFenceKey(shard)), stored.count >= 8 else { return nil }
            return (stored.bigEndianUInt64(), Array(stored[8...]))
        }
    }

    /// Decodes and applies a shard message (segment file bytes). See ``applyShardMessage(_:shard:of:sequence:)``.
    @discardableResult
    public func applyShardMessage(bytes: [UInt8], shard: Int, of map: ShardMap, sequence: UInt64) async throws -> ShardApplyOutcome {
        try await applyShardMessage(try decodeSegment(bytes), shard: shard, of: map, sequence: sequence)
    }

    // MARK: Writing through the shard log

    /// A write in cluster mode: the body runs in a nested transaction on the writer (the same
    /// validation and `apply` as ever); if it appended entries, they are rolled back, committed
    /// to their shard's log, and applied from it — so this replica, like every other, holds only
    /// what the shard's log acknowledged. A body that appended nothing commits locally.
    func clusterWrite<T: Sendable>(_ log: any ShardLog, _ body: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        let map = log.shards
        var attempts = 0
        // The shard whose write lock this write holds: taken once the shard proved contended
        // (this write was refused as behind, or others already queue), released at the end.
        var holding: Int?
        defer { if let holding { cluster.unlock(holding) } }
        while true {
            let effects = LocalEffects()
            let run: DryRun<T> = try await writer.perform { [self] txn in
                do {
                    let value = try txn.nested { inner -> T in
                        let first = try nextSequence(inner)
                        let value = try LocalEffects.$current.withValue(effects) { try body(inner) }
                        let entries = try appendedEntries(inner, from: first)
                        if entries.isEmpty { return value }
                        throw Prepared(value: value, entries: entries)  // rolls the nested transaction back
                    }
                    return .local(value)
                } catch let prepared as Prepared<T> {
                    let shards = Set(prepared.entries.map { map.shard(of: $0.stream) })
                    guard shards.count == 1, let shard = shards.first else {
                        let streams = Set(prepared.entries.map(\.stream)).sorted().prefix(4).map(\.description).joined(separator: ", ")
                        throw LedgerError(.invalidParameter, "this operation writes identities of \(shards.count) shards (\(streams)); in cluster mode one operation writes the streams of one identity's shard; nothing was written")
                    }
                    return .publish(prepared.value, Segment(scope: .feed, entries: prepared.entries), shard: shard, after: try shardCheckpoint(txn, shard))
                }
            }
            guard case .publish(let value, let segment, let shard, let after) = run else {
                if case .local(let value) = run { return value }
                preconditionFailure("unreachable")
            }
            if holding == nil, attempts > 0 || cluster.isLocked(shard) {
                await cluster.lock(shard)
                holding = shard
                continue  // prepare again, in turn
            }
            do {
                let sequence = try await log.append(segment, shard: shard, after: after)
                // Acknowledged by the shard's log: apply it here, unless the shard's tail
                // already did; what only this node keeps of the write goes in the same commit.
                try await applyShardMessage(segment, shard: shard, of: map, sequence: sequence, effects: effects.all)
                return value
            } catch ShardLogError.behind(let shard, let last) {
                // Someone got there first (this node's earlier write not yet applied, or another
                // node): catch up with the log, then prepare the write again on the new state.
                attempts += 1
                guard attempts < (holding == nil ? 16 : 64), try await waitForShard(shard, atLeast: last, timeout: .seconds(10)) else {
                    throw LedgerError(.unavailable, "shard \(shard) kept moving or this replica did not catch up with it (log at \(last)); nothing was written, retry")
                }
            }
        }
    }

    /// The entries appended in `txn` from commit sequence `first` on, as segment entries (each
    /// with the hash of the entry before it in its stream).
    private func appendedEntries(_ txn: Transaction, from first: UInt64) throws -> [Segment.Entry] {
        var entries: [Segment.Entry] = []
        var last: [UInt64: [UInt8]] = [:]  // stream id → hash of its latest entry so far
        var names: [UInt64: StreamName] = [:]
        var sequence = first
        while let stored = try txn.get(schema.log, key: .bigEndian(sequence)) {
            let id = stored.bigEndianUInt64()
            let stream: StreamName
            if let known = names[id] { stream = known } else {
                stream = try streamName(txn, id: id)
                names[id] = stream
            }
            let entry = try segmentEntry(stored, sequence: sequence, stream: stream) { offset in
                try last[id] ?? storedHash(txn, streamID: id, stream: stream, offset: offset - 1)
            }
            last[id] = entry.hash
            entries.append(entry)
            sequence += 1
        }
        return entries
    }

    // MARK: Comparing replicas

    /// A digest of every stream's head — SHA-256 over, in stream-name order, each stream's key,
    /// last offset and last entry hash — and the number of streams. Two replicas holding the
    /// same entries have the same digest, whatever order they applied the shards' messages in
    /// (unlike the Merkle tree's, which follows this replica's commit order).
    public func headsDigest() throws -> (digest: [UInt8], streams: Int) {
        try read { txn in
            var hasher = SHA256()
            var count = 0
            try txn.withCursor(schema.streams) { cursor in
                var pair = try cursor.first()
                while let current = pair {
                    let head = try StreamHead(decoding: current.value)
                    hasher.update(data: [UInt8].bigEndian(UInt64(current.key.count)))
                    hasher.update(data: current.key)
                    hasher.update(data: [UInt8].bigEndian(head.offset))
                    hasher.update(data: head.hash)
                    count += 1
                    pair = try cursor.next()
                }
            }
            return (Array(hasher.finalize()), count)
        }
    }
}
