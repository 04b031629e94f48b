import Foundation
import SyncLedgerWire

/// What one ``SyncClient/synchronize(_:handler:)`` did.
public struct SyncReport: Sendable, Hashable {
    /// The dataset.
    public var dataset: String
    /// Records written from the server.
    public var pulled: Int = 0
    /// Records pushed and accepted.
    public var pushed: Int = 0
    /// Conflicts met (all resolved, or the sync would have failed).
    public var conflicts: Int = 0
    /// Datasets reported as merged into this one's name.
    public var merged: [String] = []
    /// Whether the dataset was deleted (on the server, or the local delete told to it).
    public var deleted = false
    /// Attempts made (a push that met a change of another device pulls again).
    public var attempts = 0
    /// The dataset's sync count on this device afterwards.
    public var lastSyncCount: Int64 = 0
}

/// A client of one identity pool: the local store, the transport to the server, and the
/// Cognito Sync Manager's operations — open, get, put, remove, delete and synchronize a
/// dataset — with the semantics of the AWS SDKs' sync managers (see ``synchronize(_:handler:)``).
///
/// Local operations never touch the network and work offline; `synchronize` does.
public final class SyncClient: Sendable {
    /// The local store.
    public let store: ClientStore
    /// The transport to the server.
    public let transport: any SyncTransport
    /// The identity pool.
    public let pool: String
    /// The device id sent with pushes (the store's own, unless given).
    public let deviceID: String
    /// How many times a sync pulls again after its push met a change of another device.
    public let maxRetries: Int
    let locks = DatasetLocks()

    /// A client.
    public init(store: ClientStore, transport: any SyncTransport, pool: String, deviceID: String? = nil, maxRetries: Int = 3) throws {
        self.store = store
        self.transport = transport
        self.pool = pool
        self.deviceID = try deviceID ?? store.deviceID()
        self.maxRetries = maxRetries
    }

    /// The identity in use. When the transport's identity differs from the one the store's
    /// datasets belong to (a login merged it), the old identity's datasets are renamed
    /// `<name>.<oldIdentityId>` first, as the SDKs do.
    public func identity() async throws -> String {
        let current = try await transport.identityID()
        let stored = try store.currentIdentity(pool: pool)
        if stored != current { try store.changeIdentity(pool: pool, from: stored, to: current) }
        return current
    }

    static func checkName(_ name: String) throws -> String {
        do { return try DatasetName(name).rawValue } catch { throw SyncClientError.invalidParameter(error.message) }
    }

    // MARK: Local operations

    /// The value of `key` (nil when absent or removed).
    public func get(_ dataset: String, _ key: String) async throws -> String? {
        try store.record(identity: try await identity(), dataset: try Self.checkName(dataset), key: key)?.value
    }

    /// Every record with a value.
    public func getAll(_ dataset: String) async throws -> [String: String] {
        try store.records(identity: try await identity(), dataset: try Self.checkName(dataset)).compactMapValues(\.value)
    }

    /// Sets `key` to `value` locally (synced by the next ``synchronize(_:handler:)``).
    @discardableResult
    public func put(_ dataset: String, _ key: String, _ value: String) async throws -> Bool {
        try store.put(identity: try await identity(), dataset: try Self.checkName(dataset), key: key, value: value)
    }

    /// Sets (nil: removes) several records locally in one transaction: all or none.
    /// - Returns: how many changed.
    @discardableResult
    public func put(_ dataset: String, _ values: [String: String?]) async throws -> Int {
        try store.put(identity: try await identity(), dataset: try Self.checkName(dataset), values: values)
    }

    /// Removes `key` locally (the removal is synced).
    @discardableResult
    public func remove(_ dataset: String, _ key: String) async throws -> Bool {
        try store.put(identity: try await identity(), dataset: try Self.checkName(dataset), key: key, value: nil)
    }

    /// UTF-8 bytes of the dataset's keys and values.
    public func sizeInBytes(_ dataset: String) async throws -> UInt64 {
        try store.dataset(identity: try await identity(), name: try Self.checkName(dataset))?.bytes ?? 0
    }

    /// Deletes the dataset locally; the next sync deletes it on the server.
    public func delete(_ dataset: String) async throws {
        try store.deleteDataset(identity: try await identity(), dataset: try Self.checkName(dataset))
    }

    /// The local datasets (deleted ones not synced yet included), by name.
    public func listDatasets() async throws -> [(name: String, dataset: LocalDataset)] {
        try store.datasets(identity: try await identity())
    }

    /// The server's datasets of the identity (ListDatasets): refreshes what the app knows of
    /// datasets made by other devices.
    public func refreshDatasetMetadata() async throws -> [RemoteDataset] {
        try await transport.listDatasets(identity: try await identity())
    }
}

/// One sync at a time per dataset; waiters run in arrival order.
actor DatasetLocks {
    private var busy: Set<String> = []
    private var waiters: [String: [CheckedContinuation<Void, Never>]] = [:]

    func acquire(_ key: String) async {
        if busy.insert(key).inserted { return }
        await withCheckedContinuation { waiters[key, default: []].append($0) }
    }

    func release(_ key: String) {
        if var queue = waiters[key], !queue.isEmpty {
            let next = queue.removeFirst()
            waiters[key] = queue.isEmpty ? nil : queue
            next.resume()
        } else {
            busy.remove(key)
        }
    }
}
