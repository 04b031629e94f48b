import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger

/// An error of the benchmark harness itself.
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - listRecords

/// A dataset of 1,000 records (stream 0), built in fast mode in the fixture's setup:
///
/// 1. ten `updateRecords` calls of 100 new records each (sync count 10);
/// 2. 490 calls replacing one record each, keys 0–489 (sync count 500);
/// 3. ten calls replacing keys 490–499 (sync count 510).
///
/// So after sync count 500 ten records changed (through ten entries), after 10 five hundred,
/// after 0 all 1,000.
final class ListRecordsFixture: MeasuredFixture {
    static let records = 1_000
    static let callsPerIteration = 100

    let directory: String
    let ledger: Ledger
    let stream: StreamName
    let after: UInt64

    /// `after`: the sync count the client last saw.
    init(after: UInt64) async throws {
        self.after = after
        directory = try makeScratchDirectory("list-records")
        var options = LedgerOptions()
        options.durable = false
        ledger = try Ledger(directory: directory, options: options)
        stream = try EventData.stream(0)
        let token = try ledger.listRecords(stream).syncSessionToken
        var random = SplitMix64(seed: 7)
        var counts = [UInt64](repeating: 0, count: Self.records)
        var time: Int64 = 1_732_000_000_000
        func patch(_ key: Int) -> RecordPatch {
            time += 1000
            return RecordPatch(op: .replace, key: EventData.recordKey(key), value: EventData.value(key: key, time: time, random: &random), syncCount: counts[key])
        }
        for batch in 0..<10 {
            let keys = batch * 100..<(batch + 1) * 100
            let result = try await ledger.updateRecords(stream, patches: keys.map(patch), deviceID: EventData.device(0), sessionToken: token)
            for key in keys { counts[key] = result.syncCount }
        }
        for key in 0..<500 {
            let result = try await ledger.updateRecords(stream, patches: [patch(key)], deviceID: EventData.device(1), sessionToken: token)
            counts[key] = result.syncCount
        }
        let head = try ledger.listRecords(stream, after: 0)
        guard head.datasetSyncCount == 510, head.records.count == Self.records else {
            throw HarnessError("listRecords fixture: sync count \(head.datasetSyncCount), \(head.records.count) records")
        }
    }

    /// `figure`: records returned per call.
    func iterate() async throws -> Measured {
        var returned = 0
        for _ in 0..<Self.callsPerIteration {
            returned = try ledger.listRecords(stream, after: after).records.count
        }
        return Measured(operations: Self.callsPerIteration, figure: returned)
    }

    func tearDown() {
        ledger.close()
        removeScratchDirectory(directory)
    }
}

// MARK: - Replay

/// The replay source (artifact `replay-source`): one stream of 20,000 entries, written in fast
/// mode by 64 concurrent callers each replacing its own record (so the stream's view holds 64
/// records).
enum ReplaySource {
    static let entries = 20_000

    static func artifact() async throws -> Artifact {
        try await SharedArtifacts.artifact("replay-source") { path in
            var spec = SourceSpec(entries: entries, streams: 1, callers: 64)
            spec.oneStream = true
            spec.keysPerStream = 64
            let (ledger, _) = try await buildSourceLedger(directory: (path as NSString).appendingPathComponent("ledger"), spec: spec)
            ledger.close()
        }
    }
}

/// `Ledger.dataset(_:asOfSyncCount:)` at the stream's head: all 20,000 entries read in batches
/// and replayed through `apply` into memory. Samples anonymous memory. `figure` is the number
/// of records in the replayed view.
final class ReplayFixture: MeasuredFixture {
    let artifact: Artifact
    let ledger: Ledger
    let stream: StreamName
    let head: UInt64

    init() async throws {
        artifact = try await ReplaySource.artifact()
        var options = LedgerOptions()
        options.durable = false
        ledger = try Ledger(directory: artifact.file("ledger"), options: options)
        stream = try EventData.stream(0)
        head = try ledger.listRecords(stream).datasetSyncCount
        guard head == UInt64(ReplaySource.entries) else { throw HarnessError("replay source holds \(head) entries") }
    }

    func iterate() async throws -> Measured {
        let view = try ledger.dataset(stream, asOfSyncCount: head)
        guard view.dataset?.syncCount == head else { throw HarnessError("replay stopped at \(view.dataset?.syncCount ?? 0)") }
        return Measured(operations: Int(head), figure: Int(view.dataset?.recordCount ?? 0))
    }

    func tearDown() {
        ledger.close()
        artifact.release()
    }
}

/// The replay's limit: the same stream's entries read raw — a cursor over the `index`
/// database from the stream's first offset and a `get` of each entry from `log`, in one read
/// transaction, copying the bytes and doing nothing with them.
final class ReplayRawFixture: MeasuredFixture {
    let artifact: Artifact
    let environment: Environment
    let index: Database
    let log: Database
    let streamID: [UInt8]

    init() async throws {
        artifact = try await ReplaySource.artifact()
        var options = EnvironmentOptions()
        options.durable = false
        environment = try Environment(path: artifact.file("ledger"), options: options)
        index = try environment.openDatabase("index")
        log = try environment.openDatabase("log")
        let streams = try environment.openDatabase("streams")
        let key = EventData.streamKey(try EventData.stream(0))
        guard let head = try environment.read({ txn in try txn.get(streams, key: key) }), head.count >= 8 else {
            throw HarnessError("replay source: no head for stream 0")
        }
        streamID = Array(head.prefix(8))
    }

    func iterate() async throws -> Measured {
        let (count, bytes) = try environment.read { txn in
            try txn.withCursor(index) { cursor -> (Int, Int) in
                var count = 0, bytes = 0
                var pair = try cursor.seek(atLeast: streamID + bigEndianBytes(1))
                while let current = pair, current.key.starts(with: streamID) {
                    guard let entry = try txn.get(log, key: current.value) else { throw HarnessError("index names a missing log entry") }
                    count += 1
                    bytes += entry.count
                    pair = try cursor.next()
                }
                return (count, bytes)
            }
        }
        guard count == ReplaySource.entries else { throw HarnessError("raw replay read \(count) entries") }
        return Measured(operations: count, bytes: bytes)
    }

    func tearDown() { artifact.release() }
}
