import Synchronization

/// An async broadcast that the group-commit writer sends after every commit: tasks waiting for
/// "something new in the log" (a leader's long-polled change feed) sleep on it instead of
/// polling, and all of them wake at once when a commit lands.
///
/// The signal carries no data; it only counts commits (``generation``). A waiter reads the
/// generation *before* it looks at the ledger, then waits for a generation after that one —
/// so a commit that lands between the look and the wait is never missed:
///
/// ```swift
/// let seen = ledger.commitSignal.generation
/// if try ledger.feedSegment(after: checkpoint) == nil {
///     _ = await ledger.commitSignal.wait(after: seen, timeout: .seconds(20))
/// }
/// ```
///
/// A commit wakes waiters whether or not it appended to the log (a flush of session counts is
/// a commit too), so a waiter looks again and may wait again until its own deadline.
public final class CommitSignal: Sendable {
    private struct Waiter {
        let continuation: CheckedContinuation<Bool, Never>
        var timer: Task<Void, Never>?
    }

    private struct State {
        var generation: UInt64 = 0
        var nextID: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
    }

    private let state = Mutex(State())

    /// A signal no commit has been sent on yet.
    public init() {}

    /// Commits signalled so far. Read it before looking for new data, and pass it to
    /// ``wait(after:timeout:)``.
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// Tasks waiting now (for tests and metrics).
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// Wakes every waiter: called by the writer after each commit.
    public func signal() {
        let woken = state.withLock { s -> [Waiter] in
            s.generation &+= 1
            defer { s.waiters.removeAll(keepingCapacity: true) }
            return Array(s.waiters.values)
        }
        for waiter in woken {
            waiter.timer?.cancel()
            waiter.continuation.resume(returning: true)
        }
    }

    /// Waits until a commit after generation `seen` is signalled, the timeout passes, or the
    /// task is cancelled — without polling.
    ///
    /// - Parameters:
    ///   - seen: the ``generation`` read before the caller looked for new data.
    ///   - timeout: the longest wait.
    /// - Returns: `true` when a commit was signalled (at once if one already was after `seen`),
    ///   `false` on timeout or cancellation.
    public func wait(after seen: UInt64, timeout: Duration) async -> Bool {
        let id = state.withLock { s -> UInt64 in
            s.nextID &+= 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                // Registering and checking happen under the lock that `signal()` and `expire`
                // take, so a signal or a cancellation either finds the waiter or is seen here.
                let immediate = state.withLock { s -> Bool? in
                    if s.generation != seen { return true }
                    if Task.isCancelled || timeout <= .zero { return false }
                    s.waiters[id] = Waiter(continuation: continuation, timer: nil)
                    return nil
                }
                if let immediate {
                    continuation.resume(returning: immediate)
                    return
                }
                let timer = Task { [self] in
                    try? await Task.sleep(for: timeout)
                    if !Task.isCancelled { expire(id) }
                }
                let attached = state.withLock { s -> Bool in
                    guard s.waiters[id] != nil else { return false }
                    s.waiters[id]?.timer = timer
                    return true
                }
                if !attached { timer.cancel() }  // woken before the timer was attached
            }
        } onCancel: {
            expire(id)
        }
    }

    /// Ends waiter `id`'s wait with `false`, if it is still waiting.
    private func expire(_ id: UInt64) {
        guard let waiter = state.withLock({ $0.waiters.removeValue(forKey: id) }) else { return }
        waiter.timer?.cancel()
        waiter.continuation.resume(returning: false)
    }
}

extension Ledger {
    /// Signalled after every group commit of this ledger's writer (see ``CommitSignal``).
    public var commitSignal: CommitSignal { writer.commitSignal }
}
