import LedgerStorage
import Synchronization

/// The replicated log a cluster node commits every write to before it applies it: one ordered
/// log per shard, each message a ``Segment`` of the entries one write appended. The server's
/// JetStream binding implements it; the ledger only needs these two promises:
///
/// - ``append(_:shard:after:)`` returns only once the message is durable in the shard's log
///   (replicated by a quorum and on disk), as the message right after `after` — never after
///   some other message a concurrent writer got in first;
/// - the messages of a shard reach every node in order, to ``Ledger/applyShardMessage(_:shard:of:sequence:)``.
public protocol ShardLog: Sendable {
    /// How identities map to shards.
    var shards: ShardMap { get }

    /// Makes `segment` the message after `after` in `shard`'s log, durably, and returns its
    /// sequence (`after + 1`).
    ///
    /// - Throws: ``ShardLogError/behind(shard:last:)`` when the log already holds messages
    ///   after `after` (this replica had not applied them, or another node wrote); a
    ///   ``LedgerError`` `.unavailable` when this node does not own the shard, was fenced, or
    ///   the log did not answer in time. Nothing was acknowledged then.
    func append(_ segment: Segment, shard: Int, after: UInt64) async throws -> UInt64

    /// The sequence of the last message in `shard`'s log (0: none), as the log holds it now.
    func lastSequence(_ shard: Int) async throws -> UInt64
}

/// Why a shard log refused an append that may be retried.
public enum ShardLogError: Error, Sendable, Equatable {
    /// The shard's log holds messages up to `last`, beyond what the write was prepared on:
    /// apply them, then prepare the write again.
    case behind(shard: Int, last: UInt64)
}

/// The shard log a ledger is bound to, if any (cluster mode).
final class ClusterBinding: Sendable {
    private let log = Mutex<(any ShardLog)?>(nil)
    var current: (any ShardLog)? { log.withLock { $0 } }
    func bind(_ shardLog: (any ShardLog)?) { log.withLock { $0 = shardLog } }
}

/// What applying a shard's message did.
public enum ShardApplyOutcome: Sendable, Equatable {
    /// Its entries were appended (or were all present already); the shard's checkpoint moved to it.
    case applied(MergeReport)
    /// The shard's checkpoint was already at or past it: nothing changed.
    case alreadyApplied
}

/// The transaction a write runs in, and where the changes go that only the node which ran it
/// keeps beside the log (an UpdateRecords call's idempotency answer). Handed to the write's
/// body, never found through a task-local.
struct WriteScope {
    /// The writer's transaction (in cluster mode, a plan that is rolled back once its entries
    /// are taken out).
    let txn: Transaction
    /// In cluster mode, the node-local changes of this write: written again, in the commit that
    /// applies the write's batch from its shard's log.
    let nodeLocal: NodeLocalChanges?

    /// Writes a change only this node keeps: in the transaction (later writes of the same plan
    /// see it) and, in cluster mode, into ``nodeLocal`` too.
    func keepOnThisNode(_ db: Database, key: [UInt8], value: [UInt8]) throws {
        try txn.put(db, key: key, value: value)
        nodeLocal?.put(db, key: key, value: value)
    }
}

/// The node-local changes of one cluster write (see ``WriteScope``).
final class NodeLocalChanges: Sendable {
    private let puts = Mutex<[(Database, [UInt8], [UInt8])]>([])
    func put(_ db: Database, key: [UInt8], value: [UInt8]) { puts.withLock { $0.append((db, key, value)) } }
    var all: [(Database, [UInt8], [UInt8])] { puts.withLock { $0 } }
}
