import Crypto
import LedgerStorage

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
    /// of the write, see ``WriteScope``) in the same transaction, applied or not.
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

    /// A write in cluster mode. It joins this node's queue of cluster writes; a planner runs the
    /// queued writes on the writer one on top of another (the same validation and `apply` as
    /// ever, each in a nested transaction that sees what the writes before it appended), takes
    /// the entries of one shard's writes out as one message, rolls the plan back, commits the
    /// message to the shard's log and applies it from there — so this replica, like every other,
    /// holds only what the shard's log acknowledged, and one log round carries many writes. A
    /// write that appends nothing commits locally; one its own rules refuse fails alone.
    ///
    /// `stream`: a stream the write appends to, when the caller knows it: its shard is then known
    /// before the write is planned (a write planned for another shard's batch is run and rolled
    /// back for nothing; a wrong guess costs just that).
    func clusterWrite<T: Sendable>(_ log: any ShardLog, on stream: StreamName? = nil,
                                   _ body: @escaping @Sendable (WriteScope) throws -> T) async throws -> T {
        let shard = stream.map { log.shards.shard(of: $0) }
        let value = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<any Sendable, any Error>) in
            let write = QueuedClusterWrite(run: { scope in try body(scope) }, finish: { continuation.resume(with: $0) }, shard: shard)
            if shardBatches.enqueue(write) { startPlanner(log) }
        }
        guard let typed = value as? T else { preconditionFailure("a cluster write's outcome has the wrong type") }
        return typed
    }

    private func startPlanner(_ log: any ShardLog) {
        Task { await self.planQueuedWrites(log) }
    }

    /// Plans rounds of queued writes until none is left that may be planned now; each round's
    /// batch goes to its shard's log on a task of its own.
    private func planQueuedWrites(_ log: any ShardLog) async {
        let map = log.shards
        while true {
            let (writes, busy) = shardBatches.takePlannable()
            if writes.isEmpty { return }
            let plan: ShardPlan
            do {
                plan = try await writer.perform { [self] txn in try self.plan(writes, txn, map: map, busy: busy) }
            } catch {
                for write in writes { write.finish(.failure(error)) }
                continue
            }
            shardBatches.planned(left: plan.left, inFlight: plan.batches.map(\.shard))
            for (write, outcome) in plan.finished { write.finish(outcome) }
            for batch in plan.batches {
                Task { await self.publish(batch, to: log) }
            }
        }
    }

    /// Commits `batch` to its shard's log and applies it here, then tells its writes; a batch
    /// refused as behind goes back to the queue, to be planned again on the caught-up state —
    /// never half applied.
    private func publish(_ batch: ShardPlan.Batch, to log: any ShardLog) async {
        let shard = batch.shard
        var requeue: [QueuedClusterWrite] = []
        do {
            let segment = Segment(scope: .feed, entries: batch.entries)
            let sequence = try await log.append(segment, shard: shard, after: batch.after)
            // Acknowledged by the shard's log: apply it here, unless the shard's tail already
            // did; what only this node keeps of the writes goes in the same commit.
            let effects = batch.members.flatMap { member -> [(Database, [UInt8], [UInt8])] in
                if case .success = member.outcome { return member.effects.all } else { return [] }
            }
            do {
                _ = try await applyShardMessage(segment, shard: shard, of: log.shards, sequence: sequence, effects: effects)
            } catch {
                // The shard's log holds the batch: its writes are durable, and this replica's
                // tail applies them (a storage failure here is this node's, not the writes').
                // Failing them now would send their callers to retry writes that landed (and
                // meet conflicts); their node-local changes are kept on their own.
                if !effects.isEmpty {
                    _ = try? await writeLocal { txn in for (db, key, value) in effects { try txn.put(db, key: key, value: value) } }
                }
            }
            for member in batch.members { member.write.finish(member.outcome) }
        } catch ShardLogError.behind(let shard, let last) {
            // Someone got there first (another node, or a message this replica had not
            // applied): catch up with the log, then plan the writes again on the new state.
            let caughtUp = (try? await waitForShard(shard, atLeast: last, timeout: .seconds(10))) ?? false
            for member in batch.members {
                var write = member.write
                write.attempts += 1
                if caughtUp, write.attempts < 16 {
                    requeue.append(write)
                } else {
                    write.finish(.failure(LedgerError(.unavailable, "shard \(shard) kept moving or this replica did not catch up with it (log at \(last)); nothing was written, retry")))
                }
            }
        } catch {
            // Nothing of the batch was acknowledged (or its outcome is unknown, which the error
            // says): every write that appended gets the error. A write that appended nothing
            // (a refusal, a no-op) was decided on the batch's state, which never came to be: it
            // is planned again on the state there is.
            for member in batch.members {
                var write = member.write
                write.attempts += 1
                if !member.appended, write.attempts < 16 { requeue.append(write) } else { write.finish(.failure(error)) }
            }
        }
        if shardBatches.landed(shard, requeue: requeue) { startPlanner(log) }
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
