import Synchronization
import SyncLedger

/// Request counters and latency histograms, rendered as Prometheus text.
final class ServerMetrics: Sendable {
    private struct Key: Hashable {
        let operation: String
        let status: Int
    }

    private struct Histogram {
        static let bounds: [Double] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
        var counts = [UInt64](repeating: 0, count: bounds.count)
        var sum = 0.0
        var count: UInt64 = 0

        mutating func observe(_ seconds: Double) {
            for (i, bound) in Self.bounds.enumerated() where seconds <= bound { counts[i] += 1 }
            sum += seconds
            count += 1
        }
    }

    private struct State {
        var requests: [Key: UInt64] = [:]
        var latency: [String: Histogram] = [:]
    }

    private let state = Mutex(State())
    private let startSequence: UInt64
    private let replication: ReplicationStatus?
    private let identityThrottle: IdentityThrottle?
    private let identityCapWatch: IdentityCapWatch?

    init(startSequence: UInt64, replication: ReplicationStatus? = nil, identityThrottle: IdentityThrottle? = nil, identityCapWatch: IdentityCapWatch? = nil) {
        self.startSequence = startSequence
        self.replication = replication
        self.identityThrottle = identityThrottle
        self.identityCapWatch = identityCapWatch
    }

    func record(operation: String, status: Int, seconds: Double) {
        state.withLock { s in
            s.requests[Key(operation: operation, status: status), default: 0] += 1
            s.latency[operation, default: Histogram()].observe(seconds)
        }
    }

    /// The Prometheus text exposition (version 0.0.4).
    func render(ledger: Ledger) -> String {
        let (requests, latency) = state.withLock { ($0.requests, $0.latency) }
        var out = "# HELP syncledger_requests_total Requests by operation and HTTP status.\n# TYPE syncledger_requests_total counter\n"
        for (key, count) in requests.sorted(by: { ($0.key.operation, $0.key.status) < ($1.key.operation, $1.key.status) }) {
            out += "syncledger_requests_total{operation=\"\(key.operation)\",status=\"\(key.status)\"} \(count)\n"
        }
        out += "# HELP syncledger_request_duration_seconds Request latency by operation.\n# TYPE syncledger_request_duration_seconds histogram\n"
        for (operation, h) in latency.sorted(by: { $0.key < $1.key }) {
            for (i, bound) in Histogram.bounds.enumerated() {
                out += "syncledger_request_duration_seconds_bucket{operation=\"\(operation)\",le=\"\(bound)\"} \(h.counts[i])\n"
            }
            out += "syncledger_request_duration_seconds_bucket{operation=\"\(operation)\",le=\"+Inf\"} \(h.count)\n"
            out += "syncledger_request_duration_seconds_sum{operation=\"\(operation)\"} \(h.sum)\n"
            out += "syncledger_request_duration_seconds_count{operation=\"\(operation)\"} \(h.count)\n"
        }
        let stats = ledger.writerStatistics
        let sequence = (try? ledger.lastSequence) ?? startSequence
        out += "# HELP syncledger_log_entries_appended_total Log entries appended since this server started.\n# TYPE syncledger_log_entries_appended_total counter\n"
        out += "syncledger_log_entries_appended_total \(sequence >= startSequence ? sequence - startSequence : 0)\n"
        out += "# HELP syncledger_log_sequence The latest commit sequence of the ledger.\n# TYPE syncledger_log_sequence gauge\n"
        out += "syncledger_log_sequence \(sequence)\n"
        out += "# HELP syncledger_commits_total Group commits (write transactions) by this server.\n# TYPE syncledger_commits_total counter\n"
        out += "syncledger_commits_total \(stats.commits)\n"
        out += "# HELP syncledger_fsyncs_total Group commits made durable with fsync (0 in fast mode).\n# TYPE syncledger_fsyncs_total counter\n"
        out += "syncledger_fsyncs_total \(ledger.options.durable ? stats.commits : 0)\n"
        out += "# HELP syncledger_group_commit_size Callers served per group commit.\n# TYPE syncledger_group_commit_size histogram\n"
        var cumulative: UInt64 = 0
        for (bound, count) in stats.groupSizeBuckets {
            cumulative += count
            out += "syncledger_group_commit_size_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        out += "syncledger_group_commit_size_bucket{le=\"+Inf\"} \(stats.commits)\n"
        out += "syncledger_group_commit_size_sum \(stats.writes)\n"
        out += "syncledger_group_commit_size_count \(stats.commits)\n"
        out += "# HELP syncledger_idempotency_waits_total UpdateRecords calls that waited for an earlier call with their Idempotency-Key still in progress.\n# TYPE syncledger_idempotency_waits_total counter\n"
        out += "syncledger_idempotency_waits_total \(ledger.idempotencyWaits)\n"
        if let replication { out += replication.metrics() }
        if let identityThrottle { out += identityThrottle.renderMetrics() }
        if let identityCapWatch { out += identityCapWatch.renderMetrics() }
        if let consumers = try? ledger.consumers(), !consumers.isEmpty {
            out += "# HELP syncledger_message_consumer_messages_total Device messages a consumer passed: acknowledged within their time to live, or expired.\n# TYPE syncledger_message_consumer_messages_total counter\n"
            for c in consumers {
                out += "syncledger_message_consumer_messages_total{consumer=\"\(c.name)\",outcome=\"acknowledged\"} \(c.acknowledged)\n"
                out += "syncledger_message_consumer_messages_total{consumer=\"\(c.name)\",outcome=\"expired\"} \(c.expired)\n"
            }
            out += "# HELP syncledger_message_consumer_cursor The change-feed position up to which a consumer acknowledged.\n# TYPE syncledger_message_consumer_cursor gauge\n"
            for c in consumers { out += "syncledger_message_consumer_cursor{consumer=\"\(c.name)\"} \(c.cursor)\n" }
        }
        return out
    }
}
