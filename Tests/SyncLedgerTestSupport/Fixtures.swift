/// Fixtures shared by the test targets: temporary ledgers, streams, a test clock, helpers.
public import Foundation
import Synchronization
public import SyncLedger
public import Testing

/// A ledger in a fresh temporary directory; `body` gets it, and the directory goes afterwards.
public func withLedger<T>(_ options: LedgerOptions = LedgerOptions(), _ body: (Ledger) async throws -> T) async throws -> T {
    let dir = temporaryPath("ledger")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let ledger = try Ledger(directory: dir, options: options)
    defer { ledger.close() }
    return try await body(ledger)
}

/// A path under the temp folder that does not exist yet.
public func temporaryPath(_ tag: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("syncledger-\(tag)-\(UUID().uuidString)").path
}

/// A stream in pool `test:0` for identity `test:<identity>`.
public func stream(_ dataset: String = "ds", identity: String = "1", pool: String = "test:0") -> StreamName {
    try! StreamName(pool: pool, identity: "test:\(identity)", dataset: dataset)
}

/// A clock tests can move.
public final class TestClock: Sendable {
    public init() {}
    let now = Mutex(Timestamp(milliseconds: 1_800_000_000_000))
    public func advance(seconds: Int64) { now.withLock { $0 = Timestamp(milliseconds: $0.milliseconds + seconds * 1000) } }
    public var read: @Sendable () -> Timestamp { { self.now.withLock { $0 } } }
}

extension Ledger {
    // Test helpers.
    /// Lists every page after `after`.
    public func allRecords(_ stream: StreamName, after: UInt64 = 0, pageSize: Int = 1024) throws -> (records: [Record], last: RecordsPage) {
        var page = try listRecords(stream, after: after, maxResults: pageSize)
        var records = page.records
        while let token = page.nextToken {
            page = try listRecords(stream, after: after, maxResults: pageSize, nextToken: token)
            records += page.records
        }
        return (records, page)
    }

    /// Sets `values` with the current sync counts, as a well-behaved device does.
    @discardableResult
    public func put(_ stream: StreamName, _ values: [String: String?], device: String? = nil) async throws -> UpdateResult {
        let (records, page) = try allRecords(stream)
        let counts = Dictionary(uniqueKeysWithValues: records.map { ($0.key, $0.syncCount) })
        let patches = values.sorted { $0.key < $1.key }.map { key, value in
            value.map { RecordPatch(op: .replace, key: key, value: $0, syncCount: counts[key] ?? 0) }
                ?? RecordPatch(op: .remove, key: key, syncCount: counts[key] ?? 0)
        }
        return try await updateRecords(stream, patches: patches, deviceID: device, sessionToken: page.syncSessionToken)
    }

    /// A fresh sync session token for `stream` (what a device gets from ListRecords).
    public func token(_ stream: StreamName) throws -> String { try listRecords(stream).syncSessionToken }

    /// The live records as a dictionary.
    public func values(_ stream: StreamName) throws -> [String: String] {
        Dictionary(uniqueKeysWithValues: try allRecords(stream).records.compactMap { r in r.value.map { (r.key, $0) } })
    }
}

/// Runs `body` expecting a LedgerError with `code`; returns it.
@discardableResult
public func expectLedgerError(_ code: LedgerError.Code, _ body: () async throws -> Void) async -> LedgerError? {
    do {
        try await body()
    } catch let error as LedgerError {
        if error.code == code { return error }
        Issue.record("expected \(code), got \(error)")
        return nil
    } catch {
        Issue.record("expected \(code), got \(error)")
        return nil
    }
    Issue.record("expected \(code), nothing was thrown")
    return nil
}


/// A small seeded generator (SplitMix64), so failures reproduce.
public struct SeededRandom: RandomNumberGenerator {
    public init(state: UInt64) { self.state = state }
    public var state: UInt64
    public mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}
