extension CognitoSync {
    /// An identity's usage (botocore's `IdentityUsage`): DescribeIdentityUsage.
    public struct IdentityUsage: Codable, Sendable, Hashable {
        /// The `IdentityId` member.
        public var identityId: String?
        /// The `IdentityPoolId` member.
        public var identityPoolId: String?
        /// The `LastModifiedDate` member.
        public var lastModifiedDate: Timestamp?
        /// The `DatasetCount` member.
        public var datasetCount: Int?
        /// The `DataStorage` member.
        public var dataStorage: UInt64?

        /// A value with these members.
        public init(identityId: String?, identityPoolId: String?, lastModifiedDate: Timestamp?, datasetCount: Int?, dataStorage: UInt64?) {
            self.identityId = identityId
            self.identityPoolId = identityPoolId
            self.lastModifiedDate = lastModifiedDate
            self.datasetCount = datasetCount
            self.dataStorage = dataStorage
        }

        enum CodingKeys: String, CodingKey {
            case identityId = "IdentityId", identityPoolId = "IdentityPoolId", lastModifiedDate = "LastModifiedDate"
            case datasetCount = "DatasetCount", dataStorage = "DataStorage"
        }

        /// Decodes the JSON form; the date as epoch seconds.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            identityId = try c.decodeIfPresent(String.self, forKey: .identityId)
            identityPoolId = try c.decodeIfPresent(String.self, forKey: .identityPoolId)
            lastModifiedDate = try c.decodeEpochSeconds(forKey: .lastModifiedDate)
            datasetCount = try c.decodeNumber(Int.self, forKey: .datasetCount)
            dataStorage = try c.decodeNumber(UInt64.self, forKey: .dataStorage)
        }

        /// Encodes the JSON form, leaving out what is nil; the date as epoch seconds.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeIfPresent(identityId, forKey: .identityId)
            try c.encodeIfPresent(identityPoolId, forKey: .identityPoolId)
            try c.encodeEpochSeconds(lastModifiedDate, forKey: .lastModifiedDate)
            try c.encodeIfPresent(datasetCount, forKey: .datasetCount)
            try c.encodeIfPresent(dataStorage, forKey: .dataStorage)
        }
    }

    /// DescribeIdentityUsage's answer.
    public struct DescribeIdentityUsageResponse: Codable, Sendable, Hashable {
        /// The `IdentityUsage` member.
        public var identityUsage: IdentityUsage?
        /// A value with these members.
        public init(identityUsage: IdentityUsage?) { self.identityUsage = identityUsage }
        enum CodingKeys: String, CodingKey { case identityUsage = "IdentityUsage" }
    }

    /// An identity pool's usage (botocore's `IdentityPoolUsage`).
    public struct IdentityPoolUsage: Codable, Sendable, Hashable {
        /// The `IdentityPoolId` member.
        public var identityPoolId: String?
        /// The `SyncSessionsCount` member.
        public var syncSessionsCount: UInt64?
        /// The `DataStorage` member.
        public var dataStorage: UInt64?
        /// The `LastModifiedDate` member.
        public var lastModifiedDate: Timestamp?

        /// A value with these members.
        public init(identityPoolId: String?, syncSessionsCount: UInt64?, dataStorage: UInt64?, lastModifiedDate: Timestamp?) {
            self.identityPoolId = identityPoolId
            self.syncSessionsCount = syncSessionsCount
            self.dataStorage = dataStorage
            self.lastModifiedDate = lastModifiedDate
        }

        enum CodingKeys: String, CodingKey {
            case identityPoolId = "IdentityPoolId", syncSessionsCount = "SyncSessionsCount", dataStorage = "DataStorage"
            case lastModifiedDate = "LastModifiedDate"
        }

        /// Decodes the JSON form; the date as epoch seconds.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            identityPoolId = try c.decodeIfPresent(String.self, forKey: .identityPoolId)
            syncSessionsCount = try c.decodeNumber(UInt64.self, forKey: .syncSessionsCount)
            dataStorage = try c.decodeNumber(UInt64.self, forKey: .dataStorage)
            lastModifiedDate = try c.decodeEpochSeconds(forKey: .lastModifiedDate)
        }

        /// Encodes the JSON form, leaving out what is nil; the date as epoch seconds.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeIfPresent(identityPoolId, forKey: .identityPoolId)
            try c.encodeIfPresent(syncSessionsCount, forKey: .syncSessionsCount)
            try c.encodeIfPresent(dataStorage, forKey: .dataStorage)
            try c.encodeEpochSeconds(lastModifiedDate, forKey: .lastModifiedDate)
        }
    }

    /// DescribeIdentityPoolUsage's answer.
    public struct DescribeIdentityPoolUsageResponse: Codable, Sendable, Hashable {
        /// The `IdentityPoolUsage` member.
        public var identityPoolUsage: IdentityPoolUsage?
        /// A value with these members.
        public init(identityPoolUsage: IdentityPoolUsage?) { self.identityPoolUsage = identityPoolUsage }
        enum CodingKeys: String, CodingKey { case identityPoolUsage = "IdentityPoolUsage" }
    }

    /// ListIdentityPoolUsage's answer: a page of pools.
    public struct ListIdentityPoolUsageResponse: Codable, Sendable, Hashable {
        /// The `IdentityPoolUsages` member.
        public var identityPoolUsages: [IdentityPoolUsage]?
        /// The `MaxResults` member.
        public var maxResults: Int?
        /// The `Count` member.
        public var count: Int?
        /// The `NextToken` member.
        public var nextToken: String?

        /// A value with these members.
        public init(identityPoolUsages: [IdentityPoolUsage]?, maxResults: Int?, count: Int?, nextToken: String?) {
            self.identityPoolUsages = identityPoolUsages
            self.maxResults = maxResults
            self.count = count
            self.nextToken = nextToken
        }

        enum CodingKeys: String, CodingKey {
            case identityPoolUsages = "IdentityPoolUsages", maxResults = "MaxResults", count = "Count", nextToken = "NextToken"
        }
    }

    /// RegisterDevice's body (`POST …/identity/{identity}/device`).
    public struct RegisterDeviceRequest: Codable, Sendable, Hashable {
        /// `APNS`, `APNS_SANDBOX`, `GCM` or `ADM`.
        public var platform: String
        /// The push token the platform gave the device.
        public var token: String

        /// A value with these members.
        public init(platform: String, token: String) {
            self.platform = platform
            self.token = token
        }

        enum CodingKeys: String, CodingKey { case platform = "Platform", token = "Token" }
    }

    /// RegisterDevice's answer: the device's id, for SubscribeToDataset.
    public struct RegisterDeviceResponse: Codable, Sendable, Hashable {
        /// The `DeviceId` member.
        public var deviceId: String?
        /// A value with these members.
        public init(deviceId: String?) { self.deviceId = deviceId }
        enum CodingKeys: String, CodingKey { case deviceId = "DeviceId" }
    }

    /// A pool's push sync settings (botocore's `PushSync`).
    public struct PushSync: Codable, Sendable, Hashable {
        /// SNS platform application ARNs.
        public var applicationArns: [String]?
        /// The role those would be used with (kept, not used: SyncLedger pushes itself).
        public var roleArn: String?

        /// A value with these members.
        public init(applicationArns: [String]?, roleArn: String?) {
            self.applicationArns = applicationArns
            self.roleArn = roleArn
        }

        enum CodingKeys: String, CodingKey { case applicationArns = "ApplicationArns", roleArn = "RoleArn" }
    }

    /// A pool's Cognito Streams settings (botocore's `CognitoStreams`).
    public struct CognitoStreams: Codable, Sendable, Hashable {
        /// The `StreamName` member.
        public var streamName: String?
        /// The `RoleArn` member.
        public var roleArn: String?
        /// `ENABLED` or `DISABLED`.
        public var streamingStatus: String?

        /// A value with these members.
        public init(streamName: String?, roleArn: String?, streamingStatus: String?) {
            self.streamName = streamName
            self.roleArn = roleArn
            self.streamingStatus = streamingStatus
        }

        enum CodingKeys: String, CodingKey { case streamName = "StreamName", roleArn = "RoleArn", streamingStatus = "StreamingStatus" }
    }

    /// SetIdentityPoolConfiguration's body.
    public struct SetIdentityPoolConfigurationRequest: Codable, Sendable, Hashable {
        /// The `PushSync` member.
        public var pushSync: PushSync?
        /// The `CognitoStreams` member.
        public var cognitoStreams: CognitoStreams?

        /// A value with these members.
        public init(pushSync: PushSync? = nil, cognitoStreams: CognitoStreams? = nil) {
            self.pushSync = pushSync
            self.cognitoStreams = cognitoStreams
        }

        enum CodingKeys: String, CodingKey { case pushSync = "PushSync", cognitoStreams = "CognitoStreams" }
    }

    /// Get- and SetIdentityPoolConfiguration's answer.
    public struct IdentityPoolConfigurationResponse: Codable, Sendable, Hashable {
        /// The `IdentityPoolId` member.
        public var identityPoolId: String?
        /// The `PushSync` member.
        public var pushSync: PushSync?
        /// The `CognitoStreams` member.
        public var cognitoStreams: CognitoStreams?

        /// A value with these members.
        public init(identityPoolId: String?, pushSync: PushSync?, cognitoStreams: CognitoStreams?) {
            self.identityPoolId = identityPoolId
            self.pushSync = pushSync
            self.cognitoStreams = cognitoStreams
        }

        enum CodingKeys: String, CodingKey { case identityPoolId = "IdentityPoolId", pushSync = "PushSync", cognitoStreams = "CognitoStreams" }
    }

    /// GetCognitoEvents' answer and SetCognitoEvents' body: event name (`SyncTrigger`) to ARN.
    public struct CognitoEvents: Codable, Sendable, Hashable {
        /// The `Events` member.
        public var events: [String: String]?
        /// A value with these members.
        public init(events: [String: String]?) { self.events = events }
        enum CodingKeys: String, CodingKey { case events = "Events" }
    }

    /// BulkPublish's answer.
    public struct BulkPublishResponse: Codable, Sendable, Hashable {
        /// The `IdentityPoolId` member.
        public var identityPoolId: String?
        /// A value with these members.
        public init(identityPoolId: String?) { self.identityPoolId = identityPoolId }
        enum CodingKeys: String, CodingKey { case identityPoolId = "IdentityPoolId" }
    }

    /// GetBulkPublishDetails' answer.
    public struct GetBulkPublishDetailsResponse: Codable, Sendable, Hashable {
        /// The `IdentityPoolId` member.
        public var identityPoolId: String?
        /// The `BulkPublishStartTime` member.
        public var bulkPublishStartTime: Timestamp?
        /// The `BulkPublishCompleteTime` member.
        public var bulkPublishCompleteTime: Timestamp?
        /// `NOT_STARTED`, `IN_PROGRESS`, `FAILED` or `SUCCEEDED`.
        public var bulkPublishStatus: String?
        /// The `FailureMessage` member.
        public var failureMessage: String?

        /// A value with these members.
        public init(identityPoolId: String?, bulkPublishStartTime: Timestamp?, bulkPublishCompleteTime: Timestamp?, bulkPublishStatus: String?,
                    failureMessage: String?) {
            self.identityPoolId = identityPoolId
            self.bulkPublishStartTime = bulkPublishStartTime
            self.bulkPublishCompleteTime = bulkPublishCompleteTime
            self.bulkPublishStatus = bulkPublishStatus
            self.failureMessage = failureMessage
        }

        enum CodingKeys: String, CodingKey {
            case identityPoolId = "IdentityPoolId", bulkPublishStartTime = "BulkPublishStartTime"
            case bulkPublishCompleteTime = "BulkPublishCompleteTime", bulkPublishStatus = "BulkPublishStatus", failureMessage = "FailureMessage"
        }

        /// Decodes the JSON form; dates as epoch seconds.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            identityPoolId = try c.decodeIfPresent(String.self, forKey: .identityPoolId)
            bulkPublishStartTime = try c.decodeEpochSeconds(forKey: .bulkPublishStartTime)
            bulkPublishCompleteTime = try c.decodeEpochSeconds(forKey: .bulkPublishCompleteTime)
            bulkPublishStatus = try c.decodeIfPresent(String.self, forKey: .bulkPublishStatus)
            failureMessage = try c.decodeIfPresent(String.self, forKey: .failureMessage)
        }

        /// Encodes the JSON form, leaving out what is nil; dates as epoch seconds.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeIfPresent(identityPoolId, forKey: .identityPoolId)
            try c.encodeEpochSeconds(bulkPublishStartTime, forKey: .bulkPublishStartTime)
            try c.encodeEpochSeconds(bulkPublishCompleteTime, forKey: .bulkPublishCompleteTime)
            try c.encodeIfPresent(bulkPublishStatus, forKey: .bulkPublishStatus)
            try c.encodeIfPresent(failureMessage, forKey: .failureMessage)
        }
    }
}
