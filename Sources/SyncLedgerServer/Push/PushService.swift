import AsyncHTTPClient
import Foundation
import Logging
import NIOPosix
import Prometheus
public import SyncLedger
import Synchronization

/// How a server delivers push notifications (`syncledger serve --push-…`).
public struct PushOptions: Sendable {
    /// Deliver at all (`--no-push` turns it off; a follower never delivers).
    public var enabled = true
    /// Where the services are.
    public var endpoints = PushEndpoints()
    /// Retries, time-to-live and giving up.
    public var policy = PushPolicy()
    /// The most notifications in flight at once.
    public var concurrency = 256
    /// The nice value of the delivery threads: 0 runs them like the request threads, 19 at
    /// the lowest priority. Higher values leave more of a busy machine to writes and make
    /// notifications later.
    public var niceness: Int32 = 10

    /// On, with Apple's and Google's addresses and the default policy.
    public init() {}

    /// Checks the values.
    /// - Throws: ``StartupError`` naming the option.
    public func validate() throws {
        guard (1...4096).contains(concurrency) else { throw StartupError("--push-concurrency must be 1 to 4096, not \(concurrency)") }
        guard (0...19).contains(niceness) else { throw StartupError("--push-nice must be 0 to 19, not \(niceness)") }
        guard (1...1000).contains(policy.maxAttempts) else { throw StartupError("--push-max-attempts must be 1 to 1000, not \(policy.maxAttempts)") }
        guard policy.initialBackoff > .zero, policy.initialBackoff <= policy.maxBackoff, policy.maxBackoff <= .seconds(86_400) else {
            throw StartupError("--push-backoff must be more than 0 and at most --push-max-backoff, which is at most 86400 seconds")
        }
        for (name, url) in [("--apns-url", endpoints.apns), ("--apns-sandbox-url", endpoints.apnsSandbox), ("--fcm-url", endpoints.fcm)] {
            guard let parts = URLComponents(string: url), ["http", "https"].contains(parts.scheme?.lowercased() ?? ""), !(parts.host ?? "").isEmpty,
                  parts.user == nil, parts.password == nil else {
                throw StartupError("\(name) must be an http(s)://HOST[:PORT] URL without a user name or password")
            }
        }
    }
}

/// Push delivery beside the write path: a dispatcher derives notifications from the change
/// feed into the outbox, and a deliverer sends what is due over APNs, FCM and webhooks.
///
/// Neither holds a write: the dispatcher wakes on the commit signal after a commit and reads
/// the log like any reader; the outbox is its own LMDB environment. LMDB work and the HTTP
/// client run on their own lower-priority threads (``PushThreads``), off Swift's cooperative
/// threads and the server's event loops.
final class PushService: Sendable {
    let ledger: Ledger
    let outbox: PushOutbox
    let senders: PushSenders
    let options: PushOptions
    let metrics: PushMetrics
    let logger: Logger
    /// Signalled when the outbox has new rows or an attempt finished.
    private let wake = CommitSignal()
    private let finished = Mutex<[(PushNotification, PushOutcome)]>([])
    private let cache = PushDerivationCache()
    private let pools = Mutex<[IdentityPoolID: (read: ContinuousClock.Instant, arns: [String], ttl: Duration)]>([:])
    /// How long a finished attempt may wait for others before the outcomes are recorded.
    static let settleWindow: Duration = .milliseconds(5)
    /// The shortest time between two passes of the dispatcher over the feed.
    static let dispatchInterval: Duration = .milliseconds(10)

    let threads: PushThreads
    /// In cluster mode: which entries this node derives notifications from (its shards').
    private let scope = Mutex<(@Sendable (StreamName, Timestamp) -> Bool)?>(nil)

    /// Cluster mode: derive only what `include` accepts (the entries of the shards this node owns).
    func restrict(to include: @escaping @Sendable (StreamName, Timestamp) -> Bool) { scope.withLock { $0 = include } }

    init(ledger: Ledger, outbox: PushOutbox, client: HTTPClient, threads: PushThreads, options: PushOptions, registry: MetricsRegistry, logger: Logger) throws {
        self.threads = threads
        self.ledger = ledger
        self.outbox = outbox
        self.senders = PushSenders(client: client, endpoints: options.endpoints, secrets: ledger.secrets)
        self.options = options
        self.metrics = PushMetrics(registry: registry)
        self.logger = logger
        try outbox.startCursor(at: try ledger.lastSequence)
        let released = try outbox.releaseLeases(now: .now)
        if released > 0 { logger.info("push: notifications in flight when the server stopped are due again", metadata: ["count": "\(released)"]) }
    }

    /// Runs both loops until the task is cancelled.
    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.dispatchLoop() }
            group.addTask { await self.deliverLoop() }
        }
    }

    private func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await threads.run(body)
    }

    // MARK: Dispatcher

    private func dispatchLoop() async {
        var lastPass = ContinuousClock.now - Self.dispatchInterval
        while !Task.isCancelled {
            // At most one pass (one outbox commit) per interval: under load, a pass takes in
            // all the commits of the interval instead of one commit each.
            let since = ContinuousClock.now - lastPass
            if since < Self.dispatchInterval { try? await Task.sleep(for: Self.dispatchInterval - since) }
            lastPass = .now
            let seen = ledger.commitSignal.generation
            do {
                if try await offPool({ try self.dispatchOnce() }) { continue }
            } catch {
                if Task.isCancelled { return }
                logger.error("push: cannot derive notifications from the log", metadata: ["error": "\(error)"])
            }
            _ = await ledger.commitSignal.wait(after: seen, timeout: .seconds(30))
        }
    }

    /// Derives the notifications of the next commits; whether there were any commits.
    private func dispatchOnce() throws -> Bool {
        let cursor = try outbox.cursor()
        let pass = try ledger.pushNotifications(after: cursor, limit: 4096, cache: cache, include: scope.withLock { $0 })
        guard pass.last > cursor else { return false }
        if try outbox.enqueue(pass.notifications, cursor: pass.last, skipped: pass.skipped, collapsed: pass.collapsed) > 0 { wake.signal() }
        return true
    }

    /// Cluster mode, when this node took a shard: derives again the notifications of the
    /// shard's entries written since `since` up to the dispatcher's cursor (the previous owner may
    /// have died before it derived or delivered them; at least once, so a device may hear of a
    /// change twice). Entries after the cursor the dispatcher derives as usual.
    func rederive(_ include: @escaping @Sendable (StreamName, Timestamp) -> Bool, since: Timestamp) async {
        do {
            let count = try await offPool { () -> Int in
                let cursor = try self.outbox.cursor()
                var position = try self.ledger.firstSequence(notBefore: since) - 1
                var enqueued = 0
                while position < cursor {
                    let pass = try self.ledger.pushNotifications(after: position, limit: 4096, cache: PushDerivationCache(), include: include)
                    guard pass.last > position else { break }
                    enqueued += try self.outbox.enqueue(pass.notifications, cursor: cursor)
                    position = pass.last
                }
                return enqueued
            }
            if count > 0 {
                wake.signal()
                logger.info("push: notifications of a shard taken over derived again", metadata: ["count": "\(count)"])
            }
        } catch {
            logger.error("push: cannot derive a shard's recent notifications again", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Deliverer

    private func deliverLoop() async {
        let policy = options.policy
        await withDiscardingTaskGroup { group in
            var running = 0
            // Outcomes wait up to `settleWindow` for the others in flight, and are recorded
            // together with the next lease in one outbox commit (one fsync): a commit per
            // notification would cap delivery at the disk's commit rate.
            var unsettled: [(PushNotification, PushOutcome)] = []
            var firstUnsettled = ContinuousClock.now
            while !Task.isCancelled {
                let seen = wake.generation
                let done = finished.withLock { list -> [(PushNotification, PushOutcome)] in
                    defer { list.removeAll() }
                    return list
                }
                if unsettled.isEmpty, !done.isEmpty { firstUnsettled = .now }
                unsettled += done
                let waited = ContinuousClock.now - firstUnsettled
                if !unsettled.isEmpty, unsettled.count < running, waited < Self.settleWindow {
                    _ = await wake.wait(after: seen, timeout: Self.settleWindow - waited)
                    continue
                }
                let batch = unsettled
                unsettled = []
                running -= batch.count
                let limit = options.concurrency - running
                do {
                    let now = Timestamp.now
                    let round = try await offPool { try self.outbox.settleAndLease(batch, now: now, limit: limit, policy: policy) }
                    for ((n, outcome), result) in zip(batch, round.settled) { record(n, outcome, result, at: now) }
                    if round.expired > 0 { logger.info("push: notifications expired unsent", metadata: ["count": "\(round.expired)"]) }
                    for n in round.leased {
                        running += 1
                        group.addTask(executorPreference: threads.executor) {
                            let (sent, outcome) = await self.deliver(n)
                            self.finished.withLock { $0.append((sent, outcome)) }
                            self.wake.signal()
                        }
                    }
                    if !batch.isEmpty || !round.leased.isEmpty || round.expired > 0 { continue }
                } catch {
                    // Settled rows stay in flight until the next start releases them.
                    logger.error("push: cannot use the outbox", metadata: ["error": "\(error)"])
                }
                // At most a second: `syncledger push retry`, run beside the server, puts rows
                // back without a way to wake this process.
                let next = try? await offPool { try self.outbox.nextDue() }
                let wait = next.flatMap { $0 }.map { Duration.milliseconds(max(1, min($0.milliseconds &- Timestamp.now.milliseconds, 1_000))) } ?? .seconds(1)
                _ = await wake.wait(after: seen, timeout: wait)
            }
        }
    }

    /// One attempt: the device's token now, its pool's transport, the send, and — when the
    /// service says the token is dead — the device disabled in the registry.
    /// - Returns: the notification as sent (with the dataset's sync count at sending time, the
    ///   newest: the row stands for every change since it was made), and the outcome.
    private func deliver(_ leased: PushNotification) async -> (PushNotification, PushOutcome) {
        var n = leased
        if n.custom != nil { return (n, await send(n)) }
        do {
            let stream = StreamName(pool: try IdentityPoolID(n.pool), identity: try IdentityID(n.identity), dataset: try DatasetName(n.dataset))
            n.syncCount = max(n.syncCount, try ledger.currentSyncCount(stream))
        } catch {
            return (n, .retry(reason: "cannot read the dataset's sync count: \(error)"))
        }
        return (n, await send(n))
    }

    /// Puts custom notifications (`POST /devices/notify`) in the outbox and wakes delivery.
    func enqueueCustom(_ notifications: [PushNotification]) throws {
        if try outbox.enqueue(notifications, cursor: 0) > 0 { wake.signal() }
    }

    private func send(_ n: PushNotification) async -> PushOutcome {
        let device: Device?
        let arns: [String]
        let ttl: Duration
        do {
            let pool = try IdentityPoolID(n.pool)
            device = try ledger.device(pool: pool, id: n.deviceID)
            (arns, ttl) = try poolSettings(pool)
        } catch {
            return .retry(reason: "cannot read the device registry: \(error)")
        }
        guard let device else { return .unrouted(reason: "device \(n.deviceID) was removed from the registry") }
        guard device.identity == n.identity else { return .unrouted(reason: "device \(n.deviceID) is no longer logged in as \(n.identity)") }
        guard let platform = device.platform, let token = device.token else { return .unrouted(reason: "device \(n.deviceID) has no push token any more") }
        guard device.isEnabled else { return .tokenDead(reason: "the device's token was disabled: \(device.disabledReason ?? "")") }
        var n = n
        n.platform = platform
        let sender: any PushSender
        switch senders.sender(platform: platform, arns: arns) {
        case .success(let s): sender = s
        case .failure(let problem): return .failed(reason: problem.description)
        }
        let outcome = await sender.send(PushDelivery(notification: n, token: token, expiry: (n.retried ?? n.committed).adding(ttl)))
        switch outcome {
        case .tokenDead(let reason, let reportedAt):
            do {
                let pool = try IdentityPoolID(n.pool)
                if try await ledger.disableToken(pool: pool, deviceID: device.id, token: token, reason: reason, reportedAt: reportedAt) {
                    logger.info("push: token disabled", metadata: ["pool": "\(n.pool)", "device": "\(device.id)", "reason": "\(reason)"])
                } else if reportedAt != nil {
                    // Registered again after the service's report: the token lives; try again.
                    return .retry(reason: "\(reason), but the token was registered after that report")
                }
            } catch {
                return .retry(reason: "\(reason); cannot disable the token yet: \(error)")
            }
        case .failed(let reason), .retry(let reason, _):
            logger.info("push: attempt failed", metadata: ["pool": "\(n.pool)", "device": "\(n.deviceID)", "attempt": "\(n.attempts)", "reason": "\(reason)"])
        case .delivered, .unrouted:
            break
        }
        return outcome
    }

    /// A pool's application ARNs and time-to-live, read at most once a second per pool (a
    /// change of either reaches delivery within a second).
    private func poolSettings(_ pool: IdentityPoolID) throws -> (arns: [String], ttl: Duration) {
        let now = ContinuousClock.now
        if let hit = pools.withLock({ $0[pool] }), now - hit.read < .seconds(1) { return (hit.arns, hit.ttl) }
        let arns = try ledger.poolConfiguration(pool).pushSync?.applicationArns ?? []
        let ttl = try outbox.timeToLive(pool: pool.rawValue) ?? options.policy.defaultTimeToLive
        pools.withLock { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[pool] = (now, arns, ttl)
        }
        return (arns, ttl)
    }

    private func record(_ n: PushNotification, _ outcome: PushOutcome, _ result: PushOutbox.Settled, at now: Timestamp) {
        if case .delivered = result {
            metrics.observeDelivery(transport: n.transport, latency: .milliseconds(now.milliseconds - n.committed.milliseconds))
        }
        if case .dead(let reason) = result {
            logger.warning("push: notification moved to the dead letters", metadata: [
                "pool": "\(n.pool)", "device": "\(n.deviceID)", "dataset": "\(n.dataset)", "reason": "\(reason)",
            ])
        }
    }
}

/// Commit-to-delivery latency per transport (counted as notifications are accepted) and the
/// outbox's counts (set at scrape time), in the server's ``MetricsRegistry``.
final class PushMetrics: Sendable {
    static let buckets: [Duration] = [
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(300),
    ]
    let registry: MetricsRegistry
    private let histograms = Mutex<[PushTransportKind: DurationHistogram]>([:])

    init(registry: MetricsRegistry) {
        self.registry = registry
    }

    func observeDelivery(transport: PushTransportKind, latency: Duration) {
        let histogram = histograms.withLock { h in
            h[transport] ?? {
                let made = registry.durationHistogram(
                    "syncledger_push_delivery_seconds", help: "Time from a change's commit to its notification's acceptance by the push service.",
                    labels: [("transport", transport.rawValue)], buckets: Self.buckets)
                h[transport] = made
                return made
            }()
        }
        histogram.record(max(.zero, latency))
    }

    /// Sets the outbox's counts at scrape time.
    func refresh(outbox: PushOutbox, ledger: Ledger, into scrape: inout MetricsScrape) {
        guard let (cursor, transports) = try? outbox.status() else { return }
        let gauges: Set<String> = [PushCounter.pending.rawValue, PushCounter.inFlight.rawValue, PushCounter.deadNow.rawValue]
        for t in transports {
            for name in gauges {
                scrape.gauge("syncledger_push_notifications", help: "Notifications in the outbox now, by transport and state.",
                             labels: [("transport", t.transport.rawValue), ("state", name)], t.counts[name] ?? 0)
            }
            for (name, value) in t.counts where !gauges.contains(name) {
                scrape.counter("syncledger_push_total", help: "Notifications by transport and what became of them.",
                               labels: [("transport", t.transport.rawValue), ("outcome", name)], total: value)
            }
        }
        let last = (try? ledger.lastSequence) ?? cursor
        scrape.gauge("syncledger_push_feed_lag", help: "Commits not yet turned into notifications.", last > cursor ? last - cursor : 0)
    }
}
