import Foundation
import Testing
import SyncLedgerTestSupport
import LedgerStorage
@testable import SyncLedger

@Suite struct WriterTests {
    struct Boom: Error {}

    /// Submits `jobs` so that they share one group: a first job holds the writer while they queue.
    private func grouped(_ ledger: Ledger, _ jobs: [@Sendable (LedgerStorage.Transaction) throws -> Void]) async -> [(any Error)?] {
        let gate = DispatchSemaphore(value: 0)
        ledger.writer.submit(.init(run: { _ in gate.wait() }, finish: { _ in }))
        return await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for (i, job) in jobs.enumerated() {
                group.addTask {
                    do { try await ledger.writer.perform(job); return (i, nil) } catch { return (i, error) }
                }
            }
            try? await Task.sleep(for: .milliseconds(100))  // let every job queue up behind the gate
            gate.signal()
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
}
