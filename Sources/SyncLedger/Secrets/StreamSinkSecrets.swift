import Foundation

/// Where the records of one Cognito `StreamName` go: an HTTP endpoint, a directory of JSON
/// lines, or a Kinesis `PutRecords` endpoint. Kept in the ``SecretStore`` (it holds the HMAC
/// secret or the AWS secret key): never logged, exported or replicated.
public struct StreamSinkConfiguration: Sendable, Equatable, Codable {
    /// The kinds of sink.
    public enum Kind: String, Sendable, Codable {
        /// POST batches of JSON to a URL, signed with HMAC-SHA256.
        case http
        /// Append JSON lines to files in a directory, rotated by size.
        case directory
        /// Kinesis `PutRecords`.
        case kinesis
    }

    /// The Cognito `StreamName` it serves.
    public var streamName: String
    /// Its kind.
    public var kind: Kind
    /// The URL (`http`, `kinesis`).
    public var url: String?
    /// The HMAC secret (`http`).
    public var secret: String?
    /// The folder (`directory`).
    public var directory: String?
    /// The size at which a file is closed and the next begun (`directory`).
    public var maxFileBytes: Int?
    /// The AWS region (`kinesis`).
    public var region: String?
    /// The AWS access key id (`kinesis`).
    public var accessKeyID: String?
    /// The AWS secret access key (`kinesis`).
    public var secretAccessKey: String?
    /// When it was configured.
    public var configured: Timestamp

    /// A sink of `kind` for `streamName`; set the fields of its kind.
    public init(streamName: String, kind: Kind, configured: Timestamp = .now) {
        self.streamName = streamName
        self.kind = kind
        self.configured = configured
    }

    /// Its settings without the secrets (for `syncledger streams status`).
    public var redacted: [String: String] {
        var r = ["streamName": streamName, "kind": kind.rawValue, "configured": configured.description]
        if let url { r["url"] = url }
        if let directory { r["directory"] = directory }
        if let maxFileBytes { r["maxFileBytes"] = String(maxFileBytes) }
        if let region { r["region"] = region }
        if let accessKeyID { r["accessKeyId"] = accessKeyID }
        if secret != nil || secretAccessKey != nil { r["secret"] = "(set)" }
        return r
    }
}

extension SecretStore {
    /// Stores (replacing) the sink of a stream name.
    public func storeStreamSink(_ configuration: StreamSinkConfiguration) throws {
        let bytes = Array(try JSONEncoder().encode(configuration))
        try write { txn in try txn.put(streams, key: Array(configuration.streamName.utf8), value: bytes) }
    }

    /// The sink configured for a stream name, or nil.
    public func streamSink(name: String) throws -> StreamSinkConfiguration? {
        try read { txn in try txn.get(streams, key: Array(name.utf8)) }.map { bytes in
            do { return try JSONDecoder().decode(StreamSinkConfiguration.self, from: Data(bytes)) } catch {
                throw LedgerError(.corruptData, "the stream sink of \(name) does not decode")
            }
        }
    }

    /// Every configured stream sink, by stream name.
    public func streamSinks() throws -> [StreamSinkConfiguration] {
        try read { txn in
            try txn.withCursor(streams) { cursor in
                var result: [StreamSinkConfiguration] = []
                var pair = try cursor.first()
                while let current = pair {
                    if let c = try? JSONDecoder().decode(StreamSinkConfiguration.self, from: Data(current.value)) { result.append(c) }
                    pair = try cursor.next()
                }
                return result
            }
        }
    }

    /// Removes the sink of a stream name.
    /// - Throws: `.notFound` when none is configured.
    public func removeStreamSink(name: String) throws {
        guard try write({ txn in try txn.delete(streams, key: Array(name.utf8)) }) else {
            throw LedgerError(.notFound, "no stream sink is configured for \(name)")
        }
    }
}
