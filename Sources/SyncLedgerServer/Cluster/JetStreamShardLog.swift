import Crypto
import Foundation
import NATS
import Synchronization
import SyncLedger

/// A write that belongs to a shard this node does not own: the HTTP layer forwards the request
/// to the owner (`url`), or answers 503 when no node owns the shard yet.
struct ShardOwnedElsewhere: Error, Sendable {
    let shard: Int
    /// The owner's HTTP API, when a node holds the shard's lease.
    let owner: LeaseHolder?
}

/// The shards this node owns: each with the revision of its lease and until when (on this
/// node's monotonic clock) the lease is surely still its own.
final class ShardOwnership: Sendable {
    struct Owned: Sendable {
        var revision: UInt64
        var validUntil: ContinuousClock.Instant
    }
    private let owned = Mutex<[Int: Owned]>([:])

    /// Whether this node may write `shard` now.
    func owns(_ shard: Int) -> Bool {
        owned.withLock { $0[shard].map { ContinuousClock.now < $0.validUntil } ?? false }
    }
    func get(_ shard: Int) -> Owned? { owned.withLock { $0[shard] } }
    func set(_ shard: Int, _ value: Owned?) { owned.withLock { $0[shard] = value } }
    /// The shards held, valid or not (the lease loop renews or drops them).
    var shards: [Int] { owned.withLock { Array($0.keys).sorted() } }
    /// The shards held whose lease is still valid.
    var valid: [Int] { owned.withLock { d in d.filter { ContinuousClock.now < $0.value.validUntil }.keys.sorted() } }
}

/// Counters a node exposes per shard (`cluster status`, `/metrics`).
final class ShardCounters: Sendable {
    struct Shard: Sendable {
        var appended: UInt64 = 0
        var behind: UInt64 = 0
        var retried: UInt64 = 0
        var applied: UInt64 = 0
        /// Messages skipped because they were not authenticated (``UnauthenticatedShardMessage``).
        var rejected: UInt64 = 0
        /// Fences authenticated but older than this node's own lease (replayed), not obeyed.
        var staleFences: UInt64 = 0
        var lastRejected: String?
        var failure: String?
    }
    private let shards = Mutex<[Int: Shard]>([:])
    func update(_ shard: Int, _ body: (inout Shard) -> Void) { shards.withLock { body(&$0[shard, default: Shard()]) } }
    func get(_ shard: Int) -> Shard { shards.withLock { $0[shard] ?? Shard() } }

    /// Lease values and node records read from the lease bucket that were not authenticated
    /// (ignored: never forwarded to, never counted as a node).
    private let forged = Mutex<UInt64>(0)
    func noteForgedRecord() { forged.withLock { $0 += 1 } }
    var forgedRecords: UInt64 { forged.withLock { $0 } }
}

/// The ledger's ``ShardLog`` on JetStream: shard `n` is stream `SYNCLEDGER_SHARD_n` (file
/// storage, replicated), each message the zstd segment of the entries one write appended,
/// published with the stream's expected last sequence (so two writers can never both append
/// after the same message) and a message id derived from the entries' last hash (so a retry
/// after a timeout is de-duplicated by JetStream).
final class JetStreamShardLog: ShardLog {
    let shards: ShardMap
    private let jetStream: JetStreamContext
    private let ownership: ShardOwnership
    private let leases: KeyValue
    private let counters: ShardCounters
    private let timeout: Duration
    private let nodeID: String
    let sealing: ClusterSealing

    init(shards: ShardMap, nodeID: String, jetStream: JetStreamContext, leases: KeyValue, ownership: ShardOwnership, counters: ShardCounters,
         sealing: ClusterSealing, timeout: Duration) {
        self.shards = shards
        self.sealing = sealing
        self.nodeID = nodeID
        self.jetStream = jetStream
        self.leases = leases
        self.ownership = ownership
        self.counters = counters
        self.timeout = timeout
    }

    func append(_ segment: Segment, shard: Int, after: UInt64) async throws -> UInt64 {
        guard ownership.owns(shard) else {
            throw ShardOwnedElsewhere(shard: shard, owner: try? await holder(of: shard))
        }
        let payload = try segment.encoded()
        let headers = sealing.headers(shard: shard, kind: ClusterNames.entriesKind, node: nodeID, payload: payload)
        // The same prepared write always has the same id; two different writes never do (the
        // last entry's hash chains to everything before it in its stream).
        let messageID = "e-" + Hex.encode(segment.entries.last?.hash ?? [])
        let deadline = ContinuousClock.now + timeout
        var lastFailure: (any Error)?
        while ContinuousClock.now < deadline {
            // Fenced or expired while retrying: stop; whatever was published is in the log and
            // reaches this replica through the tail like any other message.
            guard ownership.owns(shard) else { break }
            do {
                let ack = try await jetStream.publish(ClusterNames.subject(shard), payload: payload, headers: headers, messageID: messageID,
                                                      expectedLastSequence: after, expectedStream: ClusterNames.stream(shard), timeout: .seconds(2))
                counters.update(shard) { $0.appended += 1 }
                return ack.sequence
            } catch let error as JetStreamAPIError where error.isWrongLastSequence {
                // Either another message got in first, or this very message did on an earlier
                // try whose answer was lost: read the stream to tell (by its bytes and MAC, not
                // only its id, which anyone on the bus could copy).
                if let stored = try? await jetStream.getMessage(stream: ClusterNames.stream(shard), sequence: after + 1),
                   stored.headers?["Nats-Msg-Id"] == messageID, stored.payload == payload,
                   stored.headers?[ClusterSealing.macHeader] == headers[ClusterSealing.macHeader] {
                    counters.update(shard) { $0.appended += 1 }
                    return after + 1
                }
                counters.update(shard) { $0.behind += 1 }
                let last = try await lastSequence(shard)
                throw ShardLogError.behind(shard: shard, last: max(last, after + 1))
            } catch let error as JetStreamAPIError {
                throw LedgerError(.unavailable, "shard \(shard)'s log refused the write: \(error); nothing was written")
            } catch {
                // A timeout, a lost connection, no responders (a leader election): the publish
                // may or may not have landed. Publish again: the message id de-duplicates it.
                lastFailure = error
                counters.update(shard) { $0.retried += 1 }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        // The publish may still be committed (a quorum back, a leader elected): the outcome is
        // unknown, as after any timeout; a client reads before it writes again.
        throw LedgerError(.unavailable, "shard \(shard)'s log did not acknowledge the write in time (\(lastFailure.map { "\($0)" } ?? "lease lost")); it may still be applied: read the dataset before writing again")
    }

    /// The last sequence of shard `n`'s stream.
    func lastSequence(_ shard: Int) async throws -> UInt64 {
        guard let info = try await jetStream.streamInfo(ClusterNames.stream(shard)) else {
            throw LedgerError(.unavailable, "shard \(shard)'s stream \(ClusterNames.stream(shard)) does not exist")
        }
        return info.state.lastSeq
    }

    /// Who holds shard `n`'s lease now, if anyone: only a lease value authenticated by the
    /// cluster's key counts (a forged one is counted and ignored, so no request is ever
    /// forwarded to a URL that did not come from a node).
    func holder(of shard: Int) async throws -> LeaseHolder? {
        guard let entry = try await leases.get(ClusterNames.lease(shard)) else { return nil }
        guard let holder = sealing.openLease(entry.value, shard: shard) else {
            counters.noteForgedRecord()
            return nil
        }
        return holder
    }
}
