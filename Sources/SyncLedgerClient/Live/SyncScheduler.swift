import Foundation

/// Keeps datasets in sync: a durable queue of syncs to run (it survives restarts), filled by
/// the app, by a push notification or live event whose sync count is newer than the local
/// one, and by a sync that failed for want of a network; emptied by ``run()`` (or a single
/// ``runPending()``), which retries with backoff while the server cannot be reached and runs
/// at once when woken (``connectivityRestored()``, a new request). Bursts coalesce: many
/// requests for one dataset make one sync (and one more if a request comes while it runs).
public actor SyncScheduler {
    /// The client.
    public let client: SyncClient
    /// The handler every queued sync uses.
    public let handler: any SyncHandler
    /// The longest wait between attempts while the server cannot be reached.
    public let maxBackoff: Duration
    private var wake: AsyncStream<Void>.Continuation
    private var wakes: AsyncStream<Void>
    /// The outcome of each dataset's latest queued sync.
    public private(set) var outcomes: [String: Result<SyncReport, SyncClientError>] = [:]

    /// A scheduler for `client`.
    public init(client: SyncClient, handler: any SyncHandler = DefaultSyncHandler(), maxBackoff: Duration = .seconds(60)) {
        self.client = client
        self.handler = handler
        self.maxBackoff = maxBackoff
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Queues a sync of `dataset` (durably) and wakes ``run()``.
    public func request(_ dataset: String, reason: String) async throws {
        try client.store.enqueue(identity: try await client.identity(), dataset: try SyncClient.checkName(dataset), reason: reason)
        wake.yield()
    }

    /// Syncs now; when the server cannot be reached, queues the sync for when it can (the
    /// SDKs' `synchronizeOnConnectivity`, kept in the store instead of a weak reference).
    /// - Returns: the report, or nil when the sync was queued.
    public func synchronizeOnConnectivity(_ dataset: String) async throws -> SyncReport? {
        do { return try await client.synchronize(dataset, handler: handler) } catch SyncClientError.network {
            try await request(dataset, reason: "no network")
            return nil
        }
    }

    /// A push notification's or a live event's data (`identityPoolId`, `identityId`,
    /// `datasetName`, `syncCount`, and for events `deviceId`): queues a sync when it is about
    /// this client's identity, was not made by this device, and is newer than what the store has.
    /// - Returns: whether a sync was queued.
    @discardableResult
    public func handleNotification(_ data: [String: String]) async throws -> Bool {
        let identity = try await client.identity()
        guard data["identityPoolId"] == client.pool, data["identityId"] == identity, let dataset = data["datasetName"],
              let count = data["syncCount"].flatMap(Int64.init), data["deviceId"] != client.deviceID else { return false }
        let local = try client.store.dataset(identity: identity, name: dataset)?.lastSyncCount ?? 0
        guard count > local else { return false }
        try await request(dataset, reason: "notified of sync count \(count)")
        return true
    }

    /// Wakes ``run()``: the network is back.
    public func connectivityRestored() { wake.yield() }

    /// Runs every queued sync once. A sync that ends (done, or failed for a reason other than
    /// the network) leaves the queue; one that could not reach the server stays.
    /// - Returns: whether every queued sync could reach the server.
    @discardableResult
    public func runPending() async throws -> Bool {
        let identity = try await client.identity()
        var reachable = true
        for pending in try client.store.pendingSyncs(identity: identity) {
            do {
                outcomes[pending.dataset] = .success(try await client.synchronize(pending.dataset, handler: handler))
            } catch let error as SyncClientError {
                outcomes[pending.dataset] = .failure(error)
                if case .network = error { reachable = false; continue }
            }
            try client.store.dequeue(identity: identity, dataset: pending.dataset, generation: pending.generation)
        }
        return reachable
    }

    /// The queued syncs.
    public func pending() async throws -> [PendingSync] {
        try client.store.pendingSyncs(identity: try await client.identity())
    }

    /// Runs queued syncs until the task is cancelled: at once when woken, and with backoff (1 s
    /// doubling to ``maxBackoff``) while the server cannot be reached.
    public func run() async {
        var backoff = Duration.seconds(1)
        while !Task.isCancelled {
            let reachable = (try? await runPending()) ?? false
            let empty = ((try? await pending()) ?? []).isEmpty
            if reachable { backoff = .seconds(1) }
            await waitForWake(timeout: empty ? nil : backoff)
            if !reachable { backoff = min(backoff * 2, maxBackoff) }
        }
    }

    private func waitForWake(timeout: Duration?) async {
        let stream = wakes
        await withTaskGroup(of: Void.self) { group in
            group.addTask { for await _ in stream { return } }
            if let timeout { group.addTask { try? await Task.sleep(for: timeout) } }
            await group.next()
            group.cancelAll()
        }
    }
}
