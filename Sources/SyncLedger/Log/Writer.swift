import Foundation
import LedgerStorage
import Synchronization

/// The single writer thread: collects waiting callers into one LMDB write transaction and one
/// commit (group commit). Each caller's work runs in a nested transaction, so one caller's
/// failure (a conflict, a limit) undoes only its own changes.
final class GroupCommitWriter: @unchecked Sendable {
    // @unchecked Sendable: `queue` and `closed` are only touched with `condition` locked; the
    // environment is Sendable; jobs are @Sendable closures.

    struct Job: Sendable {
        /// The caller's work, run in its nested transaction on the writer thread.
        let run: @Sendable (Transaction) throws -> Void
        /// Called once on the writer thread: nil after the group committed, else the error.
        let finish: @Sendable ((any Error)?) -> Void
    }

    /// Statistics a benchmark or metrics endpoint may read.
    struct Stats: Sendable {
        var commits: UInt64 = 0
        var jobs: UInt64 = 0
        var largestGroup: Int = 0
        /// Groups by size: index i counts groups of at most 2^i callers (and more than 2^(i-1)).
        var groupSizes = [UInt64](repeating: 0, count: 11)
    }

    private let environment: Environment
    private let condition = NSCondition()
    private var queue: [Job] = []
    private var closed = false
    private var statsStore = Stats()
    /// Told each commit's group size after it committed (on the writer thread); only touched
    /// with `condition` locked.
    private var groupObservers: [@Sendable (Int) -> Void] = []
    private let finished = DispatchSemaphore(value: 0)
    /// Jobs queued, readable without the lock: the writer polls it for a moment before it
    /// sleeps (see ``idleSpin``).
    private let pending = Atomic<Int>(0)
    /// How long the writer keeps polling for the next job after a commit of one job before it
    /// blocks on the condition. A lone caller just released usually comes back within this;
    /// finding its job by polling spares the futex wake-up of the writer and its sleep, which
    /// on a virtual machine cost more than a commit without fsync. The writer yields its core
    /// while polling, so a caller waiting for CPU gets it. Zero in durable mode, where the
    /// fsync dwarfs the wake-up and polling measured slower.
    let idleSpin: Duration
    /// The most callers one transaction takes.
    let maxGroup: Int
    /// Signalled after every commit, for tasks waiting for new entries (see ``CommitSignal``).
    let commitSignal = CommitSignal()

    init(environment: Environment, maxGroup: Int = 1024, gatherWindow: Duration = .zero, idleSpin: Duration = .zero) {
        self.environment = environment
        self.maxGroup = maxGroup
        self.gatherWindow = gatherWindow
        self.idleSpin = idleSpin
        let thread = Thread { [self] in self.loop() }
        thread.name = "syncledger-writer"
        thread.start()
    }

    /// Calls `observer` with the number of callers of every group committed from now on.
    func observeGroups(_ observer: @escaping @Sendable (Int) -> Void) {
        condition.lock()
        groupObservers.append(observer)
        condition.unlock()
    }

    var stats: Stats {
        condition.lock()
        defer { condition.unlock() }
        return statsStore
    }

    /// Queues `job`. After ``close()`` the job finishes at once with a `.closed` error.
    func submit(_ job: Job) {
        condition.lock()
        if closed {
            condition.unlock()
            job.finish(LedgerError(.closed, "the ledger is closed"))
            return
        }
        queue.append(job)
        pending.add(1, ordering: .releasing)
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` in its own nested transaction of the next group and returns its result once
    /// the group is committed (on disk in durable mode).
    func perform<T: Sendable>(_ body: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let box = ResultBox<T>()
            submit(Job(run: { txn in box.value = try body(txn) }, finish: { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: box.value!) }
            }))
        }
    }

    /// ``perform(_:)`` for synchronous callers: blocks the calling thread until committed.
    ///
    /// - Warning: Never call this from the writer thread (from inside a job).
    func performBlocking<T: Sendable>(_ body: @escaping @Sendable (Transaction) throws -> T) throws -> T {
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        submit(Job(run: { txn in box.value = try body(txn) }, finish: { error in
            box.error = error
            done.signal()
        }))
        done.wait()
        if let error = box.error { throw error }
        return box.value!
    }

    /// Finishes the queued jobs, then stops the thread. Later submissions fail with `.closed`.
    ///
    /// Waits for the thread to finish, unless it is called on the writer thread itself (the last
    /// reference to a ledger can be dropped there, by a job's closure): the loop then ends after
    /// the current group, and waiting would deadlock.
    func close() {
        condition.lock()
        if closed {
            condition.unlock()
            return
        }
        closed = true
        condition.signal()
        condition.unlock()
        if isWriterThread { return }
        finished.wait()
    }

    /// Whether the calling thread is this writer's thread.
    var isWriterThread: Bool { Thread.current.threadDictionary[Self.threadKey] as? ObjectIdentifier == ObjectIdentifier(self) }
    private static let threadKey = "syncledger.writer"

    /// Jobs queued and not yet taken by a group (for tests that line jobs up).
    var queuedJobs: Int { pending.load(ordering: .acquiring) }

    /// How long a durable group waits for the callers of the previous group to come back.
    let gatherWindow: Duration

    private func loop() {
        Thread.current.threadDictionary[Self.threadKey] = ObjectIdentifier(self)
        // Callers served by the last commit: they are likely to write again soon.
        var lastGroup = 1
        while true {
            // A lone caller's next job comes right back: poll for it rather than sleep. Larger
            // groups leave their callers busy on every core, so the writer gets out of the way.
            if idleSpin > .zero, lastGroup == 1, pending.load(ordering: .acquiring) == 0 {
                let deadline = ContinuousClock.now + idleSpin
                while pending.load(ordering: .acquiring) == 0, ContinuousClock.now < deadline { sched_yield() }
            }
            condition.lock()
            while queue.isEmpty && !closed { condition.wait() }
            if queue.isEmpty && closed {
                condition.unlock()
                finished.signal()
                return
            }
            // Durable commits cost an fsync each, so a group that is still filling up is worth
            // a short wait: callers just released by the previous commit are on their way back.
            // A lone caller (lastGroup 1) never waits.
            if gatherWindow > .zero, queue.count < lastGroup {
                let deadline = Date().addingTimeInterval(Double(gatherWindow.components.attoseconds) / 1e18)
                while queue.count < lastGroup, !closed, condition.wait(until: deadline) {}
            }
            let group = Array(queue.prefix(maxGroup))
            lastGroup = group.count
            queue.removeFirst(group.count)
            pending.subtract(group.count, ordering: .relaxed)
            condition.unlock()
            commit(group)
        }
    }

    /// Thrown inside a group transaction when a job failed after it may have written: the
    /// group is aborted and run again with each job in its own nested transaction.
    private struct RetryIsolated: Error {}

    private func commit(_ group: [Job]) {
        var outcomes = [(any Error)?](repeating: nil, count: group.count)
        do {
            do {
                try environment.write { txn in
                    // Fast path: every job runs straight in the group's transaction. A job that
                    // refuses (conflict, limit, not found, bad input) before its first write leaves
                    // nothing behind — the transaction counts its changes, so this is checked, not
                    // assumed. LMDB charges a nested transaction for copying the parent's
                    // dirty-page list, which grows with the group; this path avoids that cost.
                    for (i, job) in group.enumerated() {
                        let changesBefore = txn.changes
                        do {
                            try job.run(txn)
                            outcomes[i] = nil
                        } catch let error as LedgerError where error.isCleanRefusal && txn.changes == changesBefore {
                            outcomes[i] = error  // refused before it wrote anything: nothing to undo
                        } catch let error as LMDBError where error == .mapFull {
                            throw error  // grow the map and run the group again
                        } catch {
                            // It may have written (the transaction counted changes, or the error
                            // is not a refusal): only a nested transaction can undo it alone.
                            if group.count == 1 { throw error }
                            throw RetryIsolated()
                        }
                    }
                }
            } catch is RetryIsolated {
                // Slow path: one job failed in a way that may have left writes. Each job now gets
                // its own nested transaction, so that failure undoes only its own changes.
                try environment.write { txn in
                    for (i, job) in group.enumerated() {
                        do {
                            try txn.nested(job.run)
                            outcomes[i] = nil
                        } catch let error as LMDBError where error == .mapFull || error.isDiskFull || error.isCorruption {
                            throw error  // the whole group: grow and retry, or fail together
                        } catch {
                            outcomes[i] = error
                        }
                    }
                }
            }
        } catch {
            var mapped = Self.mapStorageError(error)
            if let lmdb = error as? LMDBError, lmdb == .io, environment.isOutOfSpace() {
                mapped = LedgerError(.diskFull, "the disk is full (a short write); nothing of this write was stored", underlying: lmdb)
            }
            for i in outcomes.indices where outcomes[i] == nil || group.count == 1 { outcomes[i] = mapped }
        }
        condition.lock()
        statsStore.commits += 1
        statsStore.jobs += UInt64(group.count)
        statsStore.largestGroup = max(statsStore.largestGroup, group.count)
        let bucket = min(Int.bitWidth - (group.count - 1).leadingZeroBitCount, statsStore.groupSizes.count - 1)
        statsStore.groupSizes[bucket] += 1
        let observers = groupObservers
        condition.unlock()
        for observer in observers { observer(group.count) }
        commitSignal.signal()
        for (job, outcome) in zip(group, outcomes) { job.finish(outcome) }
    }

    /// Turns LMDB errors into ``LedgerError``s that say what happened.
    static func mapStorageError(_ error: any Error) -> any Error {
        guard let lmdb = error as? LMDBError else { return error }
        if lmdb.isDiskFull {
            return LedgerError(.diskFull, "the disk is full; nothing of this write was stored", underlying: lmdb)
        }
        if lmdb.isCorruption {
            return LedgerError(.corruptData, "the data file is damaged", underlying: lmdb)
        }
        return LedgerError(.storage, "storage failed: \(lmdb)", underlying: lmdb)
    }
}

/// Carries a job's result from the writer thread to its caller.
private final class ResultBox<T>: @unchecked Sendable {
    // @unchecked Sendable: written on the writer thread before `finish` is called, read by the
    // caller only after `finish` resumed it (the continuation/semaphore orders the accesses).
    var value: T?
    var error: (any Error)?
}
