extension CognitoSync {
    /// The answer to a segment of offline changes (`POST /segments?mode=offline`, SyncLedger's
    /// own operation beside Cognito Sync's, in the same style): what was written and which keys
    /// conflicted. Without `partial=true` a conflict is a 409 instead and nothing is written.
    public struct OfflineMergeResponse: Codable, Sendable, Hashable {
        /// A key that changed on the server after the segment's base.
        public struct Conflict: Codable, Sendable, Hashable {
            /// The record key.
            public var key: String
            /// The sync count the device's change was based on.
            public var baseSyncCount: UInt64?
            /// The record's sync count on the server.
            public var syncCount: UInt64?

            /// A conflict.
            public init(key: String, baseSyncCount: UInt64? = nil, syncCount: UInt64? = nil) {
                self.key = key
                self.baseSyncCount = baseSyncCount
                self.syncCount = syncCount
            }

            enum CodingKeys: String, CodingKey { case key = "Key", baseSyncCount = "BaseSyncCount", syncCount = "SyncCount" }

            /// Decodes the JSON form (a number out of range names its member).
            public init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                key = try c.decode(String.self, forKey: .key)
                baseSyncCount = try c.decodeNumber(UInt64.self, forKey: .baseSyncCount)
                syncCount = try c.decodeNumber(UInt64.self, forKey: .syncCount)
            }
        }

        /// Whether the device's entries applied as they were (its base was the server's head).
        public var fastForward: Bool?
        /// The dataset's sync count after the merge.
        public var datasetSyncCount: UInt64?
        /// The records written (key, value — none when removed — and sync count).
        public var records: [Record]?
        /// The keys not written because they changed on the server.
        public var conflicts: [Conflict]?

        /// An answer.
        public init(fastForward: Bool? = nil, datasetSyncCount: UInt64? = nil, records: [Record]? = nil, conflicts: [Conflict]? = nil) {
            self.fastForward = fastForward
            self.datasetSyncCount = datasetSyncCount
            self.records = records
            self.conflicts = conflicts
        }

        enum CodingKeys: String, CodingKey {
            case fastForward = "FastForward", datasetSyncCount = "DatasetSyncCount", records = "Records", conflicts = "Conflicts"
        }

        /// Decodes the JSON form (a number out of range names its member).
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            fastForward = try c.decodeIfPresent(Bool.self, forKey: .fastForward)
            datasetSyncCount = try c.decodeNumber(UInt64.self, forKey: .datasetSyncCount)
            records = try c.decodeIfPresent([Record].self, forKey: .records)
            conflicts = try c.decodeIfPresent([Conflict].self, forKey: .conflicts)
        }
    }
}
