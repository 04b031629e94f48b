import Foundation
import NATS

/// Runs `operation`, failing with a harness error after `timeout`.
func withTimeout<T: Sendable>(_ what: String, _ timeout: Duration = .seconds(10),
                              _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw HarnessError("timed out after \(timeout): \(what)")
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// Collects values from background readers; tests poll it with `eventually`.
actor Collector<T: Sendable> {
    private(set) var items: [T] = []
    private(set) var failure: String?
    func append(_ item: T) { items.append(item) }
    func fail(_ error: any Error) { failure = "\(error)" }
    var count: Int { items.count }
}

/// Connects a client to `urls`: a short connect time-out, and a request time-out long enough for a loaded CI machine (tests that want a time-out pass their own).
func connectClient(_ urls: [String], requestTimeout: Duration = .seconds(20), name: String? = nil) async throws -> NATSClient {
    var options = NATSClientOptions(servers: urls)
    options.requestTimeout = requestTimeout
    options.connectTimeout = .seconds(2)
    options.reconnectWait = .milliseconds(100)
    options.name = name
    return try await NATSClient.connect(options)
}

/// Waits for an event matching `predicate` on `events`.
func waitForEvent(_ events: AsyncStream<NATSClientEvent>, timeout: Duration = .seconds(15),
                  _ predicate: @escaping @Sendable (NATSClientEvent) -> Bool) async throws -> NATSClientEvent {
    try await withTimeout("client event", timeout) {
        for await e in events where predicate(e) { return e }
        throw HarnessError("event stream ended")
    }
}

/// The UTF-8 bytes of `s`.
func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
