import Logging
import NIOPosix
import SyncLedger
import Synchronization

/// The one reader of new commits for every live event stream of a server.
///
/// A single task waits on the ledger's ``CommitSignal``, reads each new stretch of the change
/// feed once (``Ledger/commitSummaries(after:limit:)``, on NIO's thread pool), and hands each
/// user-dataset entry to the streams whose scope matches. Streams are filed by identity, so an
/// event reaches an identity's streams without looking at any other stream; only admin streams
/// that span several identities are checked one by one. The same task sends the keep-alive
/// ticks.
///
/// A stream that resumes from an older position reads the log itself until it reaches the
/// hub's position, then ``join(_:after:)``s: the hub's position only moves under the lock that
/// joining takes, so every event after the stream's position is either one it read itself
/// (the hub's copy is dropped) or one the hub delivers — no gap, no duplicate.
final class EventHub: Sendable {
    private struct State {
        /// Every entry up to here was handed out (or skipped while nobody listened).
        var position: UInt64
        var byIdentity: [IdentityKey: [UInt64: EventSubscriber]] = [:]
        /// Admin streams over more than one identity.
        var broad: [UInt64: EventSubscriber] = [:]
        var count = 0
    }

    let ledger: Ledger
    let metrics: EventMetrics
    /// How often streams get a keep-alive.
    let keepAlive: Duration
    /// Entries read per look at the log.
    static let batch = 512
    private let state: Mutex<State>
    private let ids = Atomic<UInt64>(0)
    private let logger: Logger

    init(ledger: Ledger, keepAlive: Duration, metrics: EventMetrics, logger: Logger) {
        self.ledger = ledger
        self.keepAlive = keepAlive
        self.metrics = metrics
        self.logger = logger
        state = Mutex(State(position: (try? ledger.lastSequence) ?? 0))
    }

    /// A new subscriber id.
    func nextID() -> UInt64 { ids.add(1, ordering: .relaxed).newValue }

    /// The position up to which the hub has handed out events.
    var position: UInt64 { state.withLock { $0.position } }

    /// Streams that joined and have not left.
    var subscribers: Int { state.withLock { $0.count } }

    /// Files `subscriber`, which wrote every event up to `cursor` itself, when the hub has not
    /// gone past `cursor`; returns false (nothing done) when it has: the stream reads the log
    /// further first.
    func join(_ subscriber: EventSubscriber, after cursor: UInt64) -> Bool {
        state.withLock { s in
            guard cursor >= s.position else { return false }
            subscriber.markCaughtUp(cursor)
            if let key = subscriber.scope.identityKey {
                s.byIdentity[key, default: [:]][subscriber.id] = subscriber
            } else {
                s.broad[subscriber.id] = subscriber
            }
            s.count += 1
            return true
        }
    }

    /// Unfiles `subscriber` (nothing if it never joined).
    func leave(_ subscriber: EventSubscriber) {
        state.withLock { s in
            let removed: EventSubscriber?
            if let key = subscriber.scope.identityKey {
                removed = s.byIdentity[key]?.removeValue(forKey: subscriber.id)
                if s.byIdentity[key]?.isEmpty == true { s.byIdentity[key] = nil }
            } else {
                removed = s.broad.removeValue(forKey: subscriber.id)
            }
            if removed != nil { s.count -= 1 }
        }
    }

    /// Reads new commits and hands them out until cancelled, and sends keep-alive ticks.
    func run() async {
        var nextTick = ContinuousClock.now + keepAlive
        while !Task.isCancelled {
            let seen = ledger.commitSignal.generation
            var more = false
            do {
                more = try await readNew()
            } catch {
                logger.error("the event hub could not read the log; retrying in 1 s", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: .seconds(1))
            }
            let now = ContinuousClock.now
            if now >= nextTick {
                tick()
                nextTick = now + keepAlive
            }
            if !more {
                _ = await ledger.commitSignal.wait(after: seen, timeout: nextTick - now)
            }
        }
    }

    /// Reads up to ``batch`` entries after the position and hands them out; true when there
    /// may be more to read at once.
    private func readNew() async throws -> Bool {
        let (from, listening) = state.withLock { ($0.position, $0.count > 0) }
        let ledger = self.ledger
        if !listening {
            // Nobody listens: move to the end without reading what is in between. A stream
            // that joins later starts from where it read the log itself, at or after here.
            let last = try ledger.lastSequence
            let skipped = state.withLock { s -> Bool in
                guard s.count == 0, s.position == from else { return false }
                s.position = max(s.position, last)
                return true
            }
            return !skipped
        }
        let summaries = try await NIOThreadPool.singleton.runIfActive { try ledger.commitSummaries(after: from, limit: Self.batch) }
        guard let last = summaries.last else { return false }
        hand(summaries, through: last.sequence)
        return summaries.count == Self.batch
    }

    /// Hands out the user-dataset entries of `summaries` and moves the position to `last`.
    private func hand(_ summaries: [CommitSummary], through last: UInt64) {
        var wake: [CheckedContinuation<Void, Never>] = []
        state.withLock { s in
            for summary in summaries where !summary.stream.isInternal {
                let identityStreams = s.byIdentity[IdentityKey(summary.stream)]
                guard identityStreams != nil || !s.broad.isEmpty else { continue }
                var event: StreamEvent?  // made once, only if someone sees it
                func offer(_ subscriber: EventSubscriber) {
                    guard subscriber.scope.matches(summary.stream) else { return }
                    if event == nil { event = StreamEvent(summary) }
                    if let waiter = subscriber.deliver(event!) { wake.append(waiter) }
                }
                if let identityStreams {
                    for subscriber in identityStreams.values { offer(subscriber) }
                }
                for subscriber in s.broad.values { offer(subscriber) }
            }
            s.position = max(s.position, last)
        }
        for waiter in wake { waiter.resume() }
    }

    /// Tells every stream a keep-alive is due.
    private func tick() {
        let wake = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            var wake: [CheckedContinuation<Void, Never>] = []
            for streams in s.byIdentity.values {
                for subscriber in streams.values { if let w = subscriber.tick(position: s.position) { wake.append(w) } }
            }
            for subscriber in s.broad.values { if let w = subscriber.tick(position: s.position) { wake.append(w) } }
            return wake
        }
        for waiter in wake { waiter.resume() }
    }
}
