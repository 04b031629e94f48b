import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

@Suite struct WriterTests {
    struct Boom: Error {}

    /// Holds the writer in a job of its own until the returned closure is called: jobs
    /// submitted meanwhile queue up and then share one group.
    private func holdWriter(_ ledger: Ledger) -> @Sendable () -> Void {
        let entered = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        ledger.writer.submit(.init(run: { _ in entered.signal(); gate.wait() }, finish: { _ in }))
        entered.wait()  // the writer runs the holding job: nothing else joins its group
        return { gate.signal() }
    }

    /// Waits (yielding) until `condition` holds, for at most 20 s; returns whether it held.
    private func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(20)
        while !condition() {
            guard ContinuousClock.now < deadline else { return false }
            await Task.yield()
        }
        return true
    }

    /// Submits `jobs` so that they share one group: a first job holds the writer while they queue.
    private func grouped(_ ledger: Ledger, _ jobs: [@Sendable (LedgerStorage.Transaction) throws -> Void]) async -> [(any Error)?] {
        let release = holdWriter(ledger)
        return await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for (i, job) in jobs.enumerated() {
                group.addTask {
                    do { try await ledger.writer.perform(job); return (i, nil) } catch { return (i, error) }
                }
            }
            // Every job queued behind the held writer before it goes on (so they share one group).
            let queued = await eventually { ledger.writer.queuedJobs == jobs.count }
            #expect(queued, "the jobs queued up")
            release()
            var results = [(any Error)?](repeating: nil, count: jobs.count)
            for await (i, error) in group { results[i] = error }
            return results
        }
    }

    @Test func aJobFailingAfterItWroteIsUndoneAloneInItsGroup() async throws {
        try await withLedger { ledger in
            let meta = ledger.schema.meta
            let commitsBefore = ledger.writerStatistics.commits
            let results = await grouped(ledger, [
                { txn in try txn.put(meta, key: Array("a".utf8), value: [1]) },
                { txn in
                    try txn.put(meta, key: Array("b".utf8), value: [2])
                    throw Boom()  // after a write: not a clean refusal
                },
                { txn in
                    throw LedgerError(.conflict, "refused before writing")
                },
                { txn in try txn.put(meta, key: Array("c".utf8), value: [3]) },
            ])
            #expect(results[0] == nil && results[3] == nil)
            #expect(results[1] is Boom)
            #expect((results[2] as? LedgerError)?.code == .conflict)
            #expect(ledger.writerStatistics.largestGroup >= 4, "the jobs shared a group")
            #expect(ledger.writerStatistics.commits - commitsBefore == 2, "the gate and one group")
            let stored = try ledger.read { txn in try ["a", "b", "c"].map { try txn.get(meta, key: Array($0.utf8)) } }
            #expect(stored == [[1], nil, [3]])
        }
    }

    @Test func cleanRefusalsShareTheFastPath() async throws {
        try await withLedger { ledger in
            let meta = ledger.schema.meta
            let results = await grouped(ledger, [
                { txn in try txn.put(meta, key: Array("x".utf8), value: [1]) },
                { _ in throw LedgerError(.limitExceeded, "too big") },
                { txn in try txn.put(meta, key: Array("y".utf8), value: [2]) },
            ])
            #expect(results[0] == nil && results[2] == nil)
            #expect((results[1] as? LedgerError)?.code == .limitExceeded)
            let stored = try ledger.read { txn in try ["x", "y"].map { try txn.get(meta, key: Array($0.utf8)) } }
            #expect(stored == [[1], [2]])
        }
    }

    @Test func aRefusalThrownAfterAWriteIsUndone() async throws {
        // A job that writes and then throws a "clean" refusal would have been committed half
        // done when only a convention kept refusals before the first write.
        try await withLedger { ledger in
            let meta = ledger.schema.meta
            let results = await grouped(ledger, [
                { txn in try txn.put(meta, key: Array("kept".utf8), value: [1]) },
                { txn in
                    try txn.put(meta, key: Array("half".utf8), value: [2])
                    throw LedgerError(.conflict, "refused after writing")
                },
                { txn in try txn.put(meta, key: Array("also".utf8), value: [3]) },
            ])
            #expect(results[0] == nil && results[2] == nil)
            #expect((results[1] as? LedgerError)?.code == .conflict)
            let stored = try ledger.read { txn in try ["kept", "half", "also"].map { try txn.get(meta, key: Array($0.utf8)) } }
            #expect(stored == [[1], nil, [3]], "the refused job's write is gone, its neighbours' stay")
        }
    }

    @Test func sessionCountsSurviveARetriedGroup() async throws {
        try await withLedger { ledger in
            let pool = try IdentityPoolID("test:0")
            for _ in 0..<10 { ledger.countSession(pool: pool) }
            // The flush job shares a group with a job that fails after writing, so the group is
            // run again with each job isolated: the flush must write its counts that second time.
            let release = holdWriter(ledger)
            ledger.flushSessionCounts(wait: false)
            let failing = Task {
                try await ledger.writer.perform { txn in
                    try txn.put(ledger.schema.meta, key: Array("x".utf8), value: [1])
                    throw CancellationError()
                }
            }
            let queued = await eventually { ledger.writer.queuedJobs == 2 }
            #expect(queued, "the flush and the failing job queued up together")
            release()
            _ = await failing.result
            #expect(try await ledger.sessionCount(pool: pool) == 10)
            let stored = try ledger.read { txn in try txn.get(ledger.schema.sessions, key: Array("test:0".utf8))?.bigEndianUInt64() }
            #expect(stored == 10, "the counts reached disk exactly once")
        }
    }

    @Test func aLedgerDroppedWithoutCloseDoesNotDeadlock() async throws {
        // The last reference can go on the writer thread (a job's closure holds the ledger);
        // deinit must not wait there for the writer thread to end.
        for _ in 0..<20 {
            let dir = temporaryPath("drop")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            var ledger: Ledger? = try Ledger(directory: dir)
            let s = stream()
            try await ledger!.put(s, ["k": "v"])
            weak let writer = ledger!.writer
            ledger!.writer.submit(.init(run: { [ledger] _ in _ = ledger }, finish: { _ in }))
            ledger = nil  // the job's closure now holds the last reference, on the writer thread
            // The writer thread ends (and lets go of its writer) once that deinit returned; a
            // deinit waiting for its own thread would keep it forever.
            let ended = await eventually { writer == nil }
            #expect(ended, "the writer thread ended")
        }
    }
}
