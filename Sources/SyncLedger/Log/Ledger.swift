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

/// Cognito Sync's limits, configurable. Exceeding one is a `.limitExceeded` error and nothing
/// is written.
public struct Limits: Sendable, Equatable {
    /// UTF-8 bytes of keys and values in one dataset (default 1 MB).
    public var maxDatasetBytes: UInt64 = 1_048_576
    /// Datasets one identity may have (default 20).
    public var maxDatasetsPerIdentity: Int = 20
    /// Records with a value in one dataset (default 1,024).
    public var maxRecordsPerDataset: UInt64 = 1024
    /// Characters (UTF-16 code units, as Cognito counts) of a record key (default 1,024).
    public var maxKeyLength: Int = 1024
    /// Characters (UTF-16 code units) of a record value (default 1,048,575).
    public var maxValueLength: Int = 1_048_575

    /// Cognito's defaults.
    public init() {}
}

/// How a ``Ledger`` is opened.
public struct LedgerOptions: Sendable {
    /// `true` (default): a write returns only once it is on disk (fsync). `false`: commits skip
    /// fsync — a killed process loses nothing, a power cut can lose the last commits. For
    /// benchmarks and bulk loads.
    public var durable: Bool = true
    /// The limits enforced on writes.
    public var limits = Limits()
    /// How long a sync session token stays valid (default 10 minutes).
    public var sessionLifetime: Duration = .seconds(600)
    /// The initial memory map; it grows by itself when full.
    public var initialMapSize: Int = 256 << 20
    /// The clock for server times and token expiry (tests may set their own).
    public var clock: @Sendable () -> Timestamp = { .now }

    /// The defaults: durable, Cognito's limits, 10-minute sessions.
    public init() {}
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
    let tokenKey: SymmetricKey
    /// Sync sessions issued but not yet counted on disk, by pool.
    let pendingSessions = PendingSessions()
    /// zstd dictionaries read so far, by id.
    let dictionaries = DictionaryCache()

    /// The data directory.
    public var directory: String { environment.path }

    /// Opens (creating if needed) the ledger in `directory`.
    ///
    /// - Throws: ``LedgerError`` `.unsupportedFormat` when the directory was written by a newer
    ///   version, `.storage` when it cannot be opened (with the path and LMDB's reason).
    public init(directory: String, options: LedgerOptions = LedgerOptions()) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw LedgerError(.storage, "cannot create the data directory \(directory): \(error.localizedDescription)", underlying: error)
        }
        var envOptions = EnvironmentOptions()
        envOptions.durable = options.durable
        envOptions.initialMapSize = options.initialMapSize
        let env: Environment
        do {
            env = try Environment(path: directory, options: envOptions)
        } catch {
            throw LedgerError(.storage, "cannot open the ledger in \(directory): \(error)", underlying: error)
        }
        let schema = try Schema(environment: env)
        let key = try env.write { txn -> [UInt8] in
            if let stored = try txn.get(schema.meta, key: Array("format".utf8)) {
                let version = stored.bigEndianUInt64()
                guard stored.count == 8, version <= Schema.formatVersion else {
                    throw LedgerError(.unsupportedFormat, "\(directory) holds format version \(version); this SyncLedger reads up to \(Schema.formatVersion)")
                }
            } else {
                try txn.put(schema.meta, key: Array("format".utf8), value: .bigEndian(Schema.formatVersion))
            }
            if let stored = try txn.get(schema.meta, key: Array("hmac-key".utf8)), stored.count == 32 {
                return stored
            }
            let fresh = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
            try txn.put(schema.meta, key: Array("hmac-key".utf8), value: fresh)
            return fresh
        }
        self.environment = env
        self.schema = schema
        self.options = options
        self.tokenKey = SymmetricKey(data: key)
        // In durable mode a group waits up to 1 ms for the previous group's callers to return:
        // an fsync costs about that much, so fuller groups mean fewer fsyncs per write.
        self.writer = GroupCommitWriter(environment: env, gatherWindow: options.durable ? .milliseconds(1) : .zero,
                                        idleSpin: options.durable ? .zero : .microseconds(200))
    }

    /// Finishes queued writes, stores the session counts and stops the writer. Later writes fail
    /// with `.closed`. Called by deinit too.
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
            return (LogEntry(stream: stream, offset: body.offset, sequence: sequence, time: body.time, author: body.author, events: body.events, hash: hash), id)
        } catch let failure as DecodeFailure {
            throw LedgerError(.corruptData, "log entry at sequence \(sequence) does not decode: \(failure)", stream: knownStream)
        }
    }

    // MARK: - Appending

    /// Appends one entry to `stream` inside `txn` and applies it to the views.
    ///
    /// `check` sees the view before the entry (conflicts, the dataset count); `validate` sees it
    /// after `apply` (size limits). Either may throw; nothing is stored until both passed — so
    /// their refusals are clean (see ``LedgerError/isCleanRefusal``).
    func append(
        _ txn: Transaction, to stream: StreamName, author: String, events fixedEvents: [Event],
        check: (StoredDatasetView) throws -> Void = { _ in },
        validate: (StoredDatasetView) throws -> Void = { _ in },
        events decide: (() -> [Event])? = nil
    ) throws -> (entry: LogEntry, view: StoredDatasetView) {
        let existing = try head(txn, stream)
        let id = try existing?.id ?? nextStreamID(txn)
        var view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: id)
        try check(view)
        // `decide`, when given, picks the events after `check` looked at the view.
        let events = decide?() ?? fixedEvents
        let sequence = try nextSequence(txn)
        let offset = (existing?.offset ?? 0) + 1
        let time = options.clock()
        let body = LogEntry.encodeBody(offset: offset, time: time, author: author, events: events)
        let hash = LogEntry.chainHash(previous: existing?.hash ?? LogEntry.genesisHash, stream: stream, body: body)
        let entry = LogEntry(stream: stream, offset: offset, sequence: sequence, time: time, author: author, events: events, hash: hash)
        try apply(entry, to: &view)
        try validate(view)

        try store(txn, entry, body: body, streamID: id, newStream: existing == nil, view: view)
        return (entry, view)
    }

    /// A stream id for a stream seen for the first time.
    func nextStreamID(_ txn: Transaction) throws -> UInt64 {
        try (txn.withCursor(schema.streamNames) { try $0.last() }?.key.bigEndianUInt64() ?? 0) + 1
    }

    /// The commit sequence of the next entry.
    func nextSequence(_ txn: Transaction) throws -> UInt64 {
        try (txn.withCursor(schema.log) { try $0.last() }?.key.bigEndianUInt64() ?? 0) + 1
    }

    /// Writes an entry whose view changes `view` holds: the log (an append), the index, the
    /// stream head (and name, for a new stream) and the views. Every append goes through here,
    /// or — a merge writing several entries of a stream — through its two halves.
    func store(_ txn: Transaction, _ entry: LogEntry, body: [UInt8], streamID id: UInt64, newStream: Bool, view: StoredDatasetView) throws {
        try storeLog(txn, entry, body: body[...], streamID: id)
        try storeHead(txn, entry, streamID: id, newStream: newStream, view: view)
    }

    /// The log append and the index entry of `entry`.
    func storeLog(_ txn: Transaction, _ entry: LogEntry, body: ArraySlice<UInt8>, streamID id: UInt64) throws {
        var buffers = AppendBuffers()
        try storeLog(txn, entry, body: body, streamID: id, buffers: &buffers)
    }

    /// Keys and values of log appends, kept across the appends of one merge so that writing an
    /// entry allocates nothing once they have grown (LMDB copies what it is given).
    struct AppendBuffers {
        var sequence = ByteWriter(capacity: 8)
        var value = ByteWriter(capacity: 512)
        var index = ByteWriter(capacity: 16)
    }

    /// ``storeLog(_:_:body:streamID:)`` through reused buffers.
    func storeLog(_ txn: Transaction, _ entry: LogEntry, body: ArraySlice<UInt8>, streamID id: UInt64, buffers: inout AppendBuffers) throws {
        buffers.sequence.bytes.removeAll(keepingCapacity: true)
        buffers.sequence.fixed64(entry.sequence)
        buffers.value.bytes.removeAll(keepingCapacity: true)
        buffers.value.fixed64(id)
        buffers.value.raw(entry.hash)
        buffers.value.bytes.append(contentsOf: body)
        buffers.index.bytes.removeAll(keepingCapacity: true)
        buffers.index.fixed64(id)
        buffers.index.fixed64(entry.offset)
        try txn.put(schema.log, key: buffers.sequence.bytes, value: buffers.value.bytes, flags: .append)
        try txn.put(schema.index, key: buffers.index.bytes, value: buffers.sequence.bytes)
    }

    /// The stream head after `entry` (its last stored entry), the name of a new stream, and the
    /// view changes `view` collected.
    func storeHead(_ txn: Transaction, _ entry: LogEntry, streamID id: UInt64, newStream: Bool, view: StoredDatasetView) throws {
        try txn.put(schema.streams, key: entry.stream.key, value: StreamHead(id: id, offset: entry.offset, hash: entry.hash).encoded())
        if newStream {
            try txn.put(schema.streamNames, key: .bigEndian(id), value: entry.stream.key)
        }
        try view.flush()
    }

    /// Runs `body` on the writer as one caller of a group commit.
    func write<T: Sendable>(_ body: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        try await writer.perform(body)
    }
}
