extension CognitoSync {
    /// A dataset's description (botocore's `Dataset`). The model requires no member;
    /// SyncLedger requires `DatasetName`.
    public struct Dataset: Codable, Sendable, Hashable {
        /// The identity that owns it.
        public var identityId: String?
        /// Its name.
        public var datasetName: String
        /// When it was made.
        public var creationDate: Timestamp?
        /// When it last changed.
        public var lastModifiedDate: Timestamp?
        /// Who last changed it.
        public var lastModifiedBy: String?
        /// UTF-8 bytes of its keys and values.
        public var dataStorage: UInt64?
        /// Records with a value.
        public var numRecords: UInt64?

        /// A description.
        public init(identityId: String? = nil, datasetName: String, creationDate: Timestamp? = nil, lastModifiedDate: Timestamp? = nil,
                    lastModifiedBy: String? = nil, dataStorage: UInt64? = nil, numRecords: UInt64? = nil) {
            self.identityId = identityId
            self.datasetName = datasetName
            self.creationDate = creationDate
            self.lastModifiedDate = lastModifiedDate
            self.lastModifiedBy = lastModifiedBy
            self.dataStorage = dataStorage
            self.numRecords = numRecords
        }

        enum CodingKeys: String, CodingKey {
            case identityId = "IdentityId", datasetName = "DatasetName", creationDate = "CreationDate", lastModifiedDate = "LastModifiedDate"
            case lastModifiedBy = "LastModifiedBy", dataStorage = "DataStorage", numRecords = "NumRecords"
        }

        /// Decodes the JSON form; dates as epoch seconds.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            identityId = try c.decodeIfPresent(String.self, forKey: .identityId)
            datasetName = try c.decode(String.self, forKey: .datasetName)
            creationDate = try c.decodeEpochSeconds(forKey: .creationDate)
            lastModifiedDate = try c.decodeEpochSeconds(forKey: .lastModifiedDate)
            lastModifiedBy = try c.decodeIfPresent(String.self, forKey: .lastModifiedBy)
            dataStorage = try c.decodeNumber(UInt64.self, forKey: .dataStorage)
            numRecords = try c.decodeNumber(UInt64.self, forKey: .numRecords)
        }

        /// Encodes the JSON form, leaving out what is nil; dates as epoch seconds.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeIfPresent(identityId, forKey: .identityId)
            try c.encode(datasetName, forKey: .datasetName)
            try c.encodeEpochSeconds(creationDate, forKey: .creationDate)
            try c.encodeEpochSeconds(lastModifiedDate, forKey: .lastModifiedDate)
            try c.encodeIfPresent(lastModifiedBy, forKey: .lastModifiedBy)
            try c.encodeIfPresent(dataStorage, forKey: .dataStorage)
            try c.encodeIfPresent(numRecords, forKey: .numRecords)
        }
    }

    /// ListDatasets' query (`GET …/datasets`, see ``CognitoSync/datasetsPath(pool:identity:)``).
    public struct ListDatasetsRequest: Sendable, Hashable {
        /// The page to read, from the previous page's `NextToken`.
        public var nextToken: String?
        /// The most datasets in a page.
        public var maxResults: Int?

        /// A query.
        public init(nextToken: String? = nil, maxResults: Int? = nil) {
            self.nextToken = nextToken
            self.maxResults = maxResults
        }

        /// The query parameters under botocore's names (`maxResults`, `nextToken`), unencoded,
        /// those set only.
        public var queryItems: [(name: String, value: String)] {
            var items: [(name: String, value: String)] = []
            if let maxResults { items.append(("maxResults", String(maxResults))) }
            if let nextToken { items.append(("nextToken", nextToken)) }
            return items
        }
    }

    /// ListDatasets' answer.
    public struct ListDatasetsResponse: Codable, Sendable, Hashable {
        /// The identity's datasets in this page.
        public var datasets: [Dataset]?
        /// How many this page holds.
        public var count: Int?
        /// The token of the next page; nil (or empty) on the last.
        public var nextToken: String?

        /// An answer.
        public init(datasets: [Dataset]? = nil, count: Int? = nil, nextToken: String? = nil) {
            self.datasets = datasets
            self.count = count
            self.nextToken = nextToken
        }

        enum CodingKeys: String, CodingKey { case datasets = "Datasets", count = "Count", nextToken = "NextToken" }

        /// Decodes the JSON form (a number out of range names its member).
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            datasets = try c.decodeIfPresent([Dataset].self, forKey: .datasets)
            count = try c.decodeNumber(Int.self, forKey: .count)
            nextToken = try c.decodeIfPresent(String.self, forKey: .nextToken)
        }
    }

    /// DescribeDataset's answer.
    public struct DescribeDatasetResponse: Codable, Sendable, Hashable {
        /// The dataset.
        public var dataset: Dataset?

        /// An answer.
        public init(dataset: Dataset? = nil) { self.dataset = dataset }

        enum CodingKeys: String, CodingKey { case dataset = "Dataset" }
    }

    /// DeleteDataset's answer: the dataset as it was before the delete.
    public struct DeleteDatasetResponse: Codable, Sendable, Hashable {
        /// The dataset deleted.
        public var dataset: Dataset?

        /// An answer.
        public init(dataset: Dataset? = nil) { self.dataset = dataset }

        enum CodingKeys: String, CodingKey { case dataset = "Dataset" }
    }
}
