import Synchronization

/// One open event stream's mailbox: the hub puts events and keep-alive ticks in it, the
/// stream's own task takes them out and writes them to its connection.
///
/// Its queue is bounded (``capacity`` events): a consumer too slow to keep up is ended with
/// ``Ending/overflow`` instead of growing memory, and resumes from the log with its last event
/// id — nothing is lost. Ending it for any reason wakes its task at once.
final class EventSubscriber: Sendable {
    /// Why a stream ended.
    enum Ending: String, Sendable, CaseIterable {
        /// Its queue was full: the client was not reading fast enough.
        case overflow
        /// The client went away.
        case disconnected
        /// The server is stopping.
        case shutdown
        /// Its credential expired.
        case expired
        /// Its credential was revoked.
        case revoked
        /// Writing to the connection failed, or the log could not be read.
        case failed
    }

    /// What the stream's task takes out at once.
    struct Batch: Sendable {
        /// Events in order; empty when only a keep-alive or an ending is due.
        var events: [StreamEvent] = []
        /// A keep-alive is due; every event up to this position that the stream should see is
        /// in ``events`` or was taken before.
        var keepAlive: UInt64?
        /// The stream is over (events still queued are dropped: the client resumes from the log).
        var ending: Ending?
        /// Each event's id, as the session labels them (``EventSession/next()``).
        var ids: [String] = []
        /// The id to send with the keep-alive, when it moved past the last one sent.
        var keepAliveID: String?
    }

    private struct State {
        var queue: [StreamEvent] = []
        var keepAlive: UInt64?
        var ending: Ending?
        var waiter: CheckedContinuation<Void, Never>?
    }

    /// The hub's id for it.
    let id: UInt64
    /// What it sees.
    let scope: EventScope
    /// The most events queued before it is ended for overflow.
    let capacity: Int
    /// Events up to this sequence were written while catching up from the log: the hub's copies
    /// are dropped. Set before it joins the hub.
    private let caughtUp = Atomic<UInt64>(0)
    private let state = Mutex(State())

    init(id: UInt64, scope: EventScope, capacity: Int) {
        self.id = id
        self.scope = scope
        self.capacity = capacity
    }

    /// The position it caught up to from the log (see ``markCaughtUp(_:)``).
    var caughtUpTo: UInt64 { caughtUp.load(ordering: .acquiring) }

    /// Records that every event up to `sequence` was written from the log.
    func markCaughtUp(_ sequence: UInt64) { caughtUp.store(sequence, ordering: .releasing) }

    /// Whether it has ended.
    var ending: Ending? { state.withLock { $0.ending } }

    /// Queues an event (unless it was written while catching up); past ``capacity`` the
    /// stream ends with ``Ending/overflow``. Returns its task's continuation to resume, if it
    /// was waiting. Called by the hub.
    func deliver(_ event: StreamEvent) -> CheckedContinuation<Void, Never>? {
        guard event.sequence > caughtUpTo else { return nil }
        return state.withLock { s in
            guard s.ending == nil else { return nil }
            guard s.queue.count < capacity else {
                s.ending = .overflow
                s.queue = []
                return s.waiter.take()
            }
            s.queue.append(event)
            return s.waiter.take()
        }
    }

    /// A keep-alive is due; every event up to `position` was delivered. Called by the hub.
    func tick(position: UInt64) -> CheckedContinuation<Void, Never>? {
        state.withLock { s in
            guard s.ending == nil else { return nil }
            s.keepAlive = max(position, caughtUpTo)
            return s.waiter.take()
        }
    }

    /// Ends the stream (the first reason given stays) and wakes its task.
    func end(_ reason: Ending) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.ending == nil {
                s.ending = reason
                s.queue = []
            }
            return s.waiter.take()
        }
        waiter?.resume()
    }

    /// Waits until there is something to write or the stream ended; a cancelled task ends it.
    /// Only the stream's own task calls this.
    func next() async -> Batch {
        while true {
            if let batch = take() { return batch }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let ready = state.withLock { s -> Bool in
                        if s.ending != nil || !s.queue.isEmpty || s.keepAlive != nil { return true }
                        s.waiter = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                end(.shutdown)
            }
        }
    }

    /// Everything due now, or nil when nothing is.
    private func take() -> Batch? {
        state.withLock { s in
            if let ending = s.ending { return Batch(ending: ending) }
            guard !s.queue.isEmpty || s.keepAlive != nil else { return nil }
            defer {
                s.queue = []
                s.keepAlive = nil
            }
            return Batch(events: s.queue, keepAlive: s.keepAlive)
        }
    }
}
