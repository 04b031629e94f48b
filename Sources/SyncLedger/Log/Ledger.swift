import Foundation
import LedgerStorage
import Crypto
import Synchronization

/// What the group-commit writer has done since the ledger was opened.
public struct WriterStatistics: Sendable {
    /// Write transactions committed (each one fsync in durable mode, when it changed anything).
    public let commits: UInt64
    /// Callers served (writes, including failed ones).
    public let writes: UInt64
    /// The most callers one commit served.
    public let largestGroup: Int
    /// Commits by group size: (at most this many callers, commits); not cumulative.
    public let groupSizeBuckets: [(atMost: Int, commits: UInt64)]
}

/// Sync sessions issued but not yet stored, by pool.
final class PendingSessions: Sendable {
    private let counts = Mutex<[String: UInt64]>([:])
    func withLock<T: Sendable>(_ body: (inout [String: UInt64]) -> T) -> T { counts.withLock { body(&$0) } }
}

/// An event-sourced sync store: one append-only log stream per identity and dataset in an LMDB
/// environment, with views kept by ``apply(_:to:)``.
///
/// Safe to share between tasks and threads. Writes go through one writer thread that commits
/// waiting callers together (group commit); reads run in short read transactions on the
/// caller's thread and never block the writer.
public final class Ledger: Sendable {
    let environment: Environment
    let schema: Schema
    let writer: GroupCommitWriter
    /// The options this ledger was opened with.
    public let options: LedgerOptions
    /// Access keys and the token key, kept apart from the log.
    public let secrets: SecretStore
    let tokenKey: SymmetricKey
    /// This ledger's random id (hex), made when it was created: a follower notices when a
    /// different ledger answers at its leader's address. Not a secret; never replicated.
    public let id: String
    /// The cluster's shard log, when this ledger is a cluster node's replica.
    let cluster = ClusterBinding()
    /// This node's queued cluster writes and the shards with a batch in flight.
    let shardBatches = ShardBatches()
    /// Sync sessions issued but not yet counted on disk, by pool.
    let pendingSessions = PendingSessions()
    /// zstd dictionaries read so far, by id.
    let dictionaries = DictionaryCache()
    /// Who may send from which device, kept per device record version (see `postMessage`).
    let deviceReach = DeviceReachCache()
    /// Identity pool definitions, decoded once per version of their configuration stream.
    let identityPoolCache = SystemRecordCache<IdentityPoolDefinition>()
    /// OpenID Connect providers, decoded once per version of their stream.
    let openIDProviderCache = SystemRecordCache<OpenIDProvider>()
    /// Pools' Cognito events, decoded once per version of their configuration stream (every
    /// UpdateRecords of an identity asks for its pool's SyncTrigger).
    let cognitoEventsCache = SystemRecordCache<[String: String]>()
    /// ID tokens that verified, so a sign-in's second call does not verify the same token again.
    let verifiedTokens = VerifiedTokenCache()
    /// UpdateRecords calls with an idempotency key in progress (a racing retry waits for them).
    let idempotencyFlights = IdempotencyFlights()

    /// The data directory.
    public var directory: String { environment.path }

    /// Opens (creating if needed, unless ``LedgerOptions/createIfMissing`` is false) the ledger
    /// in `directory`. A directory written by the previous format is migrated: its secrets move
    /// to the ``SecretStore`` and its views are rebuilt.
    ///
    /// - Throws: ``LedgerError`` `.notFound` when there is no ledger and it may not create one;
    ///   `.unsupportedFormat` when the directory was written by a newer version; `.storage` when
    ///   it cannot be opened (with the path and the reason).
    public init(directory: String, options: LedgerOptions = LedgerOptions()) throws {
        if !options.createIfMissing, !FileManager.default.fileExists(atPath: directory + "/data.mdb") {
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory)
            throw LedgerError(.notFound, exists && isDirectory.boolValue
                ? "\(directory) holds no ledger (no data.mdb); check --data"
                : "there is no ledger at \(directory): \(exists ? "it is not a directory" : "no such directory"); check --data")
        }
        try makePrivateDirectory(directory, what: "the data directory")
        var envOptions = EnvironmentOptions()
        envOptions.durable = options.durable
        envOptions.initialMapSize = options.initialMapSize
        let env: Environment
        do {
            env = try Environment(path: directory, options: envOptions)
        } catch {
            throw LedgerError(.storage, "cannot open the ledger in \(directory): \(error)", underlying: error)
        }
        let schema: Schema
        do { schema = try Schema(environment: env) } catch {
            throw LedgerError(.storage, "cannot open the ledger in \(directory): \(error)", underlying: error)
        }
        let secrets = try SecretStore(directory: options.secretsDirectory ?? directory + "/secrets")
        let (version, ledgerID) = try Self.prepare(env, schema, secrets, directory: directory, options: options)
        self.environment = env
        self.schema = schema
        self.options = options
        self.secrets = secrets
        if let shared = options.tokenKey {
            guard shared.count == 32 else { throw LedgerError(.invalidParameter, "a shared token key has 32 bytes, not \(shared.count)") }
            self.tokenKey = SymmetricKey(data: shared)
        } else {
            self.tokenKey = try secrets.tokenKey()
        }
        self.id = ledgerID
        // In durable mode a group waits up to 1 ms for the previous group's callers to return:
        // an fsync costs about that much, so fuller groups mean fewer fsyncs per write.
        self.writer = GroupCommitWriter(environment: env, gatherWindow: options.durable ? .milliseconds(1) : .zero,
                                        idleSpin: options.durable ? .zero : .microseconds(200))
        if version < Schema.formatVersion {
            try writer.performBlocking { [self] txn in
                if version < 2 {
                    try self.rebuildViews(txn)
                    // Format 1 did not keep time moving forward: its entries are exempt from the rule.
                    try txn.put(schema.meta, key: Schema.timeRuleFromKey, value: .bigEndian(try self.nextSequence(txn) - 1))
                }
                if version < 3 { try self.migrateToValueCommitments(txn) }
                try txn.put(schema.meta, key: Array("format".utf8), value: .bigEndian(Schema.formatVersion))
            }
        }
    }

    /// Checks the format version, moves a format-1 directory's secrets to `secrets`, and makes
    /// the ledger id. Returns the stored format version (the current one for a new ledger) and
    /// the id.
    private static func prepare(_ env: Environment, _ schema: Schema, _ secrets: SecretStore, directory: String, options: LedgerOptions) throws -> (UInt64, String) {
        let format = Array("format".utf8), legacyKey = Array("hmac-key".utf8), legacyAdmin = Array("admin-access-key".utf8)
        if !options.migrate, let stored = try env.read({ try $0.get(schema.meta, key: format) }), stored.count == 8,
           stored.bigEndianUInt64() < Schema.formatVersion {
            throw LedgerError(.unsupportedFormat, "\(directory) was written by an older SyncLedger (format \(stored.bigEndianUInt64())); run a command that writes (serve, put, import) once to migrate it to format \(Schema.formatVersion)")
        }
        // Secrets of a format-1 directory go to the secret store first (idempotent), then leave.
        let legacy = try env.read { txn -> (key: [UInt8]?, admin: [UInt8]?, credentials: [Cursor.Pair]) in
            let credentials = try txn.withCursor(schema.legacyCredentials) { cursor in
                var pairs: [Cursor.Pair] = []
                var pair = try cursor.first()
                while let current = pair { pairs.append(current); pair = try cursor.next() }
                return pairs
            }
            return (try txn.get(schema.meta, key: legacyKey), try txn.get(schema.meta, key: legacyAdmin), credentials)
        }
        if let key = legacy.key, key.count == 32 { try secrets.adoptTokenKey(key) }
        if !legacy.credentials.isEmpty || legacy.admin != nil { try secrets.adopt(legacy.credentials, generatedAdmin: legacy.admin) }
        return try env.write { txn -> (UInt64, String) in
            let version: UInt64
            if let stored = try txn.get(schema.meta, key: format) {
                version = stored.bigEndianUInt64()
                guard stored.count == 8, version <= Schema.formatVersion else {
                    throw LedgerError(.unsupportedFormat, "\(directory) holds format version \(version); this SyncLedger reads up to \(Schema.formatVersion)")
                }
            } else {
                version = Schema.formatVersion
                try txn.put(schema.meta, key: format, value: .bigEndian(version))
            }
            try txn.delete(schema.meta, key: legacyKey)
            try txn.delete(schema.meta, key: legacyAdmin)
            if !legacy.credentials.isEmpty { try txn.removeAll(schema.legacyCredentials) }
            let idKey = Array("ledger-id".utf8)
            if let stored = try txn.get(schema.meta, key: idKey) { return (version, String(decoding: stored, as: UTF8.self)) }
            let fresh = SymmetricKey(size: .bits128).withUnsafeBytes { bytes in Hex.encode(bytes) }
            try txn.put(schema.meta, key: idKey, value: Array(fresh.utf8))
            return (version, fresh)
        }
    }

    /// Finishes queued writes, stores the session counts and stops the writer. Later writes fail
    /// with `.closed`. A ledger dropped without it stops its writer too (after the queued writes),
    /// but sync sessions counted since the last store (up to 63 per pool) are not kept.
    public func close() {
        flushSessionCounts(wait: true)
        writer.close()
    }

    deinit {
        writer.close()
    }

    /// Group-commit statistics of this process's writer.
    public var writerStatistics: WriterStatistics {
        let s = writer.stats
        return WriterStatistics(commits: s.commits, writes: s.jobs, largestGroup: s.largestGroup,
                                groupSizeBuckets: s.groupSizes.enumerated().map { (1 << $0.offset, $0.element) })
    }

    /// Calls `observer` on the writer thread with the number of callers each group commit from
    /// now on served (for a metrics histogram; it must be quick and must not write).
    public func observeGroupCommits(_ observer: @escaping @Sendable (Int) -> Void) {
        writer.observeGroups(observer)
    }

    /// Bytes of the data file in use.
    public var diskBytes: Int { environment.usedBytes }

    // MARK: - Reading

    /// Runs `body` in a read transaction, mapping storage errors to ``LedgerError``.
    func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        do {
            return try environment.read(body)
        } catch let error as LedgerError {
            throw error
        } catch {
            throw GroupCommitWriter.mapStorageError(error)
        }
    }

    func head(_ txn: Transaction, _ stream: StreamName) throws -> StreamHead? {
        guard let bytes = try txn.get(schema.streams, key: stream.key) else { return nil }
        do { return try StreamHead(decoding: bytes) } catch {
            throw LedgerError(.corruptData, "stream head does not decode: \(error)", stream: stream)
        }
    }

    func dataset(_ txn: Transaction, id: UInt64, stream: StreamName) throws -> DatasetState? {
        guard let bytes = try txn.get(schema.datasets, key: .bigEndian(id)) else { return nil }
        do { return try DatasetState(decoding: bytes) } catch {
            throw LedgerError(.corruptData, "dataset view does not decode: \(error)", stream: stream)
        }
    }

    func streamName(_ txn: Transaction, id: UInt64) throws -> StreamName {
        guard let key = try txn.get(schema.streamNames, key: .bigEndian(id)) else {
            throw LedgerError(.corruptData, "no name for stream id \(id)")
        }
        return try StreamName(key: key)
    }

    /// Decodes a stored log value (`stream id ‖ hash ‖ body`) at `sequence`.
    func decodeEntry(_ bytes: [UInt8], sequence: UInt64, stream knownStream: StreamName?, txn: Transaction) throws -> (LogEntry, streamID: UInt64) {
        var reader = ByteReader(bytes)
        do {
            let id = try reader.fixed64()
            let hash = Array(try reader.raw(32))
            let stream = try knownStream ?? streamName(txn, id: id)
            let body = try LogEntry.decodeBody(&reader)
            try reader.expectEnd()
            return (LogEntry(stream: stream, offset: body.offset, sequence: sequence, time: body.time, author: body.author, device: body.device, events: body.events, hash: hash), id)
        } catch let failure as DecodeFailure {
            throw LedgerError(.corruptData, "log entry at sequence \(sequence) does not decode: \(failure)", stream: knownStream)
        }
    }

    /// Runs `body` on the writer as one caller of a group commit. In cluster mode (see
    /// ``bindCluster(_:)``), entries it appends reach this ledger only through their shard's log.
    /// `stream`: a stream the write appends to, when the caller knows it (in cluster mode its
    /// shard is then known before the write is planned).
    func write<T: Sendable>(on stream: StreamName? = nil, _ body: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        try await writeScoped(on: stream) { scope in try body(scope.txn) }
    }

    /// ``write(on:_:)`` for a write that also keeps something only on this node (an
    /// idempotency answer): `body` gets the transaction and where such changes go.
    func writeScoped<T: Sendable>(on stream: StreamName? = nil, _ body: @escaping @Sendable (WriteScope) throws -> T) async throws -> T {
        if let log = cluster.current { return try await clusterWrite(log, on: stream, body) }
        return try await writer.perform { txn in try body(WriteScope(txn: txn, nodeLocal: nil)) }
    }

    /// Runs `body` on the writer, committed here alone even in cluster mode: for what arrives
    /// from a shard's log, and for changes that are no log entries.
    func writeLocal<T: Sendable>(_ body: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        try await writer.perform(body)
    }
}
