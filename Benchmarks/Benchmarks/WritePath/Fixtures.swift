import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger
import Synchronization

/// What a write-path benchmark measures: something that performs write operations and can be
/// torn down afterwards. Made fresh (in a new temporary directory) before a benchmark's first
/// iteration and torn down after its last.
protocol WriteFixture: Sendable {
    /// Performs `operations` write operations, each acknowledged (committed) before this returns.
    ///
    /// - Returns: the number of LMDB commits those operations took.
    func run(operations: Int) async throws -> Int

    /// Releases everything and removes the data directory.
    func tearDown()
}

// MARK: - The ledger

/// The Cognito ids every benchmark uses: one pool, one identity per caller, one dataset each.
enum BenchmarkNames {
    /// The identity pool of every benchmark stream.
    static let pool = "us-east-1:00000000-0000-0000-0000-0000000000b1"
    /// The dataset name of every benchmark stream.
    static let dataset = "bench"
    /// The record key every update replaces.
    static let recordKey = "item"
    /// The value written: 64 ASCII characters, so a log entry is about 150 bytes.
    static let value = String(repeating: "v", count: 64)

    /// The identity of caller `index` (each caller has its own, so the 20-datasets-per-identity
    /// limit never applies).
    static func identity(_ index: Int) -> String {
        let hex = String(index, radix: 16)
        return "us-east-1:00000000-0000-0000-0000-" + String(repeating: "0", count: 12 - hex.count) + hex
    }

    /// The stream of caller `index`.
    static func stream(_ index: Int) throws -> StreamName {
        try StreamName(pool: pool, identity: identity(index), dataset: dataset)
    }
}

/// One client of the ledger: its own dataset, a session token obtained once from
/// `listRecords`, and the record's current sync count, so every update is conflict-free.
final class UpdateCaller: Sendable {
    let ledger: Ledger
    let stream: StreamName
    let sessionToken: String
    /// The record's sync count as last returned. Only one task uses a caller at a time (the task
    /// group's join orders iterations), so relaxed ordering suffices.
    private let syncCount = Atomic<UInt64>(0)

    /// Gets a session token for caller `index`'s dataset.
    init(ledger: Ledger, index: Int) throws {
        self.ledger = ledger
        stream = try BenchmarkNames.stream(index)
        let page = try ledger.listRecords(stream)
        sessionToken = page.syncSessionToken
        syncCount.store(page.records.first { $0.key == BenchmarkNames.recordKey }?.syncCount ?? 0, ordering: .relaxed)
    }

    /// Replaces the record once: one `updateRecords` call with one patch.
    func update() async throws {
        let patch = RecordPatch(op: .replace, key: BenchmarkNames.recordKey, value: BenchmarkNames.value,
                                syncCount: syncCount.load(ordering: .relaxed))
        let result = try await ledger.updateRecords(stream, patches: [patch], sessionToken: sessionToken)
        syncCount.store(result.syncCount, ordering: .relaxed)
    }
}

/// A ledger in a fresh directory with `callers` clients, each on its own dataset. An iteration
/// of one caller loops `updateRecords`; with several callers, each runs in its own task of a
/// task group and they share the iteration's operations, so group commit can batch them.
final class LedgerFixture: WriteFixture {
    let directory: String
    let ledger: Ledger
    let callers: [UpdateCaller]

    /// Opens the ledger, gets every caller's session token and writes each dataset once, so
    /// iterations measure updates of existing datasets.
    init(durable: Bool, callers count: Int) async throws {
        directory = try makeScratchDirectory("ledger")
        var options = LedgerOptions()
        options.durable = durable
        let ledger = try Ledger(directory: directory, options: options)
        self.ledger = ledger
        callers = try (0..<count).map { try UpdateCaller(ledger: ledger, index: $0) }
        for caller in callers { try await caller.update() }
    }

    func run(operations: Int) async throws -> Int {
        let before = ledger.writerStatistics.commits
        if callers.count == 1 {
            let caller = callers[0]
            for _ in 0..<operations { try await caller.update() }
        } else {
            let work = WorkCounter(operations)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for caller in callers {
                    group.addTask {
                        while work.claim() { try await caller.update() }
                    }
                }
                try await group.waitForAll()
            }
        }
        return Int(ledger.writerStatistics.commits - before)
    }

    func tearDown() {
        ledger.close()
        removeScratchDirectory(directory)
    }
}

// MARK: - Raw LMDB baselines

/// Raw LMDB, one put of a ~100-byte pair per commit: the floor a durable write cannot beat
/// (one commit, two fsyncs in LMDB, per operation) and the reference of the targets.
final class RawSinglePutFixture: WriteFixture {
    let directory: String
    let environment: Environment
    let database: Database
    /// The next key's sequence number.
    private let sequence = Atomic<UInt64>(1)
    /// The value written: 100 bytes.
    private let value = [UInt8](repeating: 0x76, count: 100)

    /// Opens a fresh environment in `durable` or fast (`MDB_NOSYNC`) mode.
    init(durable: Bool) throws {
        directory = try makeScratchDirectory("raw-put")
        var options = EnvironmentOptions()
        options.durable = durable
        environment = try Environment(path: directory, options: options)
        database = try environment.openDatabase("bench")
    }

    func run(operations: Int) async throws -> Int {
        for _ in 0..<operations {
            // A 16-byte key: 8-byte big-endian sequence and 8 bytes of padding.
            let key = bigEndianBytes(sequence.wrappingAdd(1, ordering: .relaxed).oldValue) + [UInt8](repeating: 0, count: 8)
            try environment.write { txn in try txn.put(database, key: key, value: value) }
        }
        return operations
    }

    func tearDown() {
        removeScratchDirectory(directory)
    }
}

/// Raw LMDB doing, per operation, the puts `Ledger.updateRecords` does for a one-record patch
/// (see `Ledger.append` and `StoredDatasetView.flush`), with values of the same sizes:
///
/// - `log`: 8-byte big-endian commit sequence → stream id ‖ 32-byte hash ‖ entry body, with
///   `PutFlags.append`;
/// - `index`: stream id ‖ offset → sequence;
/// - `streams`: stream key → head (id, offset, hash);
/// - `records`: stream id ‖ record key → record state;
/// - `records-by-sync-count`: the record's row under its old sync count deleted, one under the
///   new one put;
/// - `datasets`: stream id → dataset state;
/// - `pools`: pool id → pool aggregate.
///
/// It does none of the ledger's reads, encoding, hashing, token checks or thread hand-offs, so
/// the ledger's overhead over LMDB is the difference. `perCommit` operations share one commit
/// (64 models the ledger's group commit with 64 callers), spread over as many streams.
final class RawSamePutsFixture: WriteFixture {
    /// What changes from one operation to the next.
    struct State: Sendable {
        var sequence: UInt64 = 0
        var offsets: [UInt64]
        var nextStream = 0
    }

    let directory: String
    let environment: Environment
    let perCommit: Int
    let log, index, streams, records, recordsBySyncCount, datasets, pools: Database
    /// Each stream's key (pool ␀ identity ␀ dataset), as the ledger stores it.
    let streamKeys: [[UInt8]]
    let poolKey: [UInt8]
    /// Byte strings of the sizes the ledger writes for a 64-character value.
    let entryBody: [UInt8], hash: [UInt8], recordState: [UInt8], datasetState: [UInt8], poolState: [UInt8]
    private let state: Mutex<State>

    /// Opens a fresh environment with the ledger's databases; `perCommit` streams take turns.
    init(durable: Bool, perCommit: Int) throws {
        directory = try makeScratchDirectory("raw-same-puts")
        var options = EnvironmentOptions()
        options.durable = durable
        environment = try Environment(path: directory, options: options)
        self.perCommit = perCommit
        log = try environment.openDatabase("log")
        index = try environment.openDatabase("index")
        streams = try environment.openDatabase("streams")
        records = try environment.openDatabase("records")
        recordsBySyncCount = try environment.openDatabase("records-by-sync-count")
        datasets = try environment.openDatabase("datasets")
        pools = try environment.openDatabase("pools")
        poolKey = Array(BenchmarkNames.pool.utf8)
        streamKeys = (0..<perCommit).map { i in
            Array(BenchmarkNames.pool.utf8) + [0] + Array(BenchmarkNames.identity(i).utf8) + [0] + Array(BenchmarkNames.dataset.utf8)
        }
        let authorAndValue = BenchmarkNames.identity(0).utf8.count + BenchmarkNames.value.utf8.count
        // offset, time, author, event tag, key and value with their lengths.
        entryBody = [UInt8](repeating: 0x62, count: 16 + authorAndValue + BenchmarkNames.recordKey.utf8.count)
        hash = [UInt8](repeating: 0x68, count: 32)
        recordState = [UInt8](repeating: 0x72, count: 12 + authorAndValue)
        datasetState = [UInt8](repeating: 0x64, count: 24 + BenchmarkNames.identity(0).utf8.count)
        poolState = [UInt8](repeating: 0x70, count: 10)
        state = Mutex(State(offsets: [UInt64](repeating: 0, count: perCommit)))
    }

    func run(operations: Int) async throws -> Int {
        var commits = 0
        var done = 0
        while done < operations {
            let count = min(perCommit, operations - done)
            try state.withLock { current in
                var next = current
                try environment.write { txn in
                    next = current  // the body runs again after the map grew
                    for _ in 0..<count { try putOperation(txn, &next) }
                }
                current = next
            }
            done += count
            commits += 1
        }
        return commits
    }

    /// The puts of one ledger update on the next stream in turn.
    private func putOperation(_ txn: Transaction, _ state: inout State) throws {
        let stream = state.nextStream
        state.nextStream = (stream + 1) % perCommit
        state.sequence += 1
        state.offsets[stream] += 1
        let id = bigEndianBytes(UInt64(stream + 1))
        let offset = bigEndianBytes(state.offsets[stream])
        let sequence = bigEndianBytes(state.sequence)
        try txn.put(log, key: sequence, value: id + hash + entryBody, flags: .append)
        try txn.put(index, key: id + offset, value: sequence)
        try txn.put(streams, key: streamKeys[stream], value: id + offset + hash)
        try txn.put(records, key: id + Array(BenchmarkNames.recordKey.utf8), value: recordState)
        if state.offsets[stream] > 1 {
            try txn.delete(recordsBySyncCount, key: id + bigEndianBytes(state.offsets[stream] - 1) + Array(BenchmarkNames.recordKey.utf8))
        }
        try txn.put(recordsBySyncCount, key: id + offset + Array(BenchmarkNames.recordKey.utf8), value: [])
        try txn.put(datasets, key: id, value: datasetState)
        try txn.put(pools, key: poolKey, value: poolState)
    }

    func tearDown() {
        removeScratchDirectory(directory)
    }
}
