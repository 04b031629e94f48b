import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// ``CommitSignal``: the broadcast the group-commit writer sends after every commit, which the
/// leader's long-polled feed waits on.
@Suite struct CommitSignalTests {
    /// Yields until `condition` holds (the other task got as far as it should).
    private func until(_ condition: () -> Bool) async {
        while !condition() { await Task.yield() }
    }

    @Test func aSignalAfterTheGenerationSeenAnswersAtOnce() async {
        let signal = CommitSignal()
        let seen = signal.generation
        signal.signal()
        let start = ContinuousClock.now
        #expect(await signal.wait(after: seen, timeout: .seconds(30)))
        #expect(ContinuousClock.now - start < .seconds(1))
        #expect(signal.waiting == 0)
    }

    @Test func aWaiterSleepsUntilTheNextSignalAndAllWake() async {
        let signal = CommitSignal()
        let seen = signal.generation
        let waiters = (0..<3).map { _ in Task { await signal.wait(after: seen, timeout: .seconds(30)) } }
        await until { signal.waiting == 3 }
        signal.signal()
        for waiter in waiters { #expect(await waiter.value) }
        #expect(signal.waiting == 0)
    }

    @Test func theWaitEndsAtItsTimeoutWithoutASignal() async {
        let signal = CommitSignal()
        let start = ContinuousClock.now
        #expect(await signal.wait(after: signal.generation, timeout: .milliseconds(200)) == false)
        let elapsed = ContinuousClock.now - start
        // Ended by its timeout, not at once; the upper bound only rules out a wait that outlives
        // it by far. Swift Testing runs the suites on the cooperative pool, two threads here, and
        // CPU-heavy suites beside it delayed the timer's task by 7 s once and by 52 s in a run
        // with a loaded machine: the bound is set for such a run, not for the usual 0.2 s.
        #expect(elapsed >= .milliseconds(190) && elapsed < .seconds(180))
        #expect(signal.waiting == 0)
    }

    @Test func cancellingTheWaiterEndsItsWait() async {
        let signal = CommitSignal()
        let waiter = Task { await signal.wait(after: signal.generation, timeout: .seconds(60)) }
        await until { signal.waiting == 1 }
        let start = ContinuousClock.now
        waiter.cancel()
        #expect(await waiter.value == false)
        #expect(ContinuousClock.now - start < .seconds(5))
        #expect(signal.waiting == 0)
    }

    @Test func everyCommitOfTheLedgerSignals() async throws {
        try await withLedger { ledger in
            let seen = ledger.commitSignal.generation
            let waiter = Task { await ledger.commitSignal.wait(after: seen, timeout: .seconds(30)) }
            try await ledger.put(stream(), ["k": "v"])
            #expect(await waiter.value)
            #expect(ledger.commitSignal.generation > seen)
        }
    }
}
