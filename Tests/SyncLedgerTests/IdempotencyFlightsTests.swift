import Synchronization
import Testing
@testable import SyncLedger

/// UpdateRecords calls with one Idempotency-Key run one at a time (`IdempotencyFlights`): a
/// duplicate waits for the original, another key does not. The wire test
/// (test_sync_trigger.py) races two requests through a held SyncTrigger hook.
@Suite struct IdempotencyFlightsTests {
    final class Trace: Sendable {
        let steps = Mutex<[String]>([])
        func add(_ step: String) { steps.withLock { $0.append(step) } }
        var all: [String] { steps.withLock { $0 } }
    }

    /// Waits (yielding) until `done` holds; fails after 120 s (the project's deadline for polls: a loaded machine can stall a task for seconds).
    func until(_ what: String, _ done: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while !done() {
            try #require(ContinuousClock.now < deadline, "timed out waiting for \(what)")
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test func aDuplicateWaitsForTheOriginalAndAnotherKeyDoesNot() async throws {
        let flights = IdempotencyFlights()
        let trace = Trace()
        let (gate, open) = AsyncStream<Void>.makeStream()
        let original = Task {
            try await flights.exclusive([1]) {
                trace.add("original starts")
                for await _ in gate { break }
                trace.add("original ends")
            }
        }
        try await until("the original to start") { trace.all == ["original starts"] }
        let duplicate = Task { try await flights.exclusive([1]) { trace.add("duplicate runs") } }
        try await until("the duplicate to wait") { flights.waits.load(ordering: .relaxed) == 1 }
        try await flights.exclusive([2]) { trace.add("another key runs") }
        #expect(trace.all == ["original starts", "another key runs"])
        open.yield()
        try await original.value
        try await duplicate.value
        #expect(trace.all == ["original starts", "another key runs", "original ends", "duplicate runs"])
        // A failed original lets the next one run, and the key is free afterwards.
        await #expect(throws: LedgerError.self) {
            try await flights.exclusive([3]) { throw LedgerError(.conflict, "the original failed") }
        }
        try await flights.exclusive([3]) { trace.add("after a failure") }
        #expect(trace.all.last == "after a failure" && flights.waits.load(ordering: .relaxed) == 1)
    }
}
