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
}

/// A page of messages for a cluster consumer.
struct ClusterMessagePage: Sendable {
    /// The consumer as stored (nil: it never acknowledged).
    var consumer: ClusterConsumer?
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
/// key `c.<name>`), so that a consumer reads and acknowledges on any node and goes on at
/// another when its node dies. A consumer's cursor is a position per shard, counted in the
/// shard's own log (the same on every node), never a node's change-feed position. Every change
/// is a compare-and-set on the revision read: two nodes acknowledging for one consumer at once
/// both land, each counted once.
final class ClusterConsumers: Sendable {
    let bucket: KeyValue
    let map: ShardMap

    init(bucket: KeyValue, map: ShardMap) {
        self.bucket = bucket
        self.map = map
    }

    static func key(_ name: String) -> String { "c.\(name)" }

    /// How long a read or acknowledgement waits for this node's replica to reach the positions
    /// it starts from.
    static let replicaWait: Duration = .seconds(3)

    /// The consumer named `name` with the revision it was read at (nil: it never acknowledged).
    func consumer(_ name: String) async throws -> (ClusterConsumer, UInt64)? {
        try MessageConsumer.validate(name: name)
        guard let entry = try await bucket.get(Self.key(name)) else { return nil }
        return (try decode(entry.value, name: name), entry.revision)
    }

    /// Every consumer, by name.
    func all() async throws -> [ClusterConsumer] {
        var result: [ClusterConsumer] = []
        for key in try await bucket.keys() where key.hasPrefix("c.") {
            if let entry = try await bucket.get(key) { result.append(try decode(entry.value, name: String(key.dropFirst(2)))) }
        }
        return result.sorted { $0.name < $1.name }
    }

    /// The live messages after consumer `name`'s positions, read from `ledger` (this node's
    /// replica, once it reached them): at most `limit`, and at most ten times that many examined.
    /// - Throws: 503 when the replica does not reach the consumer's positions in time.
    func page(_ name: String, limit: Int, ledger: Ledger, now: Timestamp) async throws -> ClusterMessagePage {
        let stored = try await consumer(name)
        let positions = try stored.map { try positionsOf($0.0) } ?? ShardPositions()
        if let behind = try await wait(ledger, for: positions) {
            throw WireError(type: "ServiceUnavailableException", status: 503,
                            message: "consumer \(name) has settled message \(behind.wanted) of shard \(behind.shard), which this node's replica has not applied yet (it applied \(behind.applied)); retry, here or on another node")
        }
        let every = Array(0..<map.count)
        var skipped = 0
        var read: [UInt64: ShardPositions] = [:]
        let walk = try ledger.walkShardMessages(after: try positions.feedStart(on: ledger, over: every), maxRows: limit * 10,
                                                shardOf: map.shard(of:)) { row in
            // A message no shard's log carried (kept from before this node joined) has no
            // position another node would know: cluster consumers do not see it.
            guard let message = row.message, !positions.covers(shard: row.shard, message: message.sequence, index: row.index) else { return .pass }
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
        return ClusterMessagePage(consumer: stored?.0, positions: positions, messages: walk.messages.compactMap { m in read[m.sequence].map { (m, $0) } },
                                  last: last, skippedExpired: skipped)
    }

    /// Acknowledges for consumer `name` every message up to `through` (in each shard it names;
    /// the others stay), creating the consumer. Each message passed counts as acknowledged, or
    /// as expired when its time to live had passed. Positions at or before the consumer's change
    /// nothing. One call passes at most ``Ledger/maxAcknowledgedPerCall`` messages: beyond them
    /// the positions stop short (the answer says where).
    /// - Throws: 400 for positions this node's replica does not reach in time (not sent by this
    ///   cluster, or this node lags); LimitExceeded for a new consumer past
    ///   ``MessageConsumer/maxConsumers``; 503 when other acknowledgements kept moving it.
    func acknowledge(_ name: String, through given: ShardPositions, ledger: Ledger, now: Timestamp) async throws -> ClusterConsumer {
        try MessageConsumer.validate(name: name)
        if let behind = try await wait(ledger, for: given) {
            throw WireError.invalidParameter("Position names message \(behind.wanted) of shard \(behind.shard), which this node's replica has not reached (it applied \(behind.applied)): it was not given by this cluster, or this node lags; retry")
        }
        for _ in 0..<10 {
            let stored = try await consumer(name)
            var consumer = stored?.0 ?? ClusterConsumer(name: name, positions: "c:", acknowledged: 0, expired: 0, created: now, updated: now)
            let old = try positionsOf(consumer)
            var target = old.joined(given)
            guard target != old else { return consumer }
            let moved = (0..<map.count).filter { target[$0] != old[$0] }
            var end: UInt64 = 0
            for shard in moved {
                let p = target[shard]!
                end = max(end, try ledger.feedPosition(shard: shard, sequence: p.sequence, entries: p.entries ?? Int.max))
            }
            var (acknowledged, expired) = (UInt64(0), UInt64(0))
            let movedSet = Set(moved)
            let walk = try ledger.walkShardMessages(after: try old.feedStart(on: ledger, over: moved), maxRows: Ledger.maxAcknowledgedPerCall,
                                                    shardOf: map.shard(of:)) { row in
                guard row.sequence <= end else { return .stop }
                if let message = row.message, movedSet.contains(row.shard), !old.covers(shard: row.shard, message: message.sequence, index: row.index),
                   target.covers(shard: row.shard, message: message.sequence, index: row.index) {
                    if row.expires < now { expired += 1 } else { acknowledged += 1 }
                }
                return .pass
            }
            if walk.through < end {
                // Stopped short at the bound: settle what was walked, no further.
                var reached = old
                _ = try reached.pass(through: walk.through, on: ledger, over: moved)
                target = target.met(reached).joined(old)
            }
            consumer.positions = target.text
            consumer.acknowledged += acknowledged
            consumer.expired += expired
            consumer.updated = now
            let bytes = Array(try JSONEncoder().encode(consumer))
            do {
                if let (_, revision) = stored {
                    _ = try await bucket.update(Self.key(name), bytes, lastRevision: revision)
                } else {
                    let count = try await bucket.keys().filter { $0.hasPrefix("c.") }.count
                    guard count < MessageConsumer.maxConsumers else {
                        throw LedgerError(.limitExceeded, "there are \(count) message consumers; the limit is \(MessageConsumer.maxConsumers)")
                    }
                    _ = try await bucket.create(Self.key(name), bytes)
                }
                return consumer
            } catch KeyValueError.keyExists {
                continue  // made meanwhile by another node: read it and move it from there
            } catch let error where error.isWrongLastSequence {
                continue  // moved meanwhile by another acknowledgement: count again from there
            }
        }
        throw WireError(type: "ServiceUnavailableException", status: 503,
                        message: "consumer \(name) kept being moved by other acknowledgements while this one counted; retry")
    }

    /// Waits (``replicaWait`` at most) until this node's replica applied `positions`; the first
    /// shard still behind, if any.
    private func wait(_ ledger: Ledger, for positions: ShardPositions) async throws -> (shard: Int, wanted: UInt64, applied: UInt64)? {
        let deadline = ContinuousClock.now + Self.replicaWait
        for item in try positions.ahead(of: ledger) {
            _ = try await ledger.waitForShard(item.shard, atLeast: item.wanted, timeout: max(.zero, deadline - .now))
        }
        return try positions.ahead(of: ledger).first
    }

    private func positionsOf(_ consumer: ClusterConsumer) throws -> ShardPositions {
        if consumer.positions == "c:" { return ShardPositions() }
        do {
            return try ShardPositions.parse(consumer.positions, from: "a stored consumer's positions", map: map, shards: nil, what: "positions")
        } catch {
            throw LedgerError(.corruptData, "consumer \(consumer.name)'s positions in the cluster do not read: \(error)")
        }
    }

    private func decode(_ bytes: [UInt8], name: String) throws -> ClusterConsumer {
        do { return try JSONDecoder().decode(ClusterConsumer.self, from: Data(bytes)) } catch {
            throw LedgerError(.corruptData, "message consumer \(name) in the cluster does not decode: \(error)")
        }
    }
}
