import Foundation
import Synchronization

/// Named syncs over a ``SyncClient``, after Salesforce Mobile Sync's `SyncManager`: syncs
/// defined once (``load(config:)``, a `usersyncs.json`-like file), run by name, their state
/// (``SyncState``: status, progress, cursors, times, error) persisted in the client store and
/// observable (``statusUpdates(_:)``).
///
/// - ``run(_:)`` runs a sync from the start (every cursor at sync count 0).
/// - ``reSync(_:)`` runs it incrementally: each dataset pulls only what the server changed
///   after this named sync's own cursor for it (the analog of Mobile Sync's `maxTimeStamp`).
///   A sync left ``SyncStatus/stopped`` resumes from its cursors; a cursor only moves after the
///   records it covers were written, so nothing needs fetching twice (Mobile Sync's
///   `maxTimeStamp - 1` is not needed: sync counts are exact).
/// - At init, syncs left ``SyncStatus/running`` by an earlier process are marked
///   ``SyncStatus/stopped``. Use one manager per store.
///
/// ## Merge modes
///
/// **Down, ``MergeMode/overwrite``**: every record the server returns (after the cursor) is
/// written locally as clean — a local unsynced change of such a key is *replaced* by the
/// server's record and lost. That is what the mode means. (A local change made *while* the
/// sync runs is never overwritten: the store checks record versions; it is counted as skipped.)
///
/// **Down, ``MergeMode/leaveIfChanged``**: the same, but records dirty locally are skipped
/// (kept dirty, counted in ``DatasetSyncState/skipped``); a later up sync or
/// ``SyncClient/synchronize(_:handler:)`` deals with them. As Mobile Sync's `maxTimeStamp`,
/// this sync's own cursor moves past them (its next ``reSync(_:)`` does not fetch them again);
/// the store's shared cursor does not (see below).
///
/// **Up, ``MergeMode/overwrite``**: every dirty record is pushed so that it wins: the sync
/// pulls first to learn the server's current sync count of each dirty key and pushes with it
/// (the server accepts a patch whose sync count equals the record's current one). A 409
/// (another device wrote in between) pulls again and retries, at most
/// ``SyncClient/maxRetries`` more times, then fails with ``SyncClientError/retriesExhausted(_:)``.
///
/// **Up, ``MergeMode/leaveIfChanged``**: only dirty records the server has not changed since
/// this device last saw them are pushed (with their own sync counts); a key the server changed
/// since is left dirty and counted as skipped. A 409 pulls again and retries, bounded the same way.
///
/// **``SyncType/sync``**: per dataset, down then up with the same mode. With `OVERWRITE` the
/// server wins on keys it changed (down replaces them) and local changes win on the others.
///
/// ## The store's dataset cursor
///
/// ``LocalDataset/lastSyncCount`` (shared with ``SyncClient/synchronize(_:handler:)``) means
/// "this device has every server change up to here". A down sync moves it to the server's sync
/// count only when its pull started at or before it and it left nothing out (no dirty record
/// skipped, no record changed during the pull) — so `LEAVE_IF_CHANGED` never moves it past a
/// skipped change, which `synchronize` then still pulls and offers as a conflict. A push moves
/// it as `synchronize`'s does (only when no other device wrote in between).
///
/// ## What a named sync leaves alone
///
/// A dataset deleted locally and not synchronized yet is skipped (``SyncClient/synchronize(_:handler:)``
/// deletes it on the server). A dataset deleted on the server after the cursor fails the sync
/// with ``SyncClientError/datasetDeletedOnServer(_:)`` and keeps the local copy. Merged dataset
/// names (an identity merge) are ignored: they are separate datasets. Each step holds the same
/// per-dataset lock as `synchronize`, so the two never interleave on one dataset.
public final class SyncManager: Sendable {
    /// The client the syncs run through.
    public let client: SyncClient
    let hub: StateHub
    private let running = Mutex<Set<String>>([])

    var store: ClientStore { client.store }

    /// A manager over `client`'s store; syncs left ``SyncStatus/running`` are marked ``SyncStatus/stopped``.
    /// - Throws: ``SyncClientError/store(_:)``.
    public init(client: SyncClient) throws {
        self.client = client
        var states = try client.store.namedSyncStates()
        for i in states.indices where states[i].status == .running {
            states[i].status = .stopped
            try client.store.saveNamedSync(states[i])
        }
        hub = StateHub(states)
    }

    deinit { hub.finishAll() }

    // MARK: Registering

    /// Registers the syncs of a config file (see ``SyncConfig``).
    /// - Returns: the names registered now.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` for a bad file; ``SyncClientError/store(_:)``.
    @discardableResult
    public func load(configFile path: String) throws -> [String] { try load(config: SyncConfig(contentsOf: path)) }

    /// Registers each sync of `config` in state ``SyncStatus/new``, persisted. A sync whose name
    /// the manager already has is skipped and keeps its state and cursors, as Mobile Sync does
    /// (so loading the same file at every start changes nothing); to change a sync's definition,
    /// ``deleteSync(_:)`` it first.
    /// - Returns: the names registered now (the skipped ones left out).
    @discardableResult
    public func load(config: SyncConfig) throws -> [String] {
        var added: [String] = []
        for definition in config.syncs {
            let state = SyncState(definition: definition)
            if try store.addNamedSync(state) {
                hub.publish(state)
                added.append(definition.syncName)
            }
        }
        return added
    }

    /// Forgets a sync (its state and cursors; the records it brought stay). Its
    /// ``statusUpdates(_:)`` streams finish.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` while it runs.
    public func deleteSync(_ name: String) throws {
        try claim(name)
        defer { release(name) }
        try store.removeNamedSync(name)
        hub.remove(name)
    }

    // MARK: State

    /// The state of sync `name`; nil when there is none.
    public func state(_ name: String) -> SyncState? { hub.state(name) }

    /// Every sync's state, by name.
    public func states() -> [SyncState] { hub.all().sorted { $0.name < $1.name } }

    /// The states of sync `name` as they change: the current one at once (or, for a name not
    /// loaded yet, the first once it is), then every change. Finishes when the sync is deleted,
    /// the manager is deinitialized, or the consumer stops iterating (its task cancelled).
    public func statusUpdates(_ name: String) -> AsyncStream<SyncState> { hub.subscribe(name) }

    // MARK: Running

    /// Runs sync `name` from the start: every dataset from sync count 0. The state goes
    /// ``SyncStatus/running`` → ``SyncStatus/done`` (or ``SyncStatus/failed`` with the error's
    /// text, or ``SyncStatus/stopped`` when the task is cancelled), persisted after each step.
    /// - Returns: the final state.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` for an unknown sync or one already
    ///   running; the sync's error (``SyncClientError``, `CancellationError`).
    @discardableResult
    public func run(_ name: String) async throws -> SyncState { try await execute(name, incremental: false) }

    /// Runs sync `name` incrementally: each dataset from this sync's cursor (what changed on
    /// the server since its last run; a stopped run resumes). A sync never run runs from 0.
    /// - Returns: the final state.
    /// - Throws: as ``run(_:)``.
    @discardableResult
    public func reSync(_ name: String) async throws -> SyncState { try await execute(name, incremental: true) }

    private func execute(_ name: String, incremental: Bool) async throws -> SyncState {
        try claim(name)
        defer { release(name) }
        guard var state = hub.state(name) else { throw SyncClientError.invalidParameter("there is no sync named \(name)") }
        state.status = .running
        state.startTime = SyncState.now()
        state.endTime = nil
        state.error = nil
        state.progress = 0
        state.totalSize = -1
        for ds in state.datasets {
            var d = state.datasetStates[ds] ?? DatasetSyncState()
            d = DatasetSyncState(syncCount: incremental ? d.syncCount : 0)
            state.datasetStates[ds] = d
        }
        try save(state)
        do {
            let identity = try await client.identity()
            if state.identity != identity {
                // Cursors of another identity mean nothing for this one.
                for ds in state.datasets { state.datasetStates[ds]?.syncCount = 0 }
                state.identity = identity
            }
            var step = 0
            for ds in state.datasets {
                if state.type.isDown {
                    try Task.checkCancellation()
                    var d = state.datasetStates[ds] ?? DatasetSyncState()
                    let met = try await down(&d, dataset: ds, mode: state.options.mergeMode, identity: identity)
                    state.datasetStates[ds] = d
                    state.totalSize = max(state.totalSize, 0) + met
                    step += 1
                    state.progress = step * 100 / state.steps
                    if !state.type.isUp { state.datasetStates[ds]?.done = true }
                    try save(state)
                }
                if state.type.isUp {
                    try Task.checkCancellation()
                    var d = state.datasetStates[ds] ?? DatasetSyncState()
                    let met = try await up(&d, dataset: ds, mode: state.options.mergeMode, identity: identity)
                    d.done = true
                    state.datasetStates[ds] = d
                    state.totalSize = max(state.totalSize, 0) + met
                    step += 1
                    state.progress = step * 100 / state.steps
                    try save(state)
                }
            }
            state.status = .done
            state.progress = 100
            state.totalSize = max(state.totalSize, 0)
            state.endTime = SyncState.now()
            try save(state)
            return state
        } catch {
            state.status = error is CancellationError ? .stopped : .failed
            state.error = error is CancellationError ? nil : "\(error)"
            state.endTime = SyncState.now()
            try? save(state)
            throw error
        }
    }

    /// Removes the *ghosts* of down sync `name` (Mobile Sync's `cleanResyncGhosts`): in each of
    /// its datasets, local **clean** records with a value whose key the server no longer has
    /// with a value (removed there, or the dataset deleted and made again) are removed locally
    /// for good. Dirty records are kept (a local change is never dropped). Mobile Sync limits
    /// this to records carrying the sync's id; here records carry none, so the scope is the
    /// sync's datasets. Each dataset is listed from sync count 0 (every record). Cursors and
    /// status are not changed.
    /// - Returns: how many records were removed.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` for an unknown sync, a ``SyncType/syncUp``
    ///   or one running; transport and store errors.
    public func cleanResyncGhosts(_ name: String) async throws -> Int {
        try claim(name)
        defer { release(name) }
        guard let state = hub.state(name) else { throw SyncClientError.invalidParameter("there is no sync named \(name)") }
        guard state.type.isDown else { throw SyncClientError.invalidParameter("sync \(name) is a syncUp; cleanResyncGhosts applies to syncs that pull") }
        let identity = try await client.identity()
        var removed = 0
        for ds in state.datasets {
            try Task.checkCancellation()
            removed += try await cleanGhosts(dataset: ds, identity: identity)
        }
        return removed
    }

    // MARK: Helpers

    func save(_ state: SyncState) throws {
        try store.saveNamedSync(state)
        hub.publish(state)
    }

    private func claim(_ name: String) throws {
        let claimed = running.withLock { $0.insert(name).inserted }
        guard claimed else { throw SyncClientError.invalidParameter("sync \(name) is already running") }
    }

    private func release(_ name: String) { _ = running.withLock { $0.remove(name) } }
}

/// The manager's in-memory mirror of the persisted states, and the observers of them: one lock,
/// so that an observer gets the current state and then every change, in order.
final class StateHub: Sendable {
    private struct Observer {
        var name: String
        var continuation: AsyncStream<SyncState>.Continuation
    }

    private struct Inner {
        var states: [String: SyncState]
        var observers: [Int: Observer] = [:]
        var nextID = 0
        var finished = false
    }

    private let inner: Mutex<Inner>

    init(_ states: [SyncState]) {
        inner = Mutex(Inner(states: Dictionary(states.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })))
    }

    func state(_ name: String) -> SyncState? { inner.withLock { $0.states[name] } }

    func all() -> [SyncState] { inner.withLock { Array($0.states.values) } }

    /// Observers alive (tests check that none leaks).
    var observerCount: Int { inner.withLock { $0.observers.count } }

    /// Sets the state of its sync and hands it to that sync's observers.
    func publish(_ state: SyncState) {
        inner.withLock { inner in
            inner.states[state.name] = state
            for observer in inner.observers.values where observer.name == state.name { observer.continuation.yield(state) }
        }
    }

    /// Forgets a sync and finishes its observers.
    func remove(_ name: String) {
        let ending = inner.withLock { inner -> [Observer] in
            inner.states[name] = nil
            let ending = inner.observers.filter { $0.value.name == name }
            for id in ending.keys { inner.observers[id] = nil }
            return Array(ending.values)
        }
        // Outside the lock: finishing runs onTermination, which takes it.
        for observer in ending { observer.continuation.finish() }
    }

    func subscribe(_ name: String) -> AsyncStream<SyncState> {
        let (stream, continuation) = AsyncStream<SyncState>.makeStream(bufferingPolicy: .unbounded)
        let id = inner.withLock { inner -> Int in
            inner.nextID += 1
            return inner.nextID
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.inner.withLock { $0.observers.removeValue(forKey: id) }
        }
        let registered = inner.withLock { inner -> Bool in
            guard !inner.finished else { return false }
            inner.observers[id] = Observer(name: name, continuation: continuation)
            if let current = inner.states[name] { continuation.yield(current) }
            return true
        }
        if !registered { continuation.finish() }
        return stream
    }

    /// Finishes every observer (the manager is going away).
    func finishAll() {
        let ending = inner.withLock { inner -> [Observer] in
            inner.finished = true
            defer { inner.observers = [:] }
            return Array(inner.observers.values)
        }
        for observer in ending { observer.continuation.finish() }
    }
}
