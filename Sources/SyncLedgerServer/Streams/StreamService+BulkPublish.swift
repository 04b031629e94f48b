import Foundation
import Logging
import SyncLedger

/// How BulkPublish runs on the server.
public struct BulkPublishOptions: Sendable {
    /// A bulk publish stays `IN_PROGRESS` at least this long (so a test, or an operator, can
    /// watch one; the datasets are published at once, only the completion waits).
    public var minimum: Duration = .zero
    /// Failed deliveries in a row (each after a backoff, 100 ms doubling) after which the bulk
    /// publish ends `FAILED` with the sink's error. 8 gives the sink about 25 s to recover.
    public var attempts = 8

    /// The defaults.
    public init() {}
}

extension StreamService {
    /// One step of `setting`'s pool's bulk publish that started at `started`: the next batch of
    /// datasets (their current state, one record each) delivered to the stream's sink, the
    /// progress kept in the cursor store (``BulkPublishProgress``) so a restart continues after
    /// the last acknowledged batch, and the run completed `SUCCEEDED` after the last dataset.
    ///
    /// It ends `FAILED`, with a message `GetBulkPublishDetails` reports, when streaming is no
    /// longer `ENABLED`, when no sink is configured for the stream, or when the sink failed
    /// `bulkPublish.attempts` times in a row. Delivery is at least once: a crash between the
    /// sink's acknowledgement and the progress' commit sends that batch again.
    /// - Returns: whether anything moved (a batch published, the run completed or failed).
    func bulkPublishStep(_ setting: PoolStreamSetting, started: Timestamp, reference: StreamPayloadReference) async throws -> Bool {
        let pool = setting.pool, name = setting.streamName
        let key = "bulk\u{0}" + pool.rawValue
        guard setting.enabled else {
            let what = name.isEmpty ? "the pool's CognitoStreams was removed" : "streaming to \(name) was disabled"
            return try await endBulkPublish(pool, started: started, failure: "\(what) while the bulk publish ran")
        }
        if let b = backoff.withLock({ $0[key] }), b.next > .now { return false }
        guard let configuration = try ledger.secrets.streamSink(name: name) else {
            return try await endBulkPublish(pool, started: started, failure: "no sink is configured for stream \(name) (syncledger streams configure)")
        }
        guard var (progress, revision) = try await loadBulkProgress(pool, started: started) else { return false }
        let after = try progress.afterIdentity.map { identity in
            StreamName(pool: pool, identity: try IdentityID(identity), dataset: try DatasetName(progress.afterDataset ?? ""))
        }
        let batch = try ledger.bulkPublishBatch(pool: pool, after: after, reference: reference)
        if !batch.records.isEmpty {
            do {
                try await StreamSinks.make(configuration, client: client).deliver(batch.records)
            } catch {
                progress.failures += 1
                revision = try await saveBulkProgress(progress, revision: revision)
                if progress.failures >= bulkPublish.attempts {
                    backoff.withLock { $0[key] = nil }
                    return try await endBulkPublish(pool, started: started, failure: "the sink of stream \(name) failed \(progress.failures) times in a row: \(error)")
                }
                let delay = backOff(key)
                logger.warning("streams: a bulk publish batch failed; it is sent again",
                               metadata: ["pool": "\(pool)", "stream": "\(name)", "in_ms": "\(delay.milliseconds)", "error": "\(error)"])
                return false
            }
            backoff.withLock { $0[key] = nil }
        }
        progress.afterIdentity = batch.last?.identity.rawValue
        progress.afterDataset = batch.last?.dataset.rawValue
        progress.published += Int64(batch.records.count)
        progress.failures = 0
        if batch.last != nil { revision = try await saveBulkProgress(progress, revision: revision) }
        guard batch.finished else { return true }
        let due = started.milliseconds + bulkPublish.minimum.milliseconds
        guard ledger.options.clock().milliseconds >= due else { return !batch.records.isEmpty }
        try await ledger.completeBulkPublish(pool, started: started, caller: "syncledger-server")
        logger.info("streams: bulk publish succeeded", metadata: ["pool": "\(pool)", "stream": "\(name)", "datasets": "\(progress.published)"])
        return true
    }

    /// Where `pool`'s run that started at `started` stands: this node's store, or on a cluster
    /// node the cluster's bucket (with the revision to update it from; the progress moves with
    /// the registry shard's owner). A run not started yet here begins from the first dataset —
    /// on a cluster node once this replica caught up with every shard (until then nil: a
    /// later pass tries again).
    private func loadBulkProgress(_ pool: IdentityPoolID, started: Timestamp) async throws -> (BulkPublishProgress, UInt64)? {
        let fresh = BulkPublishProgress(pool: pool.rawValue, started: started)
        guard let cluster else { return (try store.bulkProgress(pool: pool.rawValue, started: started) ?? fresh, 0) }
        if let stored = try await cluster.streamCursors.bulkProgress(pool: pool.rawValue, started: started) { return stored }
        for shard in 0..<cluster.shards.count {
            guard (try? await cluster.catchUp(shard: shard, ledger: ledger, timeout: .seconds(2))) == true else {
                logger.info("streams: a bulk publish waits for this replica to catch up with a shard", metadata: ["pool": "\(pool)", "shard": "\(shard)"])
                return nil
            }
        }
        return (fresh, 0)
    }

    /// Keeps `progress`; returns the revision to update it from next.
    private func saveBulkProgress(_ progress: BulkPublishProgress, revision: UInt64) async throws -> UInt64 {
        guard let cluster else {
            try store.saveBulkProgress(progress)
            return 0
        }
        return try await cluster.streamCursors.saveBulkProgress(progress, revision: revision)
    }

    /// Ends the run that started at `started` as `FAILED` with `failure`.
    private func endBulkPublish(_ pool: IdentityPoolID, started: Timestamp, failure: String) async throws -> Bool {
        try await ledger.completeBulkPublish(pool, started: started, failure: failure, caller: "syncledger-server")
        logger.warning("streams: bulk publish failed", metadata: ["pool": "\(pool)", "reason": "\(failure)"])
        return true
    }
}
