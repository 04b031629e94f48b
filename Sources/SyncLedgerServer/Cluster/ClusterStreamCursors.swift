import Crypto
import Foundation
import NATS
import Synchronization
import SyncLedger

/// The Cognito stream cursors of a cluster, in a replicated KV bucket (`syncledger_streams`)
/// so that they move with a shard's owner: one per stream target (pool and `StreamName`) and
/// shard, counting that shard's log (``StreamTarget/shard``), and one BulkPublish progress per
/// pool. Only a shard's owner delivers its records and moves its cursors; every update is a
/// compare-and-set on the revision it read, so a node that lost the shard (a paused owner whose
/// lease ran out) cannot move a cursor its successor already moved.
///
/// Cursors are cached while this node owns the shard; a takeover (``forget(shard:)``) or a
/// refused update drops the cache, and the next read comes from the bucket.
final class ClusterStreamCursors: Sendable {
    let bucket: KeyValue
    private let cache = Mutex<[String: (target: StreamTarget, revision: UInt64)]>([:])

    init(bucket: KeyValue) { self.bucket = bucket }

    /// A cursor update was refused: another node moved the cursor since this one read it.
    struct Moved: Error, CustomStringConvertible {
        let key: String
        var description: String { "stream cursor \(key) was moved by another node" }
    }

    /// The bucket key of a target's cursor in `shard`: KV keys allow few characters, so the
    /// pool and stream name go in as a hash (the value names them).
    static func key(pool: String, streamName: String, shard: Int) -> String {
        "t.\(shard).\(digest(pool + "\u{0}" + streamName))"
    }

    static func bulkKey(pool: String) -> String { "b.\(digest(pool))" }

    static func digest(_ text: String) -> String {
        Hex.encode(SHA256.hash(data: Array(text.utf8)).prefix(16))
    }

    /// The target's cursor in `shard`, nil when it has none yet.
    func target(pool: String, streamName: String, shard: Int) async throws -> StreamTarget? {
        let key = Self.key(pool: pool, streamName: streamName, shard: shard)
        if let cached = cache.withLock({ $0[key] }) { return cached.target }
        guard let entry = try await bucket.get(key) else { return nil }
        let target = try Self.decode(entry.value, key: key)
        cache.withLock { $0[key] = (target, entry.revision) }
        return target
    }

    /// Makes the target's cursor in `shard` at `cursor` unless one exists (made meanwhile by
    /// another node: that one is returned).
    func start(pool: String, streamName: String, shard: Int, at cursor: UInt64) async throws -> StreamTarget {
        let key = Self.key(pool: pool, streamName: streamName, shard: shard)
        var target = StreamTarget(pool: pool, streamName: streamName, cursor: cursor)
        target.shard = shard
        do {
            let revision = try await bucket.create(key, Array(try JSONEncoder().encode(target)))
            cache.withLock { $0[key] = (target, revision) }
            return target
        } catch KeyValueError.keyExists {
            cache.withLock { $0[key] = nil }
            guard let existing = try await self.target(pool: pool, streamName: streamName, shard: shard) else { throw Moved(key: key) }
            return existing
        }
    }

    /// Changes the target's cursor in `shard` from the revision last read.
    /// - Throws: ``Moved`` when another node changed it since (the cache is dropped).
    @discardableResult
    func update(pool: String, streamName: String, shard: Int, _ change: (inout StreamTarget) -> Void) async throws -> StreamTarget {
        let key = Self.key(pool: pool, streamName: streamName, shard: shard)
        guard var target = try await self.target(pool: pool, streamName: streamName, shard: shard),
              let revision = cache.withLock({ $0[key]?.revision }) else { throw Moved(key: key) }
        change(&target)
        do {
            let next = try await bucket.update(key, Array(try JSONEncoder().encode(target)), lastRevision: revision)
            cache.withLock { $0[key] = (target, next) }
            return target
        } catch let error where error.isWrongLastSequence {
            cache.withLock { $0[key] = nil }
            throw Moved(key: key)
        }
    }

    /// Drops what is cached of `shard`'s cursors (this node has just taken it: its previous
    /// owner may have moved them).
    func forget(shard: Int) {
        let prefix = "t.\(shard)."
        cache.withLock { cache in cache = cache.filter { !$0.key.hasPrefix(prefix) } }
        if shard == ShardMap.registryShard { cache.withLock { cache in cache = cache.filter { !$0.key.hasPrefix("b.") } } }
    }

    /// The cursors cached now: those of the shards this node delivered since it took them.
    func cached() -> [StreamTarget] { cache.withLock { $0.values.map(\.target) } }

    /// Every cursor in the bucket (for status and metrics), by pool, stream name and shard.
    func all() async throws -> [StreamTarget] {
        var result: [StreamTarget] = []
        for key in try await bucket.keys() where key.hasPrefix("t.") {
            if let entry = try await bucket.get(key) { result.append(try Self.decode(entry.value, key: key)) }
        }
        return result.sorted { ($0.pool, $0.streamName, $0.shard ?? 0) < ($1.pool, $1.streamName, $1.shard ?? 0) }
    }

    // MARK: BulkPublish progress

    /// The progress of `pool`'s bulk publish that started at `started` (nil: none yet, or
    /// another run's), with the revision to update it from.
    func bulkProgress(pool: String, started: Timestamp) async throws -> (BulkPublishProgress, UInt64)? {
        guard let entry = try await bucket.get(Self.bulkKey(pool: pool)) else { return nil }
        let progress: BulkPublishProgress
        do { progress = try JSONDecoder().decode(BulkPublishProgress.self, from: Data(entry.value)) } catch {
            throw LedgerError(.corruptData, "the bulk publish progress of pool \(pool) in the cluster does not decode: \(error)")
        }
        return progress.started == started ? (progress, entry.revision) : nil
    }

    /// Stores `progress` if the stored one is still at `revision`; with revision 0 (this node
    /// has not stored any of this run), over nothing or another run's progress only.
    /// - Throws: ``Moved`` when another node stored progress of this run since.
    func saveBulkProgress(_ progress: BulkPublishProgress, revision: UInt64) async throws -> UInt64 {
        let key = Self.bulkKey(pool: progress.pool)
        let bytes = Array(try JSONEncoder().encode(progress))
        var expected = revision
        if revision == 0, let existing = try await bucket.entry(key) {
            if existing.operation == .put, (try? JSONDecoder().decode(BulkPublishProgress.self, from: Data(existing.value)))?.started == progress.started {
                throw Moved(key: key)  // another owner of the registry shard started this run
            }
            expected = existing.revision
        }
        do {
            return try await bucket.update(key, bytes, lastRevision: expected)
        } catch let error where error.isWrongLastSequence {
            throw Moved(key: key)
        }
    }

    static func decode(_ bytes: [UInt8], key: String) throws -> StreamTarget {
        do { return try JSONDecoder().decode(StreamTarget.self, from: Data(bytes)) } catch {
            throw LedgerError(.corruptData, "stream cursor \(key) in the cluster does not decode: \(error)")
        }
    }
}
