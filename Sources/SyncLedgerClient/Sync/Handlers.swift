/// What a sync asks the app. Every method has a default in ``DefaultSyncHandler`` that loses
/// nothing: conflicts stay unresolved (the sync fails, the local changes stay), a dataset
/// deleted on the server keeps its local copy (the sync fails saying so), and datasets merged
/// into this one's name are reported and the sync goes on (they are separate datasets; nothing
/// is lost by syncing this one).
public protocol SyncHandler: Sendable {
    /// Resolves local changes that meet newer changes of the same records on the server.
    /// - Returns: a resolution per key (keys left out stay unresolved), or nil to stop the sync.
    func resolve(conflicts: [Conflict], dataset: String) async -> [String: Resolution]?
    /// The dataset was deleted on the server after this device last synced it.
    /// - Returns: true to delete the local copy too; false to keep it (the sync fails with
    ///   ``SyncClientError/datasetDeletedOnServer(_:)``).
    func datasetDeleted(_ dataset: String) async -> Bool
    /// Datasets named `<dataset>.<identity>` came from an identity merge (on the server, or
    /// from this device's earlier identity).
    /// - Returns: true to go on with the sync; false to stop it (``SyncClientError/cancelled(_:)``).
    func datasetsMerged(_ dataset: String, merged: [String]) async -> Bool
}

/// The handler used when none is given: safe, never drops a change silently.
public struct DefaultSyncHandler: SyncHandler {
    /// The default handler.
    public init() {}
    /// Leaves every conflict unresolved.
    public func resolve(conflicts: [Conflict], dataset: String) async -> [String: Resolution]? { nil }
    /// Keeps the local copy.
    public func datasetDeleted(_ dataset: String) async -> Bool { false }
    /// Goes on.
    public func datasetsMerged(_ dataset: String, merged: [String]) async -> Bool { true }
}

/// Resolves every conflict the same way (`syncledger client sync --resolve remote|local`);
/// otherwise as ``DefaultSyncHandler``.
public struct ResolveAll: SyncHandler {
    /// The resolution of every conflict.
    public let resolution: Resolution
    /// A handler resolving every conflict with `resolution`.
    public init(_ resolution: Resolution) { self.resolution = resolution }
    /// `resolution` for each.
    public func resolve(conflicts: [Conflict], dataset: String) async -> [String: Resolution]? {
        Dictionary(conflicts.map { ($0.key, resolution) }, uniquingKeysWith: { a, _ in a })
    }
    /// Keeps the local copy.
    public func datasetDeleted(_ dataset: String) async -> Bool { false }
    /// Goes on.
    public func datasetsMerged(_ dataset: String, merged: [String]) async -> Bool { true }
}
