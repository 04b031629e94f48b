import Foundation

/// One sync (one log entry of a user's dataset) as a Cognito Streams record: Cognito's stream
/// JSON (`identityPoolId`, `identityId`, `dataSetName`, `operation`, `kinesisSyncRecords`,
/// `kinesisSyncRecordsURL`, `lastModifiedDate`, `payloadType`, `syncCount`) plus `sequence`,
/// the entry's change-feed position, for consumers to drop repeats (delivery is at least once).
///
/// Dates are epoch milliseconds, as in Cognito's stream format. A dataset delete is
/// `"operation":"remove"` with no records; otherwise the operation is `replace` and each event
/// is a record with `op` `replace` (a put) or `remove` (a removed key, `value` null). Payloads
/// are inline (`payloadType` `Inline`, `kinesisSyncRecordsURL` null) unless the record would be
/// larger than a ``StreamPayloadReference``'s limit: then `payloadType` is `S3Url` and
/// `kinesisSyncRecordsURL` a signed URL of the server that answers the records.
public struct StreamRecord: Sendable, Hashable {
    /// The entry's position in the change feed.
    public let sequence: UInt64
    /// `identityId/dataSetName`: the Kinesis partition key.
    public let partitionKey: String
    /// The record as compact JSON with sorted keys.
    public let json: [UInt8]

    /// A record.
    public init(sequence: UInt64, partitionKey: String, json: [UInt8]) {
        self.sequence = sequence
        self.partitionKey = partitionKey
        self.json = json
    }

    /// The record of `entry` in pool `entry.stream.pool`; its records by reference when the
    /// JSON would pass `reference`'s inline limit (see ``StreamPayloadReference``).
    public init(entry: LogEntry, reference: StreamPayloadReference? = nil) {
        self.init(entry: entry, extra: [:], reference: reference)
    }

    /// ``init(entry:reference:)`` with `extra` members (a cluster node's `shard` and
    /// `shardSequence`).
    init(entry: LogEntry, extra: [String: Any], reference: StreamPayloadReference?) {
        let (operation, items) = Self.items(entry)
        var fields = extra
        fields["lastModifiedDate"] = entry.time.milliseconds
        fields["syncCount"] = entry.offset
        self.init(stream: entry.stream, sequence: entry.sequence, operation: operation, items: items,
                  fields: fields, bulk: false, reference: reference)
    }

    /// The `operation` and `kinesisSyncRecords` of `entry`.
    static func items(_ entry: LogEntry) -> (operation: String, items: [[String: Any]]) {
        let time = entry.time.milliseconds
        var operation = "replace"
        var records: [[String: Any]] = []
        for event in entry.events {
            switch event {
            case .put(let key, let value, let device):
                records.append(["key": key, "value": value, "syncCount": entry.offset, "lastModifiedDate": time,
                                "deviceLastModifiedDate": device?.milliseconds ?? time, "op": "replace"])
            case .remove(let key, let device):
                records.append(["key": key, "value": NSNull(), "syncCount": entry.offset, "lastModifiedDate": time,
                                "deviceLastModifiedDate": device?.milliseconds ?? time, "op": "remove"])
            case .erased(let key, let device):
                // Erased by a redaction since it was committed: the key stays, the value does not.
                records.append(["key": key, "value": NSNull(), "syncCount": entry.offset, "lastModifiedDate": time,
                                "deviceLastModifiedDate": device?.milliseconds ?? time, "op": "replace", "erased": true])
            case .deleteDataset:
                operation = "remove"
                records.removeAll()
            }
        }
        return (operation, records)
    }

    /// A record of `stream` with `items` inline, or, past the reference's limit, with
    /// `payloadType` `S3Url`, `kinesisSyncRecords` null and `kinesisSyncRecordsURL` naming them.
    init(stream: StreamName, sequence: UInt64, operation: String, items: [[String: Any]], fields: [String: Any], bulk: Bool,
         reference: StreamPayloadReference?) {
        var object = fields
        object["identityPoolId"] = stream.pool.rawValue
        object["identityId"] = stream.identity.rawValue
        object["dataSetName"] = stream.dataset.rawValue
        object["operation"] = operation
        object["sequence"] = sequence
        if bulk { object["bulkPublish"] = true }
        var inline = object
        inline["kinesisSyncRecords"] = items
        inline["kinesisSyncRecordsURL"] = NSNull()
        inline["payloadType"] = "Inline"
        var json = Self.serialize(inline)
        if let reference, json.count > reference.inlineLimit {
            object["kinesisSyncRecords"] = NSNull()
            object["kinesisSyncRecordsURL"] = reference.url(stream.pool, sequence, bulk)
            object["payloadType"] = "S3Url"
            json = Self.serialize(object)
        }
        self.init(sequence: sequence, partitionKey: "\(stream.identity.rawValue)/\(stream.dataset.rawValue)", json: json)
    }

    /// Compact JSON with sorted keys and unescaped slashes.
    static func serialize(_ object: Any) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8))
    }
}

/// What one read of the change feed gives a stream target.
public struct StreamBatch: Sendable {
    /// The records, in feed order (so in order per dataset).
    public var records: [StreamRecord]
    /// The feed position to move the target's cursor to once the records are acknowledged
    /// (the cursor given when nothing was read).
    public var last: UInt64
}

/// A pool whose configuration names a Cognito stream.
public struct PoolStreamSetting: Sendable, Hashable {
    /// The pool.
    public var pool: IdentityPoolID
    /// Its `StreamName`.
    public var streamName: String
    /// Whether `StreamingStatus` is `ENABLED`.
    public var enabled: Bool
    /// The start of the pool's bulk publish while one is `IN_PROGRESS`.
    public var bulkPublishStarted: Timestamp?
}

extension Ledger {
    /// The log entry a change-feed summary names.
    /// - Throws: `.corruptData` when its stream's index does not lead to it.
    func entry(of s: CommitSummary) throws -> LogEntry {
        guard let entry = try entries(in: s.stream, from: s.offset, limit: 1).first, entry.sequence == s.sequence else {
            throw LedgerError(.corruptData, "the feed names sequence \(s.sequence), which its stream's index lacks", stream: s.stream, offset: s.offset)
        }
        return entry
    }

    /// Every pool whose `CognitoStreams` names a stream, with whether streaming is enabled and
    /// its running bulk publish; and every pool with a bulk publish still `IN_PROGRESS` whose
    /// stream was unset since (stream name empty, not enabled: the run is to be failed).
    public func poolStreamSettings() throws -> [PoolStreamSetting] {
        try poolsWithStreams().compactMap { pool in
            let bulk = try bulkPublishDetails(pool)
            let running = bulk.status == "IN_PROGRESS" ? bulk.started : nil
            guard let c = try poolConfiguration(pool).cognitoStreams, let name = c.streamName, !name.isEmpty else {
                return running.map { PoolStreamSetting(pool: pool, streamName: "", enabled: false, bulkPublishStarted: $0) }
            }
            return PoolStreamSetting(pool: pool, streamName: name, enabled: c.streamingStatus?.uppercased() == "ENABLED", bulkPublishStarted: running)
        }
    }

    /// Where a stream target that has no cursor yet starts: the feed position of the
    /// configuration change that enabled streaming to `streamName` (the first entry of the
    /// pool's configuration stream in the latest unbroken run of "enabled to this name"), so
    /// that every change committed after it is streamed; the end of the feed when the pool's
    /// configuration does not (now) enable it. Cognito streams only new changes.
    public func streamStartSequence(pool: IdentityPoolID, streamName: String) throws -> UInt64 {
        let stream = Self.systemStream(pool, "configuration")
        var runStart: UInt64?
        try forEachEntry(in: stream) { entry in
            for case .put("configuration", let value, _) in entry.events {
                let c = (try? Self.decode(PoolConfiguration.self, value, stream: stream))?.cognitoStreams
                if c?.streamName == streamName, c?.streamingStatus?.uppercased() == "ENABLED" {
                    if runStart == nil { runStart = entry.sequence }
                } else {
                    runStart = nil
                }
            }
            return true
        }
        return try runStart ?? lastSequence
    }

    /// The records of `pool`'s user datasets committed after feed position `cursor`: at most
    /// `maxRecords`, and at most `maxBytes` of JSON unless one record alone is larger; entries
    /// of other pools and internal streams are passed over (and the cursor moves past them).
    /// The batch ends before an entry of the pool's configuration stream (alone, it is that
    /// entry with no records), so a caller that reads the pool's settings before each batch
    /// never streams a change committed after `StreamingStatus` became `DISABLED`.
    ///
    /// - Parameter scanLimit: the most feed entries read in one call.
    public func streamBatch(pool: IdentityPoolID, after cursor: UInt64, maxRecords: Int = 500, maxBytes: Int = 1 << 20,
                            scanLimit: Int = 20_000, reference: StreamPayloadReference? = nil) throws -> StreamBatch {
        let configuration = Self.systemStream(pool, "configuration")
        var batch = StreamBatch(records: [], last: cursor)
        var bytes = 0
        var scanned = 0
        while scanned < scanLimit {
            let summaries = try commitSummaries(after: batch.last, limit: min(4096, scanLimit - scanned))
            for s in summaries {
                if s.stream == configuration {
                    // The pool's settings change here: end the batch, so that what follows is
                    // read under the new settings (a DISABLED holds everything after it).
                    if batch.records.isEmpty { batch.last = s.sequence }
                    return batch
                }
                if s.stream.pool == pool, !s.stream.isInternal {
                    let record = StreamRecord(entry: try entry(of: s), reference: reference)
                    if !batch.records.isEmpty, batch.records.count >= maxRecords || bytes + record.json.count > maxBytes { return batch }
                    batch.records.append(record)
                    bytes += record.json.count
                }
                batch.last = s.sequence
            }
            scanned += summaries.count
            if summaries.count < 4096 { break }
        }
        return batch
    }
}
