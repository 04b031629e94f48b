import AsyncHTTPClient
import Foundation
import Logging
import NIOPosix
import SyncLedger
import Synchronization

/// Cognito Streams delivery: for every pool whose `CognitoStreams` is `ENABLED`, each sync (one
/// log entry of a user's dataset) goes, in feed order and so in order per dataset, to the sink
/// configured for its `StreamName` (`syncledger streams configure`).
///
/// Like push delivery it reads the change feed after the commit and never holds a write; its
/// cursors (``StreamCursorStore``, `DATA/streams`) move only after the sink acknowledged a
/// batch, so delivery is at least once, with repeats only of a batch unacknowledged at a crash.
/// A failed batch is sent again, the same records from the same cursor, after an exponential
/// backoff (100 ms doubling to 30 s); nothing is skipped. `DISABLED` pauses a target (its cursor
/// stays); a target seen `ENABLED` for the first time starts at the configuration change that
/// enabled it. Only a leader runs it; on a cluster node it delivers the shards the node owns,
/// with cursors that move with them (`ClusterStreamDelivery.swift`). It also runs BulkPublish
/// (`StreamService+BulkPublish.swift`).
final class StreamService: Sendable {
    let ledger: Ledger
    let store: StreamCursorStore
    let client: HTTPClient
    let logger: Logger
    let backoff = Mutex<[String: (next: ContinuousClock.Instant, delay: Duration)]>([:])
    private let warned = Mutex<Set<String>>([])
    /// The pools' stream settings as last read, the feed position read just before them, and when.
    private let settings = Mutex<(list: [PoolStreamSetting], watched: UInt64, read: ContinuousClock.Instant)?>(nil)
    static let initialBackoff: Duration = .milliseconds(100)
    static let maxBackoff: Duration = .seconds(30)

    let bulkPublish: BulkPublishOptions
    /// The cluster this node belongs to (nil: a single node).
    let cluster: ClusterNode?
    /// The server's base URL for payload references (`--public-url`, or the listening address
    /// once known); nothing is delivered before it is known, so no large record goes inline.
    let publicURL = Mutex<String?>(nil)
    /// How long a payload URL stays valid (an S3 presigned URL's longest, 7 days).
    static let payloadURLLifetime: Int64 = 7 * 86_400_000

    init(ledger: Ledger, logger: Logger, bulkPublish: BulkPublishOptions = BulkPublishOptions(), cluster: ClusterNode? = nil) throws {
        self.ledger = ledger
        self.cluster = cluster
        self.bulkPublish = bulkPublish
        self.logger = logger
        self.store = try StreamCursorStore(directory: ledger.directory + "/streams", durable: ledger.options.durable)
        self.client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                                 configuration: HTTPClient.Configuration(timeout: .init(connect: .seconds(10), read: .seconds(30))))
    }

    /// Stops the HTTP client (after ``run()`` returned).
    func shutdown() { try? client.syncShutdown() }

    /// Delivers until the task is cancelled: a pass after every commit, and at least every
    /// second (a sink configured by the CLI, a backoff that ran out).
    func run() async {
        while !Task.isCancelled {
            let seen = ledger.commitSignal.generation
            var progressed = false
            do { progressed = try await pass() } catch {
                if Task.isCancelled { return }
                logger.error("streams: cannot read the log or the cursors", metadata: ["error": "\(error)"])
            }
            if progressed { continue }
            let now = ContinuousClock.now
            let soonest = backoff.withLock { $0.values.map(\.next).min() }
            let wait = min(.seconds(1), max(.milliseconds(1), (soonest ?? now + .seconds(1)) - now))
            _ = await ledger.commitSignal.wait(after: seen, timeout: wait)
        }
    }

    /// Records past 1 MB go by reference to `GET /streams/payload/<token>` of this server.
    var payloadReference: StreamPayloadReference? {
        guard let base = publicURL.withLock({ $0 }) else { return nil }
        let ledger = self.ledger
        return StreamPayloadReference { _, sequence, bulk in
            let expires = Timestamp(milliseconds: ledger.options.clock().milliseconds + Self.payloadURLLifetime)
            return base + StreamPayloadRoute.prefix + ledger.streamPayloadToken(sequence: sequence, bulk: bulk, expires: expires)
        }
    }

    /// One batch per enabled target, and one of each running bulk publish; whether any
    /// cursor moved.
    private func pass() async throws -> Bool {
        guard let reference = payloadReference else { return false }
        let (settings, watched) = try currentSettings()
        if let cluster { return try await clusterPass(cluster, settings: settings, watched: watched, reference: reference) }
        var progressed = false
        for setting in settings {
            if Task.isCancelled { break }
            if let started = setting.bulkPublishStarted, try await bulkPublishStep(setting, started: started, reference: reference) { progressed = true }
            let pool = setting.pool.rawValue, name = setting.streamName
            let key = pool + "\u{0}" + name
            var target: StreamTarget
            if let known = try store.target(pool: pool, streamName: name) {
                target = known
            } else {
                guard setting.enabled else { continue }
                target = try store.start(pool: pool, streamName: name, at: try ledger.streamStartSequence(pool: setting.pool, streamName: name))
                logger.info("streams: streaming started", metadata: ["pool": "\(pool)", "stream": "\(name)", "cursor": "\(target.cursor)"])
            }
            guard setting.enabled else { continue }
            if let b = backoff.withLock({ $0[key] }), b.next > .now { continue }
            let batch = try ledger.streamBatch(pool: setting.pool, after: target.cursor, reference: reference)
            guard batch.last > target.cursor else { continue }
            if !batch.records.isEmpty {
                switch try await send(batch.records, pool: pool, name: name, key: key) {
                case .acknowledged: break
                case .noSink: continue
                case .failed(let error):
                    try? store.recordFailure(pool: pool, streamName: name, reason: "\(error)")
                    continue
                }
            }
            target = try store.acknowledge(pool: pool, streamName: name, through: batch.last, records: batch.records.count)
            progressed = true
        }
        return progressed
    }

    /// What sending a batch to its sink came to.
    enum Sent {
        /// The sink acknowledged every record.
        case acknowledged
        /// No sink is configured for the stream (this node's secret store): the records wait.
        case noSink
        /// The sink failed: the same batch is sent again after the target's backoff.
        case failed(any Error)
    }

    /// Sends `records` to stream `name`'s sink, for the target `key`: no sink is warned of once;
    /// a failure backs the target off and is logged (with `metadata`); an acknowledgement ends
    /// the backoff.
    func send(_ records: [StreamRecord], pool: String, name: String, key: String, metadata: Logger.Metadata = [:]) async throws -> Sent {
        guard let configuration = try ledger.secrets.streamSink(name: name) else {
            if warned.withLock({ $0.insert(key).inserted }) {
                logger.warning("streams: no sink is configured for the stream; its records wait (syncledger streams configure)",
                               metadata: ["pool": "\(pool)", "stream": "\(name)"])
            }
            return .noSink
        }
        warned.withLock { _ = $0.remove(key) }
        do {
            try await StreamSinks.make(configuration, client: client).deliver(records)
        } catch {
            let delay = backOff(key)
            logger.warning("streams: delivery failed; the batch is sent again",
                           metadata: metadata.merging(["pool": "\(pool)", "stream": "\(name)", "records": "\(records.count)",
                                                       "in_ms": "\(delay.milliseconds)", "error": "\(error)"]) { $1 })
            return .failed(error)
        }
        backoff.withLock { $0[key] = nil }
        return .acknowledged
    }

    /// Backs `key` off (100 ms, doubling to 30 s); returns the delay.
    func backOff(_ key: String) -> Duration {
        backoff.withLock { state -> Duration in
            let delay = state[key].map { min($0.delay * 2, Self.maxBackoff) } ?? Self.initialBackoff
            state[key] = (.now + delay, delay)
            return delay
        }
    }

    /// The pools' stream settings: read again when an entry of a pool's configuration stream
    /// was committed since the last read (a batch ends before such an entry, so the next one is
    /// read under the new settings), and at least every 30 seconds; otherwise kept, so a commit
    /// does not cost a read of every pool's configuration. With them, the feed position they
    /// hold for: every configuration change applied up to it is in them.
    private func currentSettings() throws -> (list: [PoolStreamSetting], watched: UInt64) {
        let last = try ledger.lastSequence
        if let cached = settings.withLock({ $0 }), ContinuousClock.now - cached.read < .seconds(30) {
            var position = cached.watched
            var changed = false
            while position < last, !changed {
                let summaries = try ledger.commitSummaries(after: position, limit: 4096)
                guard let tail = summaries.last else { break }
                changed = summaries.contains { $0.isSystem && $0.stream.dataset.rawValue == "configuration" }
                position = tail.sequence
            }
            if !changed {
                settings.withLock { $0?.watched = position }
                return (cached.list, position)
            }
        }
        let list = try ledger.poolStreamSettings()  // after `last`: a change committed later is seen next time
        settings.withLock { $0 = (list, last, .now) }
        return (list, last)
    }

    /// Sets the stream series at scrape time: per target, its lag in feed entries and what it
    /// delivered.
    func refreshMetrics(into scrape: inout MetricsScrape) {
        if let cluster { return refreshClusterMetrics(cluster, into: &scrape) }
        guard let targets = try? store.all() else { return }
        let last = (try? ledger.lastSequence) ?? 0
        for t in targets {
            let labels = [("stream", t.streamName), ("pool", t.pool)]
            scrape.gauge("syncledger_stream_lag_entries", help: "Change-feed entries after a Cognito stream target's cursor.",
                         labels: labels, last > t.cursor ? last - t.cursor : 0)
            scrape.counter("syncledger_stream_delivered_records_total", help: "Stream records acknowledged by the sink.", labels: labels, total: t.delivered)
            scrape.counter("syncledger_stream_delivered_batches_total", help: "Stream batches acknowledged by the sink.", labels: labels, total: t.batches)
            scrape.counter("syncledger_stream_failures_total", help: "Stream delivery attempts that failed (and were retried).", labels: labels, total: t.failures)
        }
    }
}
