import Prometheus
import Synchronization

/// The Prometheus series of one server, kept in a swift-prometheus `PrometheusCollectorRegistry`
/// of its own (not the process-wide `MetricsSystem`: a test process runs many servers, and a
/// host application that embeds SyncLedger has its own registry).
///
/// Two kinds of series live in it. Those counted as things happen (requests and their latency,
/// group commits) are the registry's counters and histograms, updated where they happen. Those
/// whose truth lives elsewhere (the log's sequence, the outbox, open connections, a component's
/// own counts that its status pages also read) are set at scrape time: ``render(_:)`` runs the
/// refresh, which sets them through a ``MetricsScrape``, drops the ones no longer set (a pool
/// that fell back under its cap, a stream target deleted), and emits the registry's text.
///
/// Every family is made through the registry's own `make…(descriptor:…)` calls with its
/// `# HELP` text: swift-metrics' `MetricsFactory` carries no help text, and the registry refuses
/// a family whose help differs between two of its series.
final class MetricsRegistry: Sendable {
    /// The series, and the text `/metrics` answers with.
    let prometheus: PrometheusCollectorRegistry

    enum Series: Sendable {
        case counter(Counter)
        case gauge(Gauge)
    }

    /// The scrape-time series set by the last scrape, by name and labels; held while a scrape
    /// refreshes and emits, so one scrape at a time sets them.
    private let scraped = Mutex<[String: Series]>([:])

    init(prometheus: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.prometheus = prometheus
    }

    private static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    /// The counter `name{labels}` (made on first use).
    func counter(_ name: String, help: String, labels: [(String, String)] = []) -> Counter {
        prometheus.makeCounter(descriptor: Self.descriptor(name, help), labels: labels)
    }

    /// The gauge `name{labels}` (made on first use).
    func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> Gauge {
        prometheus.makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
    }

    /// The histogram `name{labels}` of durations, exposed in seconds (made on first use; every
    /// series of a family has the same buckets).
    func durationHistogram(_ name: String, help: String, labels: [(String, String)] = [], buckets: [Duration]) -> DurationHistogram {
        prometheus.makeDurationHistogram(descriptor: Self.descriptor(name, help), labels: labels, buckets: buckets)
    }

    /// The histogram `name{labels}` of plain values (made on first use).
    func valueHistogram(_ name: String, help: String, labels: [(String, String)] = [], buckets: [Double]) -> ValueHistogram {
        prometheus.makeValueHistogram(descriptor: Self.descriptor(name, help), labels: labels, buckets: buckets)
    }

    /// The Prometheus text exposition (version 0.0.4): runs `refresh` to set the scrape-time
    /// series, unregisters those it did not set this time, and emits every series.
    func render(_ refresh: (inout MetricsScrape) -> Void) -> String {
        scraped.withLock { previous in
            var scrape = MetricsScrape(registry: self)
            refresh(&scrape)
            for (key, series) in previous where scrape.set[key] == nil {
                switch series {
                case .counter(let counter): prometheus.unregisterCounter(counter)
                case .gauge(let gauge): prometheus.unregisterGauge(gauge)
                }
            }
            previous = scrape.set
            return prometheus.emitToString()
        }
    }
}

/// The series one scrape sets from values read at scrape time (see ``MetricsRegistry/render(_:)``).
struct MetricsScrape {
    let registry: MetricsRegistry
    /// What this scrape set, by name and labels.
    fileprivate var set: [String: MetricsRegistry.Series] = [:]

    fileprivate init(registry: MetricsRegistry) {
        self.registry = registry
    }

    private static func key(_ name: String, _ labels: [(String, String)]) -> String {
        var key = name
        for (label, value) in labels { key += "\u{0}\(label)\u{0}\(value)" }
        return key
    }

    /// Sets the gauge `name{labels}` to `value`.
    mutating func gauge(_ name: String, help: String, labels: [(String, String)] = [], _ value: Double) {
        let gauge = registry.gauge(name, help: help, labels: labels)
        gauge.set(to: value)
        set[Self.key(name, labels)] = .gauge(gauge)
    }

    /// Sets the gauge `name{labels}` to `value`.
    mutating func gauge(_ name: String, help: String, labels: [(String, String)] = [], _ value: some BinaryInteger) {
        gauge(name, help: help, labels: labels, Double(value))
    }

    /// Sets the counter `name{labels}` to `total`, a count kept elsewhere that only grows.
    mutating func counter(_ name: String, help: String, labels: [(String, String)] = [], total: some BinaryInteger) {
        let counter = registry.counter(name, help: help, labels: labels)
        // Only scrapes set this counter, one at a time, and the registry emits inside the same
        // scrape: nobody reads it between the reset and the increment.
        counter.reset()
        let amount = Int64(clamping: total)
        if amount > 0 { counter.increment(by: amount) }
        set[Self.key(name, labels)] = .counter(counter)
    }
}
