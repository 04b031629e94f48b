import Foundation
import NATS
import SyncLedger

/// A device-message consumer of a cluster: its positions in the shards' logs and its counts.
struct ClusterConsumer: Sendable, Codable, Equatable {
    /// Its name.
    var name: String
    /// What it has settled: ``ShardPositions`` text (`c:` and nothing else before its first
    /// acknowledgement that moved a shard).
    var positions: String
    /// Messages acknowledged within their time to live.
    var acknowledged: UInt64
    /// Messages whose time to live passed before it acknowledged them.
    var expired: UInt64
    /// When it first acknowledged.
    var created: Timestamp
    /// When it last acknowledged.
    var updated: Timestamp

    /// A consumer that has settled nothing yet.
    init(name: String, positions: String = ShardPositions().text, acknowledged: UInt64 = 0, expired: UInt64 = 0, created: Timestamp, updated: Timestamp) {
        (self.name, self.positions, self.acknowledged, self.expired, self.created, self.updated) = (name, positions, acknowledged, expired, created, updated)
    }

    /// Its positions, read with `map`. - Throws: `.corruptData` when they do not read.
    func settled(on map: ShardMap) throws -> ShardPositions {
        if positions == ShardPositions().text { return ShardPositions() }
        do {
            return try ShardPositions.parse(positions, from: "a stored consumer's positions", map: map, shards: nil, what: "positions")
        } catch {
            throw LedgerError(.corruptData, "consumer \(name)'s positions in the cluster do not read: \(error)")
        }
    }
}

/// A page of messages for a cluster consumer.
struct ClusterMessagePage: Sendable {
    /// Where it stood when the page was read.
    var positions: ShardPositions
    /// The live messages after those positions, in this node's order, each with its own
    /// position (``ShardPositions`` naming its shard alone).
    var messages: [(message: ReceivedMessage, position: ShardPositions)]
    /// The positions after everything the page examined: acknowledging them settles the page.
    var last: ShardPositions
    /// Messages passed over because they expired.
    var skippedExpired: Int
}

/// The device-message consumers of a cluster, in a replicated KV bucket (`syncledger_consumers`,
/// key `c.<name>` with each `.` of the name written `=`), so that a consumer reads and
/// acknowledges on any node and goes on at another when its node dies. A consumer's cursor is a
/// position per shard, counted in the shard's own log (the same on every node), never a node's
/// change-feed position. Every change is a compare-and-set on the revision read: two nodes
/// acknowledging for one consumer at once both land, each counted once. (`cluster import`
/// writes a single server's consumers here, their cursors turned into such positions.)
final class ClusterConsumers: Sendable {
    let bucket: KeyValue
    let map: ShardMap
    /// The last sequence of a shard's log (to tell a position no node reached yet from one this
    /// node has not reached).
    let lastSequence: @Sendable (Int) async throws -> UInt64

    init(bucket: KeyValue, map: ShardMap, lastSequence: @escaping @Sendable (Int) async throws -> UInt64) {
        self.bucket = bucket
        self.map = map
        self.lastSequence = lastSequence
    }

    /// The bucket key of consumer `name` (a valid name): KV keys may not start or end with a
    /// dot or hold two in a row, and `=` is not in the names' alphabet.
    static func key(_ name: String) -> String { "c." + name.replacingOccurrences(of: ".", with: "=") }

    /// How long a read or acknowledgement waits for this node's replica to reach the positions
    /// it starts from.
    static let replicaWait: Duration = .seconds(3)

    /// The consumer named `name` with the revision it was read at (nil: it never acknowledged).
    func consumer(_ name: String) async throws -> (ClusterConsumer, UInt64)? {
        try MessageConsumer.validate(name: name)
        guard let entry = try await cluster({ try await self.bucket.get(Self.key(name)) }) else { return nil }
        return (try Self.decode(entry.value, name: name), entry.revision)
    }

    /// Every consumer in the cluster, by name.
    func all() async throws -> [ClusterConsumer] {
        try await cluster { try await Self.all(in: self.bucket) }
    }

    /// Every consumer in `bucket`, by name.
    static func all(in bucket: KeyValue) async throws -> [ClusterConsumer] {
        var result: [ClusterConsumer] = []
        for key in try await bucket.keys() where key.hasPrefix("c.") {
            if let entry = try await bucket.get(key) { result.append(try decode(entry.value, name: String(key.dropFirst(2)))) }
        }
        return result.sorted { $0.name < $1.name }
    }

    /// The live messages after consumer `name`'s positions, read from `ledger` (this node's
    /// replica, once it reached them): at most `limit`, at most ten times that many examined
    /// past those positions, and at most 100,000 already settled passed over.
    /// - Throws: 503 when the replica does not reach the consumer's positions in time.
    func page(_ name: String, limit: Int, ledger: Ledger, now: Timestamp) async throws -> ClusterMessagePage {
        let stored = try await consumer(name)
        let positions = try stored?.0.settled(on: map) ?? ShardPositions()
        if let behind = try await positions.waitForReplica(ledger, timeout: Self.replicaWait) {
            throw WireError(type: "ServiceUnavailableException", status: 503,
                            message: "consumer \(name) has settled message \(behind.wanted) of shard \(behind.shard), which this node's replica has not applied yet (it applied \(behind.applied)); retry, here or on another node")
        }
        let map = self.map
        return try await offPool {
            let every = Array(0..<map.count)
            var skipped = 0
            var read: [UInt64: ShardPositions] = [:]
            let walk = try ledger.walkShardMessages(after: try positions.feedStart(on: ledger, over: every), maxRows: limit * 10,
                                                    shardOf: map.shard(of:)) { row in
                // A message no shard's log carried (kept from before this node joined) has no
                // position another node would know: cluster consumers do not see it.
                guard let message = row.message, !positions.covers(shard: row.shard, message: message.sequence, index: row.index) else { return .settled }
                if row.expires < now {
                    skipped += 1
                    return .pass
                }
                guard read.count < limit else { return .stop }
                read[row.sequence] = ShardPositions(positions: [row.shard: .init(sequence: message.sequence, entries: row.index >= message.count ? nil : row.index)])
                return .read
            }
            var last = positions
            _ = try last.pass(through: walk.through, on: ledger, over: every)
            return ClusterMessagePage(positions: positions, messages: walk.messages.compactMap { m in read[m.sequence].map { (m, $0) } },
                                      last: last, skippedExpired: skipped)
        }
    }

    /// Acknowledges for consumer `name` every message up to `through` (in each shard it names;
    /// the others stay), creating the consumer. Each message passed counts as acknowledged, or
    /// as expired when its time to live had passed. Positions at or before the consumer's change
    /// nothing. One call passes at most ``Ledger/maxAcknowledgedPerCall`` messages of the shards
    /// it moves, and walks past at most as many others: beyond them the positions stop short
    /// (the answer says where).
    /// - Throws: 400 for positions past the end of a shard's log (not given by this cluster);
    ///   503 for positions this node's replica does not reach in time, or when other
    ///   acknowledgements kept moving the consumer; LimitExceeded for a new consumer past
    ///   ``MessageConsumer/maxConsumers``.
    func acknowledge(_ name: String, through given: ShardPositions, ledger: Ledger, now: Timestamp) async throws -> ClusterConsumer {
        try MessageConsumer.validate(name: name)
        if let behind = try await given.waitForReplica(ledger, timeout: Self.replicaWait) {
            let last = try await cluster { try await self.lastSequence(behind.shard) }
            guard behind.wanted <= last else {
                throw WireError.invalidParameter("Position names message \(behind.wanted) of shard \(behind.shard), past the end of its log (\(last)): it was not given by this cluster")
            }
            throw WireError(type: "ServiceUnavailableException", status: 503,
                            message: "Position names message \(behind.wanted) of shard \(behind.shard), which this node's replica has not applied yet (it applied \(behind.applied)); retry, here or on another node")
        }
        for _ in 0..<10 {
            let stored = try await consumer(name)
            var consumer = stored?.0 ?? ClusterConsumer(name: name, created: now, updated: now)
            let old = try consumer.settled(on: map)
            guard old.joined(given) != old else { return consumer }
            let map = self.map
            let (target, acknowledged, expired) = try await offPool { try Self.settle(old: old, given: given, ledger: ledger, map: map, now: now) }
            consumer.positions = target.text
            consumer.acknowledged += acknowledged
            consumer.expired += expired
            consumer.updated = now
            let bytes = Array(try JSONEncoder().encode(consumer))
            do {
                if let revision = stored?.1 {
                    _ = try await cluster { try await self.bucket.update(Self.key(name), bytes, lastRevision: revision) }
                } else {
                    let count = try await cluster { try await self.bucket.keys().filter { $0.hasPrefix("c.") }.count }
                    guard count < MessageConsumer.maxConsumers else {
                        throw LedgerError(.limitExceeded, "there are \(count) message consumers; the limit is \(MessageConsumer.maxConsumers)")
                    }
                    _ = try await cluster { try await self.bucket.create(Self.key(name), bytes) }
                }
                return consumer
            } catch Moved.moved {
                continue  // made or moved meanwhile by another acknowledgement: count again from there
            }
        }
        throw WireError(type: "ServiceUnavailableException", status: 503,
                        message: "consumer \(name) kept being moved by other acknowledgements while this one counted; retry")
    }

    /// Where positions `old` end up when `given` is acknowledged, and how many messages that
    /// passed (acknowledged, expired): the shards `given` moves, walked on `ledger` from `old`,
    /// passing at most `limit` messages and walking past at most as many others.
    static func settle(old: ShardPositions, given: ShardPositions, ledger: Ledger, map: ShardMap, now: Timestamp,
                       limit: Int = Ledger.maxAcknowledgedPerCall) throws -> (ShardPositions, UInt64, UInt64) {
        var target = old.joined(given)
        let moved = (0..<map.count).filter { target[$0] != old[$0] }
        let movedSet = Set(moved)
        var end: UInt64 = 0
        for shard in moved {
            let p = target[shard]!
            end = max(end, try ledger.feedPosition(shard: shard, sequence: p.sequence, entries: p.entries ?? Int.max))
        }
        var (acknowledged, expired) = (UInt64(0), UInt64(0))
        let walk = try ledger.walkShardMessages(after: try old.feedStart(on: ledger, over: moved), maxRows: limit,
                                                maxSettled: limit, shardOf: map.shard(of:)) { row in
            guard row.sequence <= end else { return .stop }
            guard let message = row.message, movedSet.contains(row.shard), !old.covers(shard: row.shard, message: message.sequence, index: row.index),
                  target.covers(shard: row.shard, message: message.sequence, index: row.index) else { return .settled }
            if row.expires < now { expired += 1 } else { acknowledged += 1 }
            return .pass
        }
        if walk.through < end {
            // Stopped short at a bound: settle what was walked, no further.
            var reached = old
            _ = try reached.pass(through: walk.through, on: ledger, over: moved)
            target = target.met(reached).joined(old)
        }
        return (target, acknowledged, expired)
    }

    /// A compare-and-set that lost to another node's.
    private enum Moved: Error { case moved }

    /// Runs a call to the cluster's NATS: a refused compare-and-set becomes ``Moved``, and NATS
    /// not answering (time-outs, a lost connection, JetStream errors) 503 — retry.
    private func cluster<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch KeyValueError.keyExists {
            throw Moved.moved
        } catch let error where error.isWrongLastSequence {
            throw Moved.moved
        } catch let error where error is NATSError || error is JetStreamAPIError || error is KeyValueError {
            throw WireError(type: "ServiceUnavailableException", status: 503, message: "the cluster's consumer store did not answer (\(error)); retry")
        }
    }

    private static func decode(_ bytes: [UInt8], name: String) throws -> ClusterConsumer {
        do { return try JSONDecoder().decode(ClusterConsumer.self, from: Data(bytes)) } catch {
            throw LedgerError(.corruptData, "message consumer \(name) in the cluster does not decode: \(error)")
        }
    }
}
