extension CognitoSync {
    /// A record as Cognito Sync answers it (botocore's `Record`): removed records come
    /// without a `Value`. The model requires no member; SyncLedger requires `Key`, as a record
    /// without a key means nothing.
    public struct Record: Codable, Sendable, Hashable {
        /// The record key.
        public var key: String
        /// The value; nil for a removed record.
        public var value: String?
        /// The record's sync count: the dataset's sync count when it last changed.
        public var syncCount: UInt64?
        /// The server's time of its last change.
        public var lastModifiedDate: Timestamp?
        /// Who made that change.
        public var lastModifiedBy: String?
        /// The device's own time of that change, when it sent one.
        public var deviceLastModifiedDate: Timestamp?

        /// A record.
        public init(key: String, value: String?, syncCount: UInt64?, lastModifiedDate: Timestamp? = nil, lastModifiedBy: String? = nil,
                    deviceLastModifiedDate: Timestamp? = nil) {
            self.key = key
            self.value = value
            self.syncCount = syncCount
            self.lastModifiedDate = lastModifiedDate
            self.lastModifiedBy = lastModifiedBy
            self.deviceLastModifiedDate = deviceLastModifiedDate
        }

        enum CodingKeys: String, CodingKey {
            case key = "Key", value = "Value", syncCount = "SyncCount", lastModifiedDate = "LastModifiedDate"
            case lastModifiedBy = "LastModifiedBy", deviceLastModifiedDate = "DeviceLastModifiedDate"
        }

        /// Decodes the JSON form; dates as epoch seconds.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            key = try c.decode(String.self, forKey: .key)
            value = try c.decodeIfPresent(String.self, forKey: .value)
            syncCount = try c.decodeNumber(UInt64.self, forKey: .syncCount)
            lastModifiedDate = try c.decodeEpochSeconds(forKey: .lastModifiedDate)
            lastModifiedBy = try c.decodeIfPresent(String.self, forKey: .lastModifiedBy)
            deviceLastModifiedDate = try c.decodeEpochSeconds(forKey: .deviceLastModifiedDate)
        }

        /// Encodes the JSON form, leaving out what is nil; dates as epoch seconds.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(key, forKey: .key)
            try c.encodeIfPresent(value, forKey: .value)
            try c.encodeIfPresent(syncCount, forKey: .syncCount)
            try c.encodeEpochSeconds(lastModifiedDate, forKey: .lastModifiedDate)
            try c.encodeIfPresent(lastModifiedBy, forKey: .lastModifiedBy)
            try c.encodeEpochSeconds(deviceLastModifiedDate, forKey: .deviceLastModifiedDate)
        }
    }

    /// ListRecords' query (`GET …/datasets/{dataset}/records`; the path names the dataset, see
    /// ``CognitoSync/recordsPath(pool:identity:dataset:)``).
    public struct ListRecordsRequest: Sendable, Hashable {
        /// Records changed after this sync count (0: all).
        public var lastSyncCount: UInt64?
        /// The page to read, from the previous page's `NextToken`.
        public var nextToken: String?
        /// The most records in a page.
        public var maxResults: Int?
        /// A sync session token to go on with (SyncLedger issues a new one per ListRecords).
        public var syncSessionToken: String?

        /// A query.
        public init(lastSyncCount: UInt64? = nil, nextToken: String? = nil, maxResults: Int? = nil, syncSessionToken: String? = nil) {
            self.lastSyncCount = lastSyncCount
            self.nextToken = nextToken
            self.maxResults = maxResults
            self.syncSessionToken = syncSessionToken
        }

        /// The query parameters under botocore's names (`lastSyncCount`, `maxResults`,
        /// `nextToken`, `syncSessionToken`), unencoded, those set only.
        public var queryItems: [(name: String, value: String)] {
            var items: [(name: String, value: String)] = []
            if let lastSyncCount { items.append(("lastSyncCount", String(lastSyncCount))) }
            if let maxResults { items.append(("maxResults", String(maxResults))) }
            if let nextToken { items.append(("nextToken", nextToken)) }
            if let syncSessionToken { items.append(("syncSessionToken", syncSessionToken)) }
            return items
        }
    }

    /// ListRecords' answer (botocore's `ListRecordsResponse`).
    public struct ListRecordsResponse: Codable, Sendable, Hashable {
        /// The records changed after the requested sync count, removed ones without a value.
        public var records: [Record]?
        /// The token of the next page; nil (or empty) on the last.
        public var nextToken: String?
        /// How many records this page holds.
        public var count: Int?
        /// The dataset's sync count.
        public var datasetSyncCount: UInt64?
        /// Who last changed the dataset.
        public var lastModifiedBy: String?
        /// Datasets merged into this one by an identity merge.
        public var mergedDatasetNames: [String]?
        /// Whether the dataset exists.
        public var datasetExists: Bool?
        /// Whether the dataset was deleted after the requested sync count.
        public var datasetDeletedAfterRequestedSyncCount: Bool?
        /// The token UpdateRecords needs.
        public var syncSessionToken: String?

        /// An answer.
        public init(records: [Record]? = nil, nextToken: String? = nil, count: Int? = nil, datasetSyncCount: UInt64? = nil,
                    lastModifiedBy: String? = nil, mergedDatasetNames: [String]? = nil, datasetExists: Bool? = nil,
                    datasetDeletedAfterRequestedSyncCount: Bool? = nil, syncSessionToken: String? = nil) {
            self.records = records
            self.nextToken = nextToken
            self.count = count
            self.datasetSyncCount = datasetSyncCount
            self.lastModifiedBy = lastModifiedBy
            self.mergedDatasetNames = mergedDatasetNames
            self.datasetExists = datasetExists
            self.datasetDeletedAfterRequestedSyncCount = datasetDeletedAfterRequestedSyncCount
            self.syncSessionToken = syncSessionToken
        }

        enum CodingKeys: String, CodingKey {
            case records = "Records", nextToken = "NextToken", count = "Count", datasetSyncCount = "DatasetSyncCount"
            case lastModifiedBy = "LastModifiedBy", mergedDatasetNames = "MergedDatasetNames", datasetExists = "DatasetExists"
            case datasetDeletedAfterRequestedSyncCount = "DatasetDeletedAfterRequestedSyncCount", syncSessionToken = "SyncSessionToken"
        }

        /// Decodes the JSON form (a number out of range names its member).
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            records = try c.decodeIfPresent([Record].self, forKey: .records)
            nextToken = try c.decodeIfPresent(String.self, forKey: .nextToken)
            count = try c.decodeNumber(Int.self, forKey: .count)
            datasetSyncCount = try c.decodeNumber(UInt64.self, forKey: .datasetSyncCount)
            lastModifiedBy = try c.decodeIfPresent(String.self, forKey: .lastModifiedBy)
            mergedDatasetNames = try c.decodeIfPresent([String].self, forKey: .mergedDatasetNames)
            datasetExists = try c.decodeIfPresent(Bool.self, forKey: .datasetExists)
            datasetDeletedAfterRequestedSyncCount = try c.decodeIfPresent(Bool.self, forKey: .datasetDeletedAfterRequestedSyncCount)
            syncSessionToken = try c.decodeIfPresent(String.self, forKey: .syncSessionToken)
        }
    }

    /// UpdateRecords' body (`POST …/datasets/{dataset}`; the path names the dataset, and
    /// botocore's `ClientContext` travels in the `x-amz-Client-Context` header, not here).
    public struct UpdateRecordsRequest: Codable, Sendable, Hashable {
        /// The token from the ListRecords this update follows (required).
        public var syncSessionToken: String
        /// The device the changes come from.
        public var deviceId: String?
        /// The changes, applied all or none.
        public var recordPatches: [RecordPatch]?

        /// A body.
        public init(syncSessionToken: String, deviceId: String? = nil, recordPatches: [RecordPatch]? = nil) {
            self.syncSessionToken = syncSessionToken
            self.deviceId = deviceId
            self.recordPatches = recordPatches
        }

        enum CodingKeys: String, CodingKey {
            case syncSessionToken = "SyncSessionToken", deviceId = "DeviceId", recordPatches = "RecordPatches"
        }
    }

    /// UpdateRecords' answer: the records as the server now has them.
    public struct UpdateRecordsResponse: Codable, Sendable, Hashable {
        /// The records written.
        public var records: [Record]?

        /// An answer.
        public init(records: [Record]? = nil) { self.records = records }

        enum CodingKeys: String, CodingKey { case records = "Records" }
    }
}
