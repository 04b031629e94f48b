import LedgerStorage

/// A record as Cognito returns it: key, value (nil when removed) and its sync state.
public struct Record: Hashable, Sendable {
    /// The record key.
    public let key: String
    /// Value, sync count, dates and author.
    public let state: RecordState

    /// The value, or nil for a removed record.
    public var value: String? { state.value }
    /// The offset of the entry that last changed it.
    public var syncCount: UInt64 { state.syncCount }
}

/// What ``Ledger/listRecords(_:after:maxResults:nextToken:)`` returns.
public struct RecordsPage: Sendable {
    /// The records changed after the requested sync count (removed ones without a value), in
    /// order of sync count, then key.
    public var records: [Record]
    /// A token for the next page, or nil on the last page.
    public var nextToken: String?
    /// The dataset's sync count.
    public var datasetSyncCount: UInt64
    /// Whether the dataset exists (written and not deleted since).
    public var datasetExists: Bool
    /// Whether the dataset was deleted after the requested sync count.
    public var datasetDeletedAfterRequestedSyncCount: Bool
    /// Who last changed the dataset.
    public var lastModifiedBy: String?
    /// The sync session token for ``Ledger/updateRecords(_:patches:deviceID:caller:sessionToken:)``.
    public var syncSessionToken: String
    /// The datasets an identity merge copied into this identity under this dataset's name
    /// (`<name>.<merged identity>`), until they or this dataset are deleted.
    public var mergedDatasetNames: [String] = []
}

/// A dataset's metadata as Cognito describes it.
public struct DatasetDescription: Hashable, Sendable {
    /// The stream (pool, identity, dataset).
    public let stream: StreamName
    /// When it was created (again, after a delete).
    public let created: Timestamp
    /// When it last changed.
    public let lastModified: Timestamp
    /// Who changed it last.
    public let lastModifiedBy: String
    /// UTF-8 bytes of its records' keys and values.
    public let dataStorage: UInt64
    /// Records with a value.
    public let numRecords: UInt64
    /// Its sync count.
    public let syncCount: UInt64

    init(stream: StreamName, state: DatasetState) {
        self.stream = stream
        created = state.created
        lastModified = state.lastModified
        lastModifiedBy = state.lastModifiedBy
        dataStorage = state.bytes
        numRecords = state.recordCount
        syncCount = state.syncCount
    }
}

/// A page of ``Ledger/listDatasets(pool:identity:maxResults:nextToken:)``.
public struct DatasetsPage: Sendable {
    /// The datasets, by name.
    public var datasets: [DatasetDescription]
    /// A token for the next page, or nil.
    public var nextToken: String?
}

/// An identity's usage.
public struct IdentityUsage: Hashable, Sendable {
    /// The pool.
    public let pool: IdentityPoolID
    /// The identity.
    public let identity: IdentityID
    /// Its datasets that exist.
    public let datasetCount: Int
    /// UTF-8 bytes of their records.
    public let dataStorage: UInt64
    /// When any of them last changed (deletes included).
    public let lastModified: Timestamp?
}

/// An identity pool's usage.
public struct PoolUsage: Hashable, Sendable {
    /// The pool.
    public let pool: IdentityPoolID
    /// Sync sessions issued for it.
    public let syncSessionsCount: UInt64
    /// UTF-8 bytes of all its datasets' records.
    public let dataStorage: UInt64
    /// When any of its datasets last changed.
    public let lastModified: Timestamp?
}

/// The result of a successful update.
public struct UpdateResult: Sendable {
    /// The records the call changed, each carrying the dataset's new sync count.
    public let records: [Record]
    /// The dataset's sync count after the call.
    public let syncCount: UInt64
    /// Whether this is the stored answer to an earlier call with the same idempotency key
    /// (nothing was written).
    public internal(set) var replayed = false
}
