import Foundation
import HTTPTypes
import Synchronization
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

extension MetricsRegistry {
    /// The text of a registry of its own with what `refresh` sets (a component's series alone).
    static func text(_ refresh: (inout MetricsScrape) -> Void) -> String { MetricsRegistry().render(refresh) }
}

extension ServerMetrics {
    /// The server's series with the ledger's scrape-time ones set (`/metrics` less the transport's
    /// and the event streams').
    func text(ledger: Ledger) -> String { registry.render { refresh(ledger: ledger, into: &$0) } }
}

/// A strict reader of the Prometheus text exposition format (version 0.0.4): what a scraper
/// would refuse, it throws.
struct Exposition {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// A sample: its name, its labels in order, its value.
    struct Sample {
        let name: String
        let labels: [(String, String)]
        let value: Double
        func label(_ name: String) -> String? { labels.first { $0.0 == name }?.1 }
    }

    /// Family name → type, in the order declared.
    private(set) var types: [String: String] = [:]
    private(set) var samples: [Sample] = []

    init(_ text: String) throws {
        guard text.isEmpty || text.hasSuffix("\n") else { throw Failure(description: "the text does not end with a newline") }
        var current: String?  // the family whose lines are being read
        var finished = Set<String>()  // families whose lines ended (they may not come back)
        var series = Set<String>()
        var helped = Set<String>()
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().enumerated() {
            let line = String(line)
            func fail(_ what: String) -> Failure { Failure(description: "line \(number + 1) \(what): \(line)") }
            func enter(_ family: String) throws {
                guard family != current else { return }
                if let current { finished.insert(current) }
                guard !finished.contains(family) else { throw fail("comes back to family \(family) after another family's lines") }
                current = family
            }
            if line.hasPrefix("#") {
                let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
                guard parts.count >= 3, parts[0] == "#", ["HELP", "TYPE"].contains(parts[1]) else { continue }  // a plain comment
                let name = parts[2]
                guard Self.isMetricName(name) else { throw fail("declares a bad metric name") }
                try enter(name)
                if parts[1] == "TYPE" {
                    guard parts.count == 4, ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[3]) else { throw fail("has a bad type") }
                    guard types[name] == nil else { throw fail("declares \(name)'s type twice") }
                    guard !samples.contains(where: { Self.family(of: $0.name, types: types) == name }) else { throw fail("comes after \(name)'s samples") }
                    types[name] = parts[3]
                } else {
                    guard helped.insert(name).inserted else { throw fail("gives \(name) a second HELP") }
                    guard types[name] == nil else { throw fail("gives HELP after TYPE") }
                }
                continue
            }
            let sample = try Self.parseSample(line, fail: fail)
            let family = Self.family(of: sample.name, types: types)
            guard let type = types[family] else { throw fail("has a sample of \(sample.name), whose family has no TYPE line before it") }
            if type == "counter" || type == "gauge" { guard sample.name == family else { throw fail("has a suffix on a \(type)") } }
            try enter(family)
            let key = sample.name + "{" + sample.labels.sorted { $0.0 < $1.0 }.map { "\($0.0)=\($0.1)" }.joined(separator: ",") + "}"
            guard series.insert(key).inserted else { throw fail("repeats the series \(key)") }
            guard Set(sample.labels.map(\.0)).count == sample.labels.count else { throw fail("repeats a label") }
            if type == "counter" && !(sample.value >= 0) { throw fail("has a negative counter") }
            samples.append(sample)
        }
        try checkHistograms()
    }

    /// The family a sample belongs to: a histogram's `_bucket`, `_sum` and `_count` are its own.
    static func family(of name: String, types: [String: String]) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if types[base] == "histogram" || types[base] == "summary" { return base }
        }
        return name
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`
    static func isMetricName(_ name: String) -> Bool { isName(name, colon: true) }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`
    static func isLabelName(_ name: String) -> Bool { isName(name, colon: false) }

    private static func isName(_ name: String, colon: Bool) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { c in
            ("a"..."z").contains(c) || ("A"..."Z").contains(c) || ("0"..."9").contains(c) || c == "_" || (colon && c == ":")
        }
    }

    /// `name{label="value",...} value` or `name value` (no timestamps here).
    static func parseSample(_ line: String, fail: (String) -> Failure) throws -> Sample {
        var rest = Substring(line)
        let name = String(rest.prefix { $0 != "{" && $0 != " " })
        guard isMetricName(name) else { throw fail("has a bad metric name") }
        rest = rest.dropFirst(name.count)
        var labels: [(String, String)] = []
        if rest.first == "{" {
            rest = rest.dropFirst()
            while rest.first != "}" {
                let label = String(rest.prefix { $0 != "=" })
                guard isLabelName(label) else { throw fail("has a bad label name \(label)") }
                rest = rest.dropFirst(label.count)
                guard rest.hasPrefix("=\"") else { throw fail("has a label without a quoted value") }
                rest = rest.dropFirst(2)
                var value = ""
                while true {
                    guard let c = rest.first else { throw fail("ends inside a label value") }
                    rest = rest.dropFirst()
                    if c == "\"" { break }
                    if c == "\\" {
                        guard let escaped = rest.first else { throw fail("ends inside an escape") }
                        rest = rest.dropFirst()
                        switch escaped {
                        case "\\": value.append("\\")
                        case "\"": value.append("\"")
                        case "n": value.append("\n")
                        default: throw fail("has a bad escape \\\(escaped)")
                        }
                    } else {
                        guard c != "\n" else { throw fail("has a raw newline in a label value") }
                        value.append(c)
                    }
                }
                labels.append((label, value))
                if rest.first == "," { rest = rest.dropFirst() } else { guard rest.first == "}" else { throw fail("has no comma between labels") } }
            }
            rest = rest.dropFirst()
        }
        guard rest.first == " " else { throw fail("has no space before the value") }
        let text = String(rest.dropFirst())
        let value: Double
        switch text {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default:
            guard !text.isEmpty, !text.contains(" "), let parsed = Double(text) else { throw fail("has a bad value") }
            value = parsed
        }
        return Sample(name: name, labels: labels, value: value)
    }

    /// Each histogram series: buckets by rising bound, cumulative, ending with `+Inf` equal to
    /// `_count`, and a `_sum`.
    private func checkHistograms() throws {
        for (family, type) in types where type == "histogram" {
            var byLabels: [String: [Sample]] = [:]
            for sample in samples where sample.name.hasPrefix(family + "_") && Self.family(of: sample.name, types: types) == family {
                let key = sample.labels.filter { $0.0 != "le" }.map { "\($0.0)=\($0.1)" }.joined(separator: ",")
                byLabels[key, default: []].append(sample)
            }
            for (labels, series) in byLabels {
                let buckets = series.filter { $0.name == family + "_bucket" }
                let bounds = try buckets.map { b -> Double in
                    guard let le = b.label("le") else { throw Failure(description: "\(family){\(labels)} has a bucket without le") }
                    guard let bound = le == "+Inf" ? .infinity : Double(le) else { throw Failure(description: "\(family){\(labels)} has le=\(le)") }
                    return bound
                }
                guard bounds == bounds.sorted(), bounds.last == .infinity, Set(bounds).count == bounds.count else {
                    throw Failure(description: "\(family){\(labels)}: bounds \(bounds)")
                }
                guard buckets.map(\.value) == buckets.map(\.value).sorted() else { throw Failure(description: "\(family){\(labels)}: buckets not cumulative") }
                guard let count = series.first(where: { $0.name == family + "_count" }), count.value == buckets.last?.value,
                      series.contains(where: { $0.name == family + "_sum" }) else {
                    throw Failure(description: "\(family){\(labels)}: no _count equal to the +Inf bucket, or no _sum")
                }
            }
        }
    }
}

/// `/metrics` is the server's swift-prometheus registry, and its whole text is valid exposition.
@Suite struct MetricsExpositionTests {
    /// Scrapes `/metrics` in process after requests of several operations and statuses, writes,
    /// and a stream refusal, and reads every line of it.
    @Test func theWholeScrapeIsValidExposition() async throws {
        try await withLedger { ledger in
            let server = InProcessRouteTests.Harness(ledger)
            let records = InProcessRouteTests.records
            for _ in 0..<3 {
                try await server.request(.get, records, signedBy: nil) { #expect($0.status == .forbidden) }
                try await server.request(.get, "/health", signedBy: nil) { #expect($0.status == .ok) }
                try await server.request(.get, records, signedBy: server.admin) { #expect($0.status == .ok) }
            }
            try await server.request(.get, "/events", signedBy: nil) { #expect($0.status == .forbidden) }
            try await ledger.put(stream("notes"), ["k": "v"])
            let scraped = Mutex("")
            try await server.request(.get, "/metrics", signedBy: server.admin) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "text/plain; version=0.0.4")
                scraped.withLock { $0 = String(buffer: response.body) }
            }
            let text = scraped.withLock { $0 }
            let exposition = try Exposition(text)
            // The families of the server, the transport and the event streams, with their types.
            for (name, type) in [("syncledger_requests_total", "counter"), ("syncledger_request_duration_seconds", "histogram"),
                                 ("syncledger_log_sequence", "gauge"), ("syncledger_commits_total", "counter"),
                                 ("syncledger_http_connections", "gauge"), ("syncledger_http_refusals_total", "counter"),
                                 ("syncledger_event_streams", "gauge"), ("syncledger_events_sent_total", "counter")] {
                #expect(exposition.types[name] == type, "\(name)")
            }
            #expect(text.contains("syncledger_requests_total{operation=\"ListRecords\",status=\"403\"} 3\n"))
            #expect(text.contains("syncledger_requests_total{operation=\"ListRecords\",status=\"200\"} 3\n"))
            #expect(text.contains("# HELP syncledger_requests_total Requests by operation and HTTP status.\n"))
            // The latency buckets are the same bounds as ever, in seconds.
            let bounds = exposition.samples.filter { $0.name == "syncledger_request_duration_seconds_bucket" && $0.label("operation") == "ListRecords" }
                .compactMap { $0.label("le") }
            #expect(bounds == ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf"])
            let count = exposition.samples.first { $0.name == "syncledger_request_duration_seconds_count" && $0.label("operation") == "ListRecords" }
            #expect(count?.value == 6)
            let sequence = try ledger.lastSequence
            #expect(exposition.samples.first { $0.name == "syncledger_log_sequence" }?.value == Double(sequence))
            #expect(sequence > 0)
            // Group commits are counted as the writer commits them, with the same bounds.
            let sizes = exposition.samples.filter { $0.name == "syncledger_group_commit_size_bucket" }.compactMap { $0.label("le") }
            #expect(sizes == (0...10).map { "\(Double(1 << $0))" } + ["+Inf"])
            #expect(exposition.samples.first { $0.name == "syncledger_group_commit_size_count" }?.value ?? 0 >= 1)
        }
    }

    /// A series read at scrape time that is no longer set leaves the text; label values with
    /// quotes, backslashes and newlines are escaped; a counter set at scrape time shows its total.
    @Test func scrapeTimeSeriesComeAndGoAndAreEscaped() throws {
        let registry = MetricsRegistry()
        let odd = "a\"b\\c\nd"
        let first = registry.render { scrape in
            scrape.gauge("t_gauge", help: "A gauge.", labels: [("name", odd)], 5)
            scrape.gauge("t_gauge", help: "A gauge.", labels: [("name", "gone")], 1)
            scrape.counter("t_total", help: "A counter.", total: 7)
        }
        let parsed = try Exposition(first)
        #expect(parsed.samples.contains { $0.name == "t_gauge" && $0.label("name") == odd && $0.value == 5 })
        #expect(first.contains("t_total 7\n"))
        let second = registry.render { scrape in
            scrape.gauge("t_gauge", help: "A gauge.", labels: [("name", odd)], 6)
            scrape.counter("t_total", help: "A counter.", total: 9)
        }
        let again = try Exposition(second)
        #expect(!second.contains("gone"))
        #expect(again.samples.contains { $0.name == "t_gauge" && $0.value == 6 })
        #expect(second.contains("t_total 9\n"))
        // Nothing set: the families leave the text entirely.
        #expect(registry.render { _ in } == "")
    }

    /// The reader refuses what a scraper would (so the test above can fail).
    @Test func theReaderRefusesBadExposition() {
        for bad in ["x 1\n", "# TYPE x counter\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n", "# TYPE x counter\nx{a=1} 1\n",
                    "# TYPE x gauge\nx one\n", "# TYPE x counter\n# TYPE y gauge\ny 1\nx 1\n# TYPE x counter\n",
                    "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                    "# TYPE x counter\nx 1"] {
            #expect(throws: Exposition.Failure.self, "\(bad)") { try Exposition(bad) }
        }
        #expect(throws: Never.self) { try Exposition("# HELP x An x.\n# TYPE x counter\nx{a=\"q\\\"\"} 1\n") }
    }
}
