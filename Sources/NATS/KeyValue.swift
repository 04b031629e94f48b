public import Foundation

/// What a Key-Value entry records.
public enum KeyValueOperation: String, Sendable {
    case put = "PUT", delete = "DEL", purge = "PURGE"
}

/// One revision of a key.
public struct KeyValueEntry: Sendable, Equatable {
    public var bucket: String
    public var key: String
    public var value: [UInt8]
    /// The stream sequence of this revision.
    public var revision: UInt64
    public var operation: KeyValueOperation
    public var created: Date
}

extension JetStreamContext {
    /// Creates (or returns, if identical) the bucket `bucket`: stream `KV_<bucket>` on
    /// `$KV.<bucket>.>`, keeping `history` revisions per key, entries expiring after `ttl`.
    public func createKeyValue(bucket: String, replicas: Int = 1, history: Int = 1, ttl: Duration? = nil,
                               storage: StorageType = .file) async throws -> KeyValue {
        try KeyValue.validateBucket(bucket)
        var config = StreamConfig(name: "KV_\(bucket)", subjects: ["$KV.\(bucket).>"], storage: storage,
                                  numReplicas: replicas)
        config.maxMsgsPerSubject = Int64(max(1, history))
        config.maxAge = ttl
        config.allowRollupHdrs = true
        config.denyDelete = true
        config.denyPurge = false
        config.allowDirect = true
        config.discard = .new
        config.maxBytes = -1
        config.maxMsgSize = -1
        config.maxMsgs = -1
        let window: Duration = .seconds(120)
        config.duplicateWindow = ttl.map { $0 > .zero && $0 < window ? $0 : window } ?? window
        try await createStream(config)
        return KeyValue(js: self, bucket: bucket)
    }

    /// The bucket `bucket`, or nil when its stream does not exist.
    public func keyValue(bucket: String) async throws -> KeyValue? {
        try KeyValue.validateBucket(bucket)
        guard try await streamInfo("KV_\(bucket)") != nil else { return nil }
        return KeyValue(js: self, bucket: bucket)
    }

    /// Deletes a bucket and all its keys.
    public func deleteKeyValue(bucket: String) async throws {
        try await deleteStream("KV_\(bucket)")
    }
}

/// A Key-Value bucket on JetStream. Revisions are stream sequences. Reads go to the stream
/// leader (`STREAM.MSG.GET`), so a read after a write sees it.
public struct KeyValue: Sendable {
    public let js: JetStreamContext
    public let bucket: String
    var streamName: String { "KV_\(bucket)" }
    var prefix: String { "$KV.\(bucket)." }

    static func validateBucket(_ bucket: String) throws(KeyValueError) {
        guard !bucket.isEmpty, bucket.utf8.allSatisfy({ isAlnum($0) || $0 == 45 || $0 == 95 }) else {
            throw .invalidBucket(bucket)
        }
    }

    /// Keys: `[-/_=.a-zA-Z0-9]+`, no leading or trailing dot (and no empty token).
    static func validateKey(_ key: String) throws(KeyValueError) {
        guard !key.isEmpty, !key.hasPrefix("."), !key.hasSuffix("."), !key.contains(".."),
              key.utf8.allSatisfy({ isAlnum($0) || [45, 47, 95, 61, 46].contains($0) }) else {
            throw .invalidKey(key)
        }
    }

    private static func isAlnum(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122)
    }

    /// The key's current value; nil when absent, deleted or purged (see ``entry(_:)``).
    public func get(_ key: String) async throws -> KeyValueEntry? {
        guard let e = try await entry(key), e.operation == .put else { return nil }
        return e
    }

    /// The key's latest entry, including a delete or purge marker.
    public func entry(_ key: String) async throws -> KeyValueEntry? {
        try Self.validateKey(key)
        guard let m = try await js.getLastMessage(stream: streamName, subject: prefix + key) else { return nil }
        return entry(from: m)
    }

    func entry(from m: StoredMessage) -> KeyValueEntry? {
        guard m.subject.hasPrefix(prefix) else { return nil }
        let op = m.headers?["KV-Operation"].flatMap(KeyValueOperation.init(rawValue:)) ?? .put
        return KeyValueEntry(bucket: bucket, key: String(m.subject.dropFirst(prefix.count)), value: m.payload,
                             revision: m.sequence, operation: op, created: m.time)
    }

    /// Stores `value`; returns its revision.
    @discardableResult
    public func put(_ key: String, _ value: [UInt8]) async throws -> UInt64 {
        try Self.validateKey(key)
        return try await js.publish(prefix + key, payload: value).sequence
    }

    /// Stores `value` only if the key is absent or deleted; else throws
    /// ``KeyValueError/keyExists(revision:)``.
    @discardableResult
    public func create(_ key: String, _ value: [UInt8]) async throws -> UInt64 {
        do {
            return try await update(key, value, lastRevision: 0)
        } catch KeyValueError.wrongLastRevision {
            guard let e = try await entry(key) else { throw KeyValueError.keyExists(revision: nil) }
            guard e.operation != .put else { throw KeyValueError.keyExists(revision: e.revision) }
            do {
                return try await update(key, value, lastRevision: e.revision)
            } catch KeyValueError.wrongLastRevision {
                throw KeyValueError.keyExists(revision: nil)
            }
        }
    }

    /// Stores `value` only if the key's last revision is `lastRevision` (0: the key has no
    /// entry); else throws ``KeyValueError/wrongLastRevision(current:)``.
    @discardableResult
    public func update(_ key: String, _ value: [UInt8], lastRevision: UInt64) async throws -> UInt64 {
        try Self.validateKey(key)
        do {
            return try await js.publish(prefix + key, payload: value, expectedLastSubjectSequence: lastRevision).sequence
        } catch let e as JetStreamAPIError where e.isWrongLastSequence {
            throw KeyValueError.wrongLastRevision(current: e.currentLastSequence)
        }
    }

    /// Writes a delete marker (history is kept); with `lastRevision`, only if it is the key's
    /// last revision. Returns the marker's revision.
    @discardableResult
    public func delete(_ key: String, lastRevision: UInt64? = nil) async throws -> UInt64 {
        try Self.validateKey(key)
        var h = NATSHeaders()
        h.set("KV-Operation", "DEL")
        do {
            return try await js.publish(prefix + key, payload: [], headers: h,
                                        expectedLastSubjectSequence: lastRevision).sequence
        } catch let e as JetStreamAPIError where e.isWrongLastSequence {
            throw KeyValueError.wrongLastRevision(current: e.currentLastSequence)
        }
    }

    /// Writes a purge marker that removes the key's history (`Nats-Rollup: sub`).
    @discardableResult
    public func purge(_ key: String) async throws -> UInt64 {
        try Self.validateKey(key)
        var h = NATSHeaders()
        h.set("KV-Operation", "PURGE")
        h.set("Nats-Rollup", "sub")
        return try await js.publish(prefix + key, payload: [], headers: h).sequence
    }

    /// The keys that currently have a value (deleted and purged keys excluded).
    public func keys() async throws -> [String] {
        var config = ConsumerConfig(deliverPolicy: .lastPerSubject, ackPolicy: .none)
        config.name = "kvkeys_\(NUID.next(16))"
        config.filterSubject = prefix + ">"
        config.memStorage = true
        config.numReplicas = 1
        config.headersOnly = true
        config.inactiveThreshold = .seconds(30)
        let info = try await js.createConsumer(stream: streamName, config: config)
        defer {
            let js = self.js, stream = streamName, name = info.name
            Task { try? await js.deleteConsumer(stream: stream, consumer: name) }
        }
        var remaining = info.numPending ?? 0
        var keys: [String] = []
        var unanswered = 0
        while remaining > 0 {
            let batch: [JetStreamMessage]
            do {
                batch = try await js.fetch(stream: streamName, consumer: info.name, batch: Int(min(remaining, 1024)), expires: js.timeout)
            } catch let e as JetStreamAPIError where e.code == 503 && unanswered < 40 {
                // No responders: on a cluster the consumer just made may not run on the stream's
                // leader yet when the first pull arrives.
                unanswered += 1
                try await Task.sleep(for: .milliseconds(25))
                continue
            }
            if batch.isEmpty { throw NATSError.timeout }
            for m in batch {
                remaining = m.metadata.pending
                let op = m.headers?["KV-Operation"]
                if op == nil || op == "PUT" { keys.append(String(m.subject.dropFirst(prefix.count))) }
            }
        }
        return keys
    }

    /// The entries of the keys matching `keys` (a subject pattern relative to the bucket,
    /// `>` for all): first the latest entry of each key (deletes included), then every
    /// change as it happens. Built on an ordered consumer: it survives reconnections; after a
    /// restart during the initial snapshot, snapshot entries may be repeated.
    public func watch(keys: String = ">") -> AsyncThrowingStream<KeyValueEntry, any Error> {
        let state = OrderedConsumer(js: js, stream: streamName, filterSubject: prefix + keys,
                                    startSequence: 1, lastPerSubject: true)
        let kv = self
        return AsyncThrowingStream(unfolding: {
            while let m = try await state.next() {
                if let e = kv.entry(from: m.stored) { return e }
            }
            return nil
        })
    }
}
