import Prometheus
import Synchronization
import SyncLedger

/// The server's own series in its ``MetricsRegistry``: requests by operation and status and
/// their latency (counted as requests finish), group commits (counted as the writer commits),
/// and the ledger's figures and the replication, identity and consumer series set at scrape
/// time.
final class ServerMetrics: Sendable {
    /// The latency histogram's upper bounds, in seconds on the wire.
    static let latencyBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(20),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500),
    ]
    /// The group commit size histogram's upper bounds: callers per commit.
    static let groupSizeBuckets: [Double] = (0...10).map { Double(1 << $0) }

    private struct Key: Hashable {
        let operation: String
        let status: Int
    }

    private struct Series {
        var requests: [Key: Counter] = [:]
        var latency: [String: DurationHistogram] = [:]
    }

    /// The registry every series of this server lives in.
    let registry: MetricsRegistry
    /// The registry's series by key, so a request finds its counter without the registry's lock.
    private let series = Mutex(Series())
    private let startSequence: UInt64
    private let replication: ReplicationStatus?
    private let identityThrottle: IdentityThrottle?
    private let identityCapWatch: IdentityCapWatch?

    /// - Parameter ledger: when given, its group commits are counted from now on into
    ///   `syncledger_group_commit_size`.
    init(startSequence: UInt64, registry: MetricsRegistry = MetricsRegistry(), ledger: Ledger? = nil, replication: ReplicationStatus? = nil,
         identityThrottle: IdentityThrottle? = nil, identityCapWatch: IdentityCapWatch? = nil) {
        self.startSequence = startSequence
        self.registry = registry
        self.replication = replication
        self.identityThrottle = identityThrottle
        self.identityCapWatch = identityCapWatch
        if let ledger {
            let sizes = registry.valueHistogram("syncledger_group_commit_size", help: "Callers served per group commit.", buckets: Self.groupSizeBuckets)
            ledger.observeGroupCommits { sizes.record(Double($0)) }
        }
    }

    /// Counts a finished request and its latency.
    func record(operation: String, status: Int, seconds: Double) {
        let (counter, histogram) = series.withLock { s in
            let key = Key(operation: operation, status: status)
            let counter = s.requests[key] ?? {
                let made = registry.counter("syncledger_requests_total", help: "Requests by operation and HTTP status.",
                                            labels: [("operation", operation), ("status", String(status))])
                s.requests[key] = made
                return made
            }()
            let histogram = s.latency[operation] ?? {
                let made = registry.durationHistogram("syncledger_request_duration_seconds", help: "Request latency by operation.",
                                                      labels: [("operation", operation)], buckets: Self.latencyBuckets)
                s.latency[operation] = made
                return made
            }()
            return (counter, histogram)
        }
        counter.increment()
        histogram.record(.nanoseconds(Int64((max(0, seconds) * 1e9).rounded())))
    }

    /// Sets the series read at scrape time: the ledger's sequence and writer counts, the
    /// replication, identity-throttle and identity-cap series, and the message consumers.
    func refresh(ledger: Ledger, into scrape: inout MetricsScrape) {
        let stats = ledger.writerStatistics
        let sequence = (try? ledger.lastSequence) ?? startSequence
        scrape.counter("syncledger_log_entries_appended_total", help: "Log entries appended since this server started.",
                       total: sequence >= startSequence ? sequence - startSequence : 0)
        scrape.gauge("syncledger_log_sequence", help: "The latest commit sequence of the ledger.", sequence)
        scrape.counter("syncledger_commits_total", help: "Group commits (write transactions) by this server.", total: stats.commits)
        scrape.counter("syncledger_fsyncs_total", help: "Group commits made durable with fsync (0 in fast mode).",
                       total: ledger.options.durable ? stats.commits : 0)
        scrape.counter("syncledger_idempotency_waits_total",
                       help: "UpdateRecords calls that waited for an earlier call with their Idempotency-Key still in progress.",
                       total: ledger.idempotencyWaits)
        replication?.refresh(into: &scrape)
        identityThrottle?.refresh(into: &scrape)
        identityCapWatch?.refresh(into: &scrape)
        if let consumers = try? ledger.consumers() {
            for c in consumers {
                let help = "Device messages a consumer passed: acknowledged within their time to live, or expired."
                scrape.counter("syncledger_message_consumer_messages_total", help: help,
                               labels: [("consumer", c.name), ("outcome", "acknowledged")], total: c.acknowledged)
                scrape.counter("syncledger_message_consumer_messages_total", help: help,
                               labels: [("consumer", c.name), ("outcome", "expired")], total: c.expired)
                scrape.gauge("syncledger_message_consumer_cursor", help: "The change-feed position up to which a consumer acknowledged.",
                             labels: [("consumer", c.name)], c.cursor)
            }
        }
    }
}
