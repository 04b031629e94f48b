import Foundation
import LedgerStorage

/// An identity pool's push-sync configuration (Cognito's `PushSync`).
public struct PushSyncConfiguration: Sendable, Hashable, Codable {
    /// SNS platform application ARNs.
    public var applicationArns: [String]?
    /// The role Cognito would assume to publish.
    public var roleArn: String?

    /// A configuration.
    public init(applicationArns: [String]? = nil, roleArn: String? = nil) {
        self.applicationArns = applicationArns
        self.roleArn = roleArn
    }
}

/// An identity pool's stream configuration (Cognito's `CognitoStreams`).
public struct StreamsConfiguration: Sendable, Hashable, Codable {
    /// Where changes are streamed to.
    public var streamName: String?
    /// The role to assume for it.
    public var roleArn: String?
    /// `ENABLED` or `DISABLED`.
    public var streamingStatus: String?

    /// A configuration.
    public init(streamName: String? = nil, roleArn: String? = nil, streamingStatus: String? = nil) {
        self.streamName = streamName
        self.roleArn = roleArn
        self.streamingStatus = streamingStatus
    }
}

/// What GetIdentityPoolConfiguration returns.
public struct PoolConfiguration: Sendable, Hashable, Codable {
    /// Push sync, when configured.
    public var pushSync: PushSyncConfiguration?
    /// Cognito streams, when configured.
    public var cognitoStreams: StreamsConfiguration?

    /// A configuration.
    public init(pushSync: PushSyncConfiguration? = nil, cognitoStreams: StreamsConfiguration? = nil) {
        self.pushSync = pushSync
        self.cognitoStreams = cognitoStreams
    }
}

/// The state of an identity pool's bulk publish (Cognito's status machine).
public struct BulkPublishDetails: Sendable, Hashable, Codable {
    /// `NOT_STARTED`, `IN_PROGRESS`, `FAILED` or `SUCCEEDED`.
    public var status: String
    /// When the latest one started.
    public var started: Timestamp?
    /// When it completed.
    public var completed: Timestamp?
    /// Why it failed.
    public var failureMessage: String?
}

/// Devices, subscriptions, pool configuration, Cognito events and bulk-publish state live in
/// system streams of each pool — identity `_syncledger:0` — so they are versioned, hashed and
/// replicated like every dataset. That identity is reserved: the Cognito API refuses it.
extension Ledger {
    /// The reserved identity that owns a pool's system streams.
    public static let systemIdentity = try! IdentityID("_syncledger:0")

    static func systemStream(_ pool: IdentityPoolID, _ name: String) -> StreamName {
        StreamName(pool: pool, identity: systemIdentity, dataset: try! DatasetName(name))
    }

    /// Refuses the reserved identity in the public API.
    static func requireUserIdentity(_ identity: IdentityID) throws(LedgerError) {
        if identity == systemIdentity {
            throw LedgerError(.invalidParameter, "identity id \(identity) is reserved for SyncLedger's own records")
        }
    }

    /// Reads one record of a stream (nil when absent or removed).
    func recordValue(_ stream: StreamName, key: String) throws -> String? {
        try read { txn in try recordValue(txn, stream, key: key) }
    }

    /// ``recordValue(_:key:)`` in `txn`.
    func recordValue(_ txn: Transaction, _ stream: StreamName, key: String) throws -> String? {
        guard let head = try head(txn, stream) else { return nil }
        let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id)
        return try view.storedRecord(key)?.value
    }

    /// The live records of `stream` whose keys start with `prefix` (at most 400 UTF-8 bytes,
    /// so that it is stored inline in every matching key), in key order.
    func records(_ stream: StreamName, prefix: String) throws -> [(String, String)] {
        try read { txn in
            guard let head = try head(txn, stream) else { return [] }
            return try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id)
                .storedRecords(prefix: prefix).map { ($0.key, $0.value) }
        }
    }

    /// An edit of a system stream, in one write: `edit` reads the stream's view as it is in the
    /// write's transaction and says what to append (nothing: no entry) and what to answer.
    func appendSystem<T: Sendable>(_ stream: StreamName, author: String,
                                   edit: @escaping @Sendable (StoredDatasetView) throws -> (events: [Event], answer: T)) async throws -> T {
        defer { if stream.dataset.rawValue == "configuration" { dictionaries.configurationChanged() } }
        return try await write(on: stream) { [self] txn in
            var draft = try openEntry(txn, on: stream)
            let (list, answer) = try edit(draft.view)
            if !list.isEmpty { try self.append(txn, &draft, author: author, events: list) }
            return answer
        }
    }

    /// ``appendSystem(_:author:edit:)`` for an edit that answers nothing.
    func appendSystem(_ stream: StreamName, author: String, events: @escaping @Sendable (StoredDatasetView) throws -> [Event]) async throws {
        try await appendSystem(stream, author: author) { view in (try events(view), ()) }
    }

    private static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return e
    }()

    static func json(_ value: some Encodable) -> String {
        String(decoding: try! encoder.encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ text: String, stream: StreamName) throws -> T {
        do { return try JSONDecoder().decode(type, from: Data(text.utf8)) } catch {
            throw LedgerError(.corruptData, "a stored \(type) does not decode: \(error)", stream: stream)
        }
    }

    // MARK: Pool configuration and events

    /// The pool's push-sync and streams configuration (empty when never set).
    public func poolConfiguration(_ pool: IdentityPoolID) throws -> PoolConfiguration {
        let stream = Self.systemStream(pool, "configuration")
        return try recordValue(stream, key: "configuration").map { try Self.decode(PoolConfiguration.self, $0, stream: stream) } ?? PoolConfiguration()
    }

    /// Sets the parts of the configuration given (nil keeps the stored part) and returns the
    /// result. Every change is an entry of the pool's `configuration` stream.
    public func setPoolConfiguration(_ pool: IdentityPoolID, pushSync: PushSyncConfiguration?, cognitoStreams: StreamsConfiguration?, caller: String) async throws -> PoolConfiguration {
        let stream = Self.systemStream(pool, "configuration")
        return try await appendSystem(stream, author: caller) { view in
            var config = try view.record("configuration")?.value.map { try Self.decode(PoolConfiguration.self, $0, stream: stream) } ?? PoolConfiguration()
            if let pushSync { config.pushSync = pushSync }
            if let cognitoStreams { config.cognitoStreams = cognitoStreams }
            return ([.put(key: "configuration", value: Self.json(config), deviceModified: nil)], config)
        }
    }

    /// The pool's Cognito events (event type → Lambda ARN).
    public func cognitoEvents(_ pool: IdentityPoolID) throws -> [String: String] {
        let stream = Self.systemStream(pool, "configuration")
        return try cognitoEventsCache.value(self, stream, key: "events") { try Self.decode([String: String].self, $0, stream: stream) } ?? [:]
    }

    /// Replaces the pool's Cognito events.
    public func setCognitoEvents(_ pool: IdentityPoolID, _ events: [String: String], caller: String) async throws {
        try await appendSystem(Self.systemStream(pool, "configuration"), author: caller) { _ in
            [.put(key: "events", value: Self.json(events), deviceModified: nil)]
        }
    }

    // MARK: Bulk publish

    /// The pool's bulk-publish state.
    public func bulkPublishDetails(_ pool: IdentityPoolID) throws -> BulkPublishDetails {
        let stream = Self.systemStream(pool, "configuration")
        return try recordValue(stream, key: "bulk-publish").map { try Self.decode(BulkPublishDetails.self, $0, stream: stream) }
            ?? BulkPublishDetails(status: "NOT_STARTED")
    }

    /// Starts a bulk publish: `IN_PROGRESS` now. The server's stream delivery
    /// (`StreamService`) publishes every dataset's current state to the pool's stream sink
    /// and completes it, resuming after a restart; on its own the ledger only keeps the state.
    ///
    /// - Throws: `.invalidParameter` when the pool has no CognitoStreams stream configured;
    ///   `.duplicateRequest` while one is in progress; `.alreadyStreamed` within 24 hours of
    ///   one that succeeded.
    public func beginBulkPublish(_ pool: IdentityPoolID, caller: String) async throws {
        let stream = Self.systemStream(pool, "configuration")
        let now = options.clock()
        try await appendSystem(stream, author: caller) { view in
            let config = try view.record("configuration")?.value.map { try Self.decode(PoolConfiguration.self, $0, stream: stream) }
            guard config?.cognitoStreams?.streamName != nil else {
                throw LedgerError(.invalidParameter, "identity pool \(pool) has no CognitoStreams stream configured")
            }
            guard config?.cognitoStreams?.streamingStatus == "ENABLED" else {
                throw LedgerError(.invalidParameter, "identity pool \(pool) has CognitoStreams streaming disabled; bulk publish needs StreamingStatus ENABLED")
            }
            let state = try view.record("bulk-publish")?.value.map { try Self.decode(BulkPublishDetails.self, $0, stream: stream) }
            if state?.status == "IN_PROGRESS" {
                throw LedgerError(.duplicateRequest, "a bulk publish of identity pool \(pool) is in progress")
            }
            if state?.status == "SUCCEEDED", let done = state?.completed, now.milliseconds - done.milliseconds < 86_400_000 {
                throw LedgerError(.alreadyStreamed, "identity pool \(pool) was bulk-published at \(done); once per 24 hours")
            }
            return [.put(key: "bulk-publish", value: Self.json(BulkPublishDetails(status: "IN_PROGRESS", started: now)), deviceModified: nil)]
        }
    }

    /// Ends the running bulk publish as `SUCCEEDED` or, with a message, `FAILED`; nothing when
    /// none is running, or when the running one did not start at `started` (given: the run the
    /// caller worked on).
    public func completeBulkPublish(_ pool: IdentityPoolID, started: Timestamp? = nil, failure: String? = nil, caller: String) async throws {
        let stream = Self.systemStream(pool, "configuration")
        let now = options.clock()
        try await appendSystem(stream, author: caller) { view in
            guard var state = try view.record("bulk-publish")?.value.map({ try Self.decode(BulkPublishDetails.self, $0, stream: stream) }), state.status == "IN_PROGRESS",
                  started == nil || state.started == started else {
                return []
            }
            state.status = failure == nil ? "SUCCEEDED" : "FAILED"
            state.completed = now
            state.failureMessage = failure
            return [.put(key: "bulk-publish", value: Self.json(state), deviceModified: nil)]
        }
    }
}

