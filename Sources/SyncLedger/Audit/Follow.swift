/// How ``Ledger/follow(after:filter:polling:caughtUp:_:)`` waits for new commits.
///
/// Commits of this process's writer wake a follower at once (``Ledger/commitSignal``). Commits
/// of another process on the same data directory (a server while the CLI follows) send no
/// signal: LMDB shows them to the next read transaction, so the follower also looks again after
/// a pause that starts at ``minimum`` and doubles while nothing comes, up to ``maximum``. An
/// idle follower thus costs one read transaction per `maximum`; a busy one looks again at once.
public struct FollowPolling: Hashable, Sendable {
    /// The first pause after the feed was caught up (default 10 ms).
    public var minimum: Duration = .milliseconds(10)
    /// The longest pause: the most a commit by another process waits to be seen (default 250 ms).
    public var maximum: Duration = .milliseconds(250)

    /// The defaults: 10 ms doubling to 250 ms.
    public init() {}

    /// Pauses from `minimum` doubling to `maximum`.
    public init(minimum: Duration, maximum: Duration) {
        self.minimum = minimum
        self.maximum = max(minimum, maximum)
    }
}

extension Ledger {
    /// Calls `body` with every entry of the change feed after `sequence` that passes `filter`,
    /// then with each new one as it is committed — by this process or by another one on the same
    /// data directory — until `body` returns false or the task is cancelled.
    ///
    /// Resumable: it returns the sequence of the last entry it read (filtered out or not), and a
    /// follow started after that sequence goes on with the next entry, missing none and
    /// repeating none.
    ///
    /// Memory stays bounded: the feed is read in short batches (``forEachCommit(after:_:)``),
    /// and no read transaction is open while `body` runs or while it waits.
    ///
    /// - Parameters:
    ///   - sequence: the position to start after (0: from the first entry).
    ///   - filter: stream (pool, identity, dataset, system streams) and entry (author, device,
    ///     time, sync count) tests; the key is ignored.
    ///   - polling: how long it waits between looks when nothing came (see ``FollowPolling``).
    ///   - caughtUp: called with the position each time the follower has read everything
    ///     committed so far, before it waits (a CLI flushes its output there).
    /// - Returns: the sequence of the last entry read (`sequence` if none).
    public func follow(after sequence: UInt64 = 0, filter: AuditFilter = AuditFilter(), polling: FollowPolling = FollowPolling(),
                       caughtUp: (UInt64) throws -> Void = { _ in }, _ body: (LogEntry) throws -> Bool) async throws -> UInt64 {
        try filter.validate()
        var position = sequence
        var pause = polling.minimum
        while !Task.isCancelled {
            let seen = commitSignal.generation
            var stopped = false
            var read = false
            try forEachCommit(after: position) { entry in
                position = entry.sequence
                read = true
                guard filter.matches(entry) else { return true }
                if try !body(entry) { stopped = true }
                return !stopped && !Task.isCancelled
            }
            if stopped { return position }
            try caughtUp(position)
            if read { pause = polling.minimum }
            if await commitSignal.wait(after: seen, timeout: pause) {
                pause = polling.minimum
            } else {
                pause = min(pause * 2, polling.maximum)
            }
        }
        return position
    }
}
