import LedgerStorage
import Synchronization

/// A cluster write waiting for its turn: its body, where its outcome goes, and what planning it
/// taught the batcher.
struct QueuedClusterWrite: Sendable {
    /// The write's rules and changes, run on the writer in a nested transaction.
    let run: @Sendable (WriteScope) throws -> any Sendable
    /// Called once with the outcome.
    let finish: @Sendable (Result<any Sendable, any Error>) -> Void
    /// The shard its last plan appended to (nil: not planned yet, or it appended nothing).
    var shard: Int?
    /// How many batches holding it were refused as behind.
    var attempts = 0
    /// Its place in the queue: writes are planned in the order they arrived.
    var arrival: UInt64 = 0
}

/// The queue of this node's cluster writes and the shards with a batch on its way to the log.
///
/// A shard's queued writes are planned one on top of another (each sees what the ones before it
/// appended, though none is committed yet) and published as one message of the shard's log; a
/// shard has at most one batch in flight, so its next batch is planned on the state the last one
/// left. Batches of different shards travel at the same time.
final class ShardBatches: Sendable {
    /// The most writes one batch takes.
    static let maxWrites = 256
    /// Past this many bytes of entry bodies a batch takes no further write (a write larger than
    /// that still travels, alone).
    static let maxBytes = 512 * 1024
    /// The most writes one planning round takes. A round is one job on the writer (every write
    /// of it tried in a nested transaction of one transaction), so this bounds how long it holds
    /// the writer from the shards' tails and local writes; the rest wait for the next round, in
    /// their order of arrival.
    static let maxPerRound = 512

    private struct State {
        var queue: [QueuedClusterWrite] = []
        var inFlight: Set<Int> = []
        var planning = false
        var arrivals: UInt64 = 0

        /// Puts `writes` back in the queue, every write in its place of arrival.
        mutating func putBack(_ writes: [QueuedClusterWrite]) {
            guard !writes.isEmpty else { return }
            queue = (writes + queue).sorted { $0.arrival < $1.arrival }
        }
    }
    private let state = Mutex(State())

    /// Writes queued now, and whether a planner is running (for tests that line writes up).
    var waiting: (queued: Int, planning: Bool) { state.withLock { ($0.queue.count, $0.planning) } }

    /// Queues `write`. - Returns: whether the caller must start a planner (none is running).
    func enqueue(_ write: QueuedClusterWrite) -> Bool {
        state.withLock { state in
            var write = write
            state.arrivals += 1
            write.arrival = state.arrivals
            state.queue.append(write)
            if state.planning { return false }
            state.planning = true
            return true
        }
    }

    /// Takes the queued writes that may be planned now (their shard has no batch in flight, or
    /// is not known yet), the earliest first, at most ``maxPerRound``. When there is none, the
    /// planner stops (and the next ``enqueue(_:)`` or ``landed(_:requeue:)`` starts one): the
    /// answer is then empty.
    func takePlannable() -> (writes: [QueuedClusterWrite], busy: Set<Int>) {
        state.withLock { state in
            var taken: [QueuedClusterWrite] = []
            var kept: [QueuedClusterWrite] = []
            for write in state.queue {
                if taken.count >= Self.maxPerRound || write.shard.map({ state.inFlight.contains($0) }) == true {
                    kept.append(write)
                } else {
                    taken.append(write)
                }
            }
            state.queue = kept
            if taken.isEmpty { state.planning = false }
            return (taken, state.inFlight)
        }
    }

    /// Puts writes a plan left for later back in the queue, in their places of arrival, and
    /// marks `shards` (the plan's batches) in flight.
    func planned(left: [QueuedClusterWrite], inFlight shards: [Int]) {
        state.withLock { state in
            state.putBack(left)
            state.inFlight.formUnion(shards)
        }
    }

    /// `shard`'s batch has landed (or failed): `requeue` (a batch refused as behind) goes back to
    /// the queue, in its places of arrival. - Returns: whether the caller must start a planner.
    func landed(_ shard: Int, requeue: [QueuedClusterWrite]) -> Bool {
        state.withLock { state in
            state.inFlight.remove(shard)
            state.putBack(requeue)
            if state.planning || state.queue.isEmpty { return false }
            state.planning = true
            return true
        }
    }
}

/// What planning a round of queued writes on the writer came to.
struct ShardPlan: Sendable {
    /// Writes done now: those that appended nothing (their other changes committed here), and
    /// refusals planned before any batch began.
    var finished: [(QueuedClusterWrite, Result<any Sendable, any Error>)] = []
    /// The batches, one a shard: each the writes whose entries make up one message of its log.
    var batches: [Batch] = []
    /// Writes left for a later round: of a shard with a batch in flight, a local change after
    /// its shard's batch began, past the batch's size.
    var left: [QueuedClusterWrite] = []

    struct Batch: Sendable {
        var shard: Int
        /// The shard's checkpoint the batch was planned on.
        var after: UInt64
        var entries: [Segment.Entry] = []
        var bytes = 0
        /// Every write planned in the batch, with its outcome (a refusal too: it is only told
        /// once the batch landed, since it was decided on the batch's state), what it keeps
        /// only on this node, and whether it appended entries of the batch (false: a refusal or
        /// a write that changed nothing, planned on the batch's state).
        var members: [(write: QueuedClusterWrite, outcome: Result<any Sendable, any Error>, effects: NodeLocalChanges, appended: Bool)] = []
        var isFull: Bool { members.count >= ShardBatches.maxWrites || bytes >= ShardBatches.maxBytes }
    }
}

/// How one write's trial in a plan ended.
private enum Trial: Sendable {
    /// It appended entries of `shard` (kept in the plan).
    case appended(Int, [Segment.Entry], any Sendable)
    /// It appended nothing and changed nothing, or was refused (nothing kept).
    case unchanged(Result<any Sendable, any Error>)
    /// It appended nothing but changed what only this node keeps (kept, committed with the round).
    case local(any Sendable)
    /// It does not fit this round (another shard, a local change after the batch began, too
    /// big for the batch): nothing kept, planned again later.
    case later(shard: Int?)
}

extension Ledger {
    /// Plans `writes` in order on `txn` (the writer's group transaction): each in a nested
    /// transaction on top of the ones before it of its shard, so a write sees every entry the
    /// earlier writes of its batch appended. Local changes that come before any entry are
    /// committed with the round; each batch's entries are taken out and its plan rolled back, to
    /// be applied only from the shard's log. One round makes a batch for every shard it can:
    /// a pass plans one shard's writes (a write whose shard is known and another is passed over
    /// without running), the next pass the writes left, until a pass makes no progress.
    ///
    /// A write that turns out to append to a shard in `busy` (a batch of it in flight) is left
    /// for later: planned now, it would miss that batch's entries.
    func plan(_ writes: [QueuedClusterWrite], _ txn: Transaction, map: ShardMap, busy: Set<Int>) throws -> ShardPlan {
        var result = ShardPlan()
        var busy = busy
        var pending = writes
        while !pending.isEmpty {
            let (pass, progressed) = try planPass(pending, txn, map: map, busy: busy)
            result.finished += pass.finished
            result.batches += pass.batches
            for batch in pass.batches { busy.insert(batch.shard) }
            pending = pass.left
            if !progressed { break }
        }
        result.left = pending
        return result
    }

    /// One pass of ``plan(_:_:map:busy:)``: stretches of writes, each kept (no batch began: local
    /// changes, refusals) or rolled back whole (a batch began), until a batch is made or the
    /// writes run out. - Returns: what the pass made, and whether it made anything (a batch, or
    /// a write finished).
    private func planPass(_ writes: [QueuedClusterWrite], _ txn: Transaction, map: ShardMap, busy: Set<Int>) throws -> (ShardPlan, Bool) {
        var result = ShardPlan()
        var next = writes[...]
        while !next.isEmpty {
            var stretch = ShardPlan()
            var batch: ShardPlan.Batch?
            var endedByLocalChange = false
            try txn.nested(deciding: { plan -> ((), keep: Bool) in
                while let write = next.first, !endedByLocalChange {
                    next.removeFirst()
                    if let shard = write.shard, busy.contains(shard) {
                        stretch.left.append(write)  // its shard has a batch already: wait for it
                        continue
                    }
                    if let current = batch, current.isFull || write.shard.map({ $0 != current.shard }) == true {
                        stretch.left.append(write)
                        continue
                    }
                    let effects = NodeLocalChanges()
                    switch try trial(write, in: plan, map: map, effects: effects, batch: batch, busy: busy) {
                    case .appended(let shard, let entries, let value):
                        if batch == nil { batch = .init(shard: shard, after: try shardCheckpoint(plan, shard)) }
                        var planned = write
                        planned.shard = shard
                        batch!.entries += entries
                        batch!.bytes += entries.reduce(0) { $0 + $1.body.count }
                        batch!.members.append((planned, .success(value), effects, true))
                    case .unchanged(let outcome):
                        if batch != nil { batch!.members.append((write, outcome, effects, false)) } else { stretch.finished.append((write, outcome)) }
                    case .local(let value):
                        stretch.finished.append((write, .success(value)))
                        endedByLocalChange = true
                    case .later(let shard):
                        var left = write
                        left.shard = shard ?? write.shard
                        stretch.left.append(left)
                    }
                }
                return ((), keep: batch == nil)
            })
            result.finished += stretch.finished
            result.left += stretch.left
            if let batch {
                result.batches.append(batch)
                result.left += next  // one batch a pass; the rest waits for the next pass
                return (result, true)
            }
        }
        return (result, !result.finished.isEmpty)
    }

    /// Runs one write in a nested transaction of `plan` and says what it did; its changes stay
    /// in `plan` only for ``Trial/appended(_:_:_:)`` and ``Trial/local(_:)``.
    private func trial(_ write: QueuedClusterWrite, in plan: Transaction, map: ShardMap, effects: NodeLocalChanges,
                       batch: ShardPlan.Batch?, busy: Set<Int>) throws -> Trial {
        let first = try nextSequence(plan)
        do {
            return try plan.nested(deciding: { inner -> (Trial, keep: Bool) in
                let value = try write.run(WriteScope(txn: inner, nodeLocal: effects))
                let entries = try appendedEntries(inner, from: first)
                guard !entries.isEmpty else {
                    if inner.changes == 0 { return (.unchanged(.success(value)), keep: false) }
                    // A change only this node keeps: it may not sit under a batch's entries,
                    // which are rolled back.
                    return batch == nil ? (.local(value), keep: true) : (.later(shard: nil), keep: false)
                }
                let shards = Set(entries.map { map.shard(of: $0.stream) })
                guard shards.count == 1, let shard = shards.first else {
                    let streams = Set(entries.map(\.stream)).sorted().prefix(4).map(\.description).joined(separator: ", ")
                    throw LedgerError(.invalidParameter, "this operation writes identities of \(shards.count) shards (\(streams)); in cluster mode one operation writes the streams of one identity's shard; nothing was written")
                }
                if busy.contains(shard) { return (.later(shard: shard), keep: false) }
                if let batch, batch.shard != shard || batch.bytes + entries.reduce(0, { $0 + $1.body.count }) > ShardBatches.maxBytes {
                    return (.later(shard: shard), keep: false)
                }
                return (.appended(shard, entries, value), keep: true)
            })
        } catch let error as LMDBError where error == .mapFull || error.isDiskFull || error.isCorruption {
            throw error  // the whole round: grow the map and plan again, or fail together
        } catch {
            return .unchanged(.failure(error))
        }
    }

    /// The entries appended in `txn` from commit sequence `first` on, as segment entries (each
    /// with the hash of the entry before it in its stream).
    func appendedEntries(_ txn: Transaction, from first: UInt64) throws -> [Segment.Entry] {
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
}
