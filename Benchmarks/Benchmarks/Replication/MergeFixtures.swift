import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger

/// `Ledger.merge(_:)` of the feed source's 1,000-entry segments, one per iteration and in feed
/// order, into a ledger that starts empty: every entry is applied (checked against the local
/// head and hash chain, appended, applied to the views) in one group commit per segment.
/// The segments are decoded in setup, so an iteration times the merge alone.
final class LedgerMergeFixture: MeasuredFixture {
    let artifact: Artifact
    let directory: String
    let ledger: Ledger
    let segments: [Segment]
    private var next = 0

    init(durable: Bool) async throws {
        artifact = try await FeedSource.artifact()
        segments = try FeedSource.mergeSegments(artifact)
        directory = try makeScratchDirectory("merge-ledger")
        var options = LedgerOptions()
        options.durable = durable
        options.initialMapSize = 1 << 30
        ledger = try Ledger(directory: directory, options: options)
    }

    func iterate() async throws -> Measured {
        guard next < segments.count else { throw HarnessError("merge: all \(segments.count) segments merged; raise FeedSource.mergeSegments") }
        let segment = segments[next]
        next += 1
        let report = try await ledger.merge(segment)
        guard report.applied == segment.entries.count else {
            throw HarnessError("merge applied \(report.applied) of \(segment.entries.count) entries (skipped \(report.skipped))")
        }
        return Measured(operations: report.applied)
    }

    func tearDown() {
        ledger.close()
        removeScratchDirectory(directory)
        artifact.release()
    }
}

/// Raw LMDB doing the puts the ledger's merge makes for the same segments, in the same
/// transactions (one per segment): log append (`MDB_APPEND`), index, stream head, stream name
/// (first time), record view, dataset view and pool aggregate, with values of the ledger's
/// sizes — and nothing else: no reads, no checks, no decoding, no hashing, no thread hand-off.
/// The puts are prepared in setup. This is the limit a merge cannot beat on this machine.
final class RawMergeFixture: MeasuredFixture {
    let artifact: Artifact
    let directory: String
    let environment: Environment
    let databases: RawLedgerDatabases
    let batches: [[RawPut]]
    let entriesPerBatch: [Int]
    private var next = 0

    init(durable: Bool) async throws {
        artifact = try await FeedSource.artifact()
        let segments = try FeedSource.mergeSegments(artifact)
        var builder = RawPutBuilder()
        batches = try segments.map { segment in try segment.entries.flatMap { builder.puts(for: try $0.entry, body: Array($0.body)) } }
        entriesPerBatch = segments.map(\.entries.count)
        directory = try makeScratchDirectory("merge-raw")
        var options = EnvironmentOptions()
        options.durable = durable
        options.initialMapSize = 1 << 30
        environment = try Environment(path: directory, options: options)
        databases = try RawLedgerDatabases(environment)
    }

    func iterate() async throws -> Measured {
        guard next < batches.count else { throw HarnessError("raw merge: out of batches") }
        let batch = batches[next]
        let count = entriesPerBatch[next]
        next += 1
        try environment.write { txn in try databases.apply(batch, in: txn) }
        return Measured(operations: count)
    }

    func tearDown() {
        removeScratchDirectory(directory)
        artifact.release()
    }
}

/// The same Cognito semantics on SQLite, written as an application would: WAL journal, a `log`
/// table (one row per entry: stream, sync count, time, author, hash, record key and value, with
/// a unique index on stream and sync count for per-stream reads) and a `records` table keyed by
/// stream and record key, upserted with the record's new value and sync count, with an index on
/// stream and sync count for ListRecords (as the ledger's `records-by-sync-count`); prepared
/// statements; one transaction per batch of 1,000 entries. `synchronous=FULL` is the durable
/// peer (an fsync of the WAL per commit), `NORMAL` the fast one (no fsync per commit in WAL
/// mode). The rows' fields are taken from the decoded segments in setup.
final class SQLiteMergeFixture: MeasuredFixture {
    /// One entry's fields, as the application would have them after decoding.
    struct Row {
        let stream: String
        let syncCount: Int64
        let time: Int64
        let author: String
        let hash: [UInt8]
        let key: String
        let value: String?
    }

    let artifact: Artifact
    let directory: String
    let connection: SQLiteConnection
    let insertLog: SQLiteStatement
    let upsertRecord: SQLiteStatement
    let batches: [[Row]]
    private var next = 0

    init(synchronousFull: Bool) async throws {
        artifact = try await FeedSource.artifact()
        let segments = try FeedSource.mergeSegments(artifact)
        var names: [StreamName: String] = [:]
        batches = try segments.map { segment in
            try segment.entries.flatMap { e -> [Row] in
                let entry = try e.entry
                let stream = names[e.stream] ?? e.stream.description
                names[e.stream] = stream
                return entry.events.compactMap { event -> Row? in
                    switch event {
                    case .put(let key, let value, _):
                        Row(stream: stream, syncCount: Int64(entry.offset), time: entry.time.milliseconds, author: entry.author, hash: e.hash, key: key, value: value)
                    case .remove(let key, _):
                        Row(stream: stream, syncCount: Int64(entry.offset), time: entry.time.milliseconds, author: entry.author, hash: e.hash, key: key, value: nil)
                    case .deleteDataset, .erased:
                        nil
                    }
                }
            }
        }
        directory = try makeScratchDirectory("merge-sqlite")
        connection = try SQLiteConnection(path: (directory as NSString).appendingPathComponent("ledger.sqlite"))
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=\(synchronousFull ? "FULL" : "NORMAL")")
        try connection.execute("""
            CREATE TABLE log(
                seq INTEGER PRIMARY KEY,
                stream TEXT NOT NULL,
                sync_count INTEGER NOT NULL,
                time INTEGER NOT NULL,
                author TEXT NOT NULL,
                hash BLOB NOT NULL,
                record_key TEXT NOT NULL,
                value TEXT,
                UNIQUE(stream, sync_count));
            CREATE TABLE records(
                stream TEXT NOT NULL,
                record_key TEXT NOT NULL,
                value TEXT,
                sync_count INTEGER NOT NULL,
                last_modified INTEGER NOT NULL,
                last_modified_by TEXT NOT NULL,
                PRIMARY KEY(stream, record_key)) WITHOUT ROWID;
            CREATE INDEX records_by_sync_count ON records(stream, sync_count);
            """)
        insertLog = try connection.prepare(
            "INSERT INTO log(stream, sync_count, time, author, hash, record_key, value) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)")
        upsertRecord = try connection.prepare("""
            INSERT INTO records(stream, record_key, value, sync_count, last_modified, last_modified_by) VALUES(?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT(stream, record_key) DO UPDATE SET value = excluded.value, sync_count = excluded.sync_count,
                last_modified = excluded.last_modified, last_modified_by = excluded.last_modified_by
            """)
    }

    func iterate() async throws -> Measured {
        guard next < batches.count else { throw HarnessError("SQLite merge: out of batches") }
        let batch = batches[next]
        next += 1
        try connection.execute("BEGIN")
        do {
            for row in batch {
                insertLog.bind(1, row.stream)
                insertLog.bind(2, row.syncCount)
                insertLog.bind(3, row.time)
                insertLog.bind(4, row.author)
                insertLog.bind(5, row.hash)
                insertLog.bind(6, row.key)
                insertLog.bind(7, row.value)
                try insertLog.run()
                upsertRecord.bind(1, row.stream)
                upsertRecord.bind(2, row.key)
                upsertRecord.bind(3, row.value)
                upsertRecord.bind(4, row.syncCount)
                upsertRecord.bind(5, row.time)
                upsertRecord.bind(6, row.author)
                try upsertRecord.run()
            }
            try connection.execute("COMMIT")
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
        return Measured(operations: batch.count)
    }

    func tearDown() {
        removeScratchDirectory(directory)
        artifact.release()
    }
}
