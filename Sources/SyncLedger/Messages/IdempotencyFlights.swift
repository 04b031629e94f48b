import Synchronization

/// The UpdateRecords calls with an `Idempotency-Key` in progress, by storage key: a duplicate
/// that arrives while the original is still running (a client's retry racing it) waits for
/// the original to finish and is then answered from what it stored — so a SyncTrigger's hook,
/// which runs outside the write transaction, is called once for the two, and both get the same
/// answer. When the original failed (it stored nothing), the duplicate is judged afresh.
final class IdempotencyFlights: Sendable {
    /// The keys being run, each with the calls waiting for it.
    private let running = Mutex<[[UInt8]: [CheckedContinuation<Void, Never>]]>([:])
    /// Calls that found another one with their key running and waited for it.
    let waits = Atomic<Int>(0)

    /// Runs `body` as the only call with `key` in this process, after any other one with it.
    func exclusive<T>(_ key: [UInt8], _ body: () async throws -> T) async throws -> T {
        var waited = false
        while !claim(key) {
            if !waited { waits.add(1, ordering: .relaxed); waited = true }
            await withCheckedContinuation { (waiting: CheckedContinuation<Void, Never>) in
                let parked = running.withLock { calls -> Bool in
                    guard calls[key] != nil else { return false }  // it finished meanwhile
                    calls[key]!.append(waiting)
                    return true
                }
                if !parked { waiting.resume() }
            }
        }
        defer { finish(key) }
        return try await body()
    }

    private func claim(_ key: [UInt8]) -> Bool {
        running.withLock { calls in
            guard calls[key] == nil else { return false }
            calls[key] = []
            return true
        }
    }

    private func finish(_ key: [UInt8]) {
        let waiters = running.withLock { $0.removeValue(forKey: key) } ?? []
        for waiter in waiters { waiter.resume() }
    }
}

extension Ledger {
    /// How many UpdateRecords calls with an `Idempotency-Key` waited for an earlier call with
    /// the same key that was still in progress (a retry racing its original), since the ledger
    /// was opened.
    public var idempotencyWaits: Int { idempotencyFlights.waits.load(ordering: .relaxed) }
}
