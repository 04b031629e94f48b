public import Foundation

/// A record as the server has it (ListRecords, UpdateRecords).
public struct RemoteRecord: Sendable, Hashable {
    /// The key.
    public var key: String
    /// The value; nil for a removed record.
    public var value: String?
    /// The sync count of its last change.
    public var syncCount: UInt64
    /// The server's time of its last change.
    public var lastModified: Date?
    /// Who changed it last.
    public var lastModifiedBy: String?
    /// The device's own time of its last change, if it sent one.
    public var deviceLastModified: Date?

    /// A record.
    public init(key: String, value: String?, syncCount: UInt64, lastModified: Date? = nil, lastModifiedBy: String? = nil, deviceLastModified: Date? = nil) {
        self.key = key
        self.value = value
        self.syncCount = syncCount
        self.lastModified = lastModified
        self.lastModifiedBy = lastModifiedBy
        self.deviceLastModified = deviceLastModified
    }
}

/// What a pull (ListRecords after a sync count, every page) returned. As in the SDKs, the
/// dataset fields are the last page's.
public struct RemoteUpdates: Sendable, Hashable {
    /// The records changed after the requested sync count, all pages.
    public var records: [RemoteRecord]
    /// The dataset's sync count.
    public var datasetSyncCount: UInt64
    /// Whether the dataset exists on the server.
    public var datasetExists: Bool
    /// Whether it was deleted after the requested sync count.
    public var deletedAfterRequestedSyncCount: Bool
    /// Datasets merged into this one's name (an identity merge).
    public var mergedDatasetNames: [String]
    /// The session token for the push that follows.
    public var syncSessionToken: String

    /// A pull's result.
    public init(records: [RemoteRecord], datasetSyncCount: UInt64, datasetExists: Bool, deletedAfterRequestedSyncCount: Bool,
                mergedDatasetNames: [String], syncSessionToken: String) {
        self.records = records
        self.datasetSyncCount = datasetSyncCount
        self.datasetExists = datasetExists
        self.deletedAfterRequestedSyncCount = deletedAfterRequestedSyncCount
        self.mergedDatasetNames = mergedDatasetNames
        self.syncSessionToken = syncSessionToken
    }
}

/// One change pushed with UpdateRecords.
public struct RecordPatch: Sendable, Hashable {
    /// The key.
    public var key: String
    /// The new value; nil removes the record (`Op=remove`).
    public var value: String?
    /// The record's sync count as this device last saw it (0 for a new record).
    public var syncCount: UInt64
    /// When the device changed it.
    public var deviceLastModified: Date?

    /// A patch.
    public init(key: String, value: String?, syncCount: UInt64, deviceLastModified: Date?) {
        self.key = key
        self.value = value
        self.syncCount = syncCount
        self.deviceLastModified = deviceLastModified
    }
}

/// A dataset's metadata as the server has it (ListDatasets, DescribeDataset).
public struct RemoteDataset: Sendable, Hashable {
    /// The dataset name.
    public var name: String
    /// When it was created.
    public var created: Date?
    /// When it last changed.
    public var lastModified: Date?
    /// Who changed it last.
    public var lastModifiedBy: String?
    /// Its size in bytes.
    public var bytes: UInt64
    /// Its records.
    public var records: UInt64

    /// Metadata.
    public init(name: String, created: Date?, lastModified: Date?, lastModifiedBy: String?, bytes: UInt64, records: UInt64) {
        self.name = name
        self.created = created
        self.lastModified = lastModified
        self.lastModifiedBy = lastModifiedBy
        self.bytes = bytes
        self.records = records
    }
}

/// How the client reaches a server's datasets of one identity. ``CognitoSyncTransport`` speaks
/// the Cognito Sync REST API; tests and other transports implement the same calls.
public protocol SyncTransport: Sendable {
    /// The identity whose datasets this transport reaches now. With credentials from Cognito
    /// Identity it can change (a login merged the identity into another): the client renames
    /// the old identity's local datasets when it does.
    func identityID() async throws -> String

    /// ListRecords after `lastSyncCount`, every page (MaxResults 1024, NextToken), for `identity`.
    func listUpdates(identity: String, dataset: String, after lastSyncCount: UInt64) async throws -> RemoteUpdates

    /// UpdateRecords: the patches, all or nothing, with the pull's session token.
    /// - Throws: ``SyncClientError/conflict(_:)`` on a 409.
    func putRecords(identity: String, dataset: String, patches: [RecordPatch], sessionToken: String, deviceID: String?) async throws -> [RemoteRecord]

    /// Pushes local changes made on top of sync count `base` (the dataset's cursor): as
    /// ``putRecords(identity:dataset:patches:sessionToken:deviceID:)``, or — when it is smaller
    /// on the wire — as a zstd segment of offline changes. Same result and errors.
    func pushChanges(identity: String, dataset: String, base: UInt64, patches: [RecordPatch], sessionToken: String, deviceID: String?) async throws -> [RemoteRecord]

    /// DeleteDataset. A dataset the server does not have is not an error (a local-only dataset).
    func deleteDataset(identity: String, dataset: String) async throws

    /// ListDatasets, every page.
    func listDatasets(identity: String) async throws -> [RemoteDataset]

    /// DescribeDataset; nil when the server has no such dataset.
    func describeDataset(identity: String, dataset: String) async throws -> RemoteDataset?
}

/// Why a client call failed.
public enum SyncClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server refused a push: a record changed since this device last saw it (409).
    case conflict(String)
    /// A limit of the server or the client (records, bytes, key or value length, datasets).
    case limitExceeded(String)
    /// The credentials were refused or cannot be had.
    case notAuthorized(String)
    /// The server has no such thing.
    case notFound(String)
    /// The server could not be reached (or did not answer): try again later.
    case network(String)
    /// Another answer of the server: its status, error type and message.
    case server(status: Int, type: String, message: String)
    /// A bad argument, said before anything was sent or stored.
    case invalidParameter(String)
    /// Conflicts that no handler resolved: the local records stay as they are (dirty).
    case unresolvedConflicts([String])
    /// The dataset was deleted on the server and the handler kept the local copy.
    case datasetDeletedOnServer(String)
    /// The sync was cancelled by a handler (merged datasets not accepted).
    case cancelled(String)
    /// Pushes kept meeting changes of other devices: gave up after this many attempts.
    case retriesExhausted(Int)
    /// The local store failed.
    case store(String)

    public var description: String {
        switch self {
        case .conflict(let m): "conflict: \(m)"
        case .limitExceeded(let m): "limit exceeded: \(m)"
        case .notAuthorized(let m): "not authorized: \(m)"
        case .notFound(let m): "not found: \(m)"
        case .network(let m): "the server cannot be reached: \(m)"
        case .server(let status, let type, let message): "the server answered \(status) \(type): \(message)"
        case .invalidParameter(let m): "invalid parameter: \(m)"
        case .unresolvedConflicts(let keys): "unresolved conflicts on \(keys.count) record(s): \(keys.prefix(10).joined(separator: ", "))"
        case .datasetDeletedOnServer(let name): "dataset \(name) was deleted on the server; the local copy was kept"
        case .cancelled(let m): "cancelled: \(m)"
        case .retriesExhausted(let n): "synchronize gave up after \(n) attempts: other devices kept changing the dataset"
        case .store(let m): "local store: \(m)"
        }
    }
}

extension SyncTransport {
    /// UpdateRecords: a transport without a segment path pushes every change that way.
    public func pushChanges(identity: String, dataset: String, base: UInt64, patches: [RecordPatch], sessionToken: String, deviceID: String?) async throws -> [RemoteRecord] {
        try await putRecords(identity: identity, dataset: dataset, patches: patches, sessionToken: sessionToken, deviceID: deviceID)
    }
}
