import Logging
import SyncLedger

/// Cognito Streams on a cluster node: each shard's records are delivered by the shard's owner,
/// from its replica, with cursors counted in the shard's own log (``ClusterStreamCursors``), so
/// that when the owner dies the node that takes the shard carries on from the last batch the
/// sink acknowledged. Delivery stays at least once and in order per dataset (a dataset lives in
/// one shard, and a shard's messages are read in order); a batch unacknowledged when its owner
/// died is delivered again by the next one.
///
/// The shard-0 owner (which holds every pool's settings) runs BulkPublish, over its replica of
/// every shard, its progress in the same bucket.
extension StreamService {
    /// One batch per enabled target and owned shard, and a step of each bulk publish when this
    /// node owns the registry shard; whether any cursor moved.
    func clusterPass(_ cluster: ClusterNode, settings: [PoolStreamSetting], watched: UInt64, reference: StreamPayloadReference) async throws -> Bool {
        var progressed = false
        let owned = (0..<cluster.shards.count).filter { cluster.ownership.owns($0) }
        for setting in settings {
            if Task.isCancelled { break }
            if let started = setting.bulkPublishStarted, cluster.ownership.owns(ShardMap.registryShard) {
                do {
                    if try await bulkPublishStep(setting, started: started, reference: reference) { progressed = true }
                } catch let moved as ClusterStreamCursors.Moved {
                    logger.info("streams: a bulk publish's progress was moved by the registry shard's new owner", metadata: ["progress": "\(moved.key)"])
                }
            }
            guard setting.enabled else { continue }  // DISABLED: the cursors stay where they are
            for shard in owned where !Task.isCancelled {
                do {
                    if try await deliver(setting, shard: shard, cluster: cluster, watched: watched, reference: reference) { progressed = true }
                } catch let moved as ClusterStreamCursors.Moved {
                    logger.info("streams: a shard's cursor was moved by its new owner; this node stops delivering it", metadata: ["shard": "\(shard)", "cursor": "\(moved.key)"])
                }
            }
        }
        return progressed
    }

    /// Delivers the next batch of `setting`'s target from `shard`. - Returns: whether its cursor moved.
    private func deliver(_ setting: PoolStreamSetting, shard: Int, cluster: ClusterNode, watched: UInt64, reference: StreamPayloadReference) async throws -> Bool {
        let cursors = cluster.streamCursors
        let pool = setting.pool.rawValue, name = setting.streamName
        let key = pool + "\u{0}" + name + "\u{0}\(shard)"
        var target: StreamTarget
        if let known = try await cursors.target(pool: pool, streamName: name, shard: shard) {
            target = known
        } else {
            // Where this node applied the configuration change that enabled the target: the
            // shard's messages it applied after that are streamed.
            let start = try ledger.shardSequence(shard, appliedThrough: try ledger.streamStartSequence(pool: setting.pool, streamName: name))
            target = try await cursors.start(pool: pool, streamName: name, shard: shard, at: start)
            logger.info("streams: streaming started", metadata: ["pool": "\(pool)", "stream": "\(name)", "shard": "\(shard)", "cursor": "\(target.cursor)"])
        }
        if let b = backoff.withLock({ $0[key] }), b.next > .now { return false }
        let batch = try ledger.shardStreamBatch(pool: setting.pool, shard: shard, after: target.cursor, through: watched, reference: reference)
        guard batch.last > target.cursor else { return false }
        if !batch.records.isEmpty {
            switch try await send(batch.records, pool: pool, name: name, key: key, metadata: ["shard": "\(shard)"]) {
            case .acknowledged: break
            case .noSink: return false
            case .failed(let error):
                try await cursors.update(pool: pool, streamName: name, shard: shard) { t in
                    t.failures += 1
                    t.lastError = String("\(error)".prefix(500))
                }
                return false
            }
        }
        // A node that lost the shard while the sink took the batch leaves the cursor to the
        // new owner (which delivers the batch again: at least once).
        guard cluster.ownership.owns(shard) else { return false }
        try await cursors.update(pool: pool, streamName: name, shard: shard) { t in
            t.cursor = max(t.cursor, batch.last)
            if !batch.records.isEmpty {
                t.delivered += Int64(batch.records.count)
                t.batches += 1
                t.lastError = nil
            }
        }
        return true
    }

    /// Sets a cluster node's stream series at scrape time: per target and shard it owns, the
    /// shard's messages after the cursor and the records delivered.
    func refreshClusterMetrics(_ cluster: ClusterNode, into scrape: inout MetricsScrape) {
        for t in cluster.streamCursors.cached() {
            guard let shard = t.shard, cluster.ownership.owns(shard) else { continue }
            let applied = (try? ledger.shardCheckpoint(shard)) ?? 0
            let labels = [("stream", t.streamName), ("pool", t.pool), ("shard", String(shard))]
            scrape.gauge("syncledger_stream_shard_lag_messages",
                         help: "Messages of a shard applied here after a Cognito stream target's cursor (shards this node owns).",
                         labels: labels, applied > t.cursor ? applied - t.cursor : 0)
            scrape.counter("syncledger_stream_shard_delivered_records_total",
                           help: "Stream records of a shard acknowledged by the sink, by every owner.", labels: labels, total: t.delivered)
        }
    }
}
