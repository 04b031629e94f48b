import Foundation
import Synchronization
import SyncLedger
@testable import SyncLedgerClient

/// A ``SyncTransport`` that runs the real server logic in-process: each call goes to a
/// `SyncLedger.Ledger` (ListRecords paged with the session token, UpdateRecords with the
/// Cognito sync-count check, DeleteDataset, ListDatasets, DescribeDataset), so a client is
/// tested against the server's semantics without HTTP.
///
/// It counts what it was asked and returned, and takes one-shot hooks: an error to throw at the
/// next pull of a dataset, and work to do just before the next push is applied (another device
/// writing in between).
final class LedgerTransport: SyncTransport {
    /// What the transport was asked and returned.
    struct Counters: Sendable {
        /// ListRecords calls (a pull of every page counts once).
        var pulls = 0
        /// Records returned by pulls, per dataset.
        var returned: [String: Int] = [:]
        /// UpdateRecords calls.
        var pushes = 0
        /// Pushes refused with a conflict.
        var conflicts = 0
    }

    let ledger: Ledger
    let pool: String
    let identity: String
    let pageSize: Int
    let counters = Mutex(Counters())
    private let failPull = Mutex<[String: any Error]>([:])
    private let beforePut = Mutex<[@Sendable () async throws -> Void]>([])

    /// A transport to `ledger` for `identity` of `pool`.
    init(ledger: Ledger, pool: String = "test:0", identity: String = "test:1", pageSize: Int = 1024) {
        self.ledger = ledger
        self.pool = pool
        self.identity = identity
        self.pageSize = pageSize
    }

    /// The next pull of `dataset` throws `error` (before anything is read).
    func failNextPull(of dataset: String, with error: any Error) { failPull.withLock { $0[dataset] = error } }

    /// `work` runs before the next push is applied.
    func beforeNextPush(_ work: @escaping @Sendable () async throws -> Void) { beforePut.withLock { $0.append(work) } }

    /// Records returned so far by pulls of `dataset`.
    func returned(_ dataset: String) -> Int { counters.withLock { $0.returned[dataset, default: 0] } }

    func stream(_ dataset: String, identity: String? = nil) throws -> StreamName {
        do { return try StreamName(pool: pool, identity: identity ?? self.identity, dataset: dataset) } catch { throw Self.map(error) }
    }

    static func map(_ error: LedgerError) -> SyncClientError {
        switch error.code {
        case .conflict: .conflict(error.message)
        case .notFound: .notFound(error.message)
        case .limitExceeded: .limitExceeded(error.message)
        case .invalidParameter: .invalidParameter(error.message)
        default: .server(status: 400, type: "\(error.code)", message: error.message)
        }
    }

    static func remote(_ r: Record) -> RemoteRecord {
        RemoteRecord(key: r.key, value: r.value, syncCount: r.syncCount, lastModified: r.state.lastModified.date,
                     lastModifiedBy: r.state.lastModifiedBy, deviceLastModified: r.state.deviceModified?.date)
    }

    static func remote(_ d: DatasetDescription) -> RemoteDataset {
        RemoteDataset(name: d.stream.dataset.rawValue, created: d.created.date, lastModified: d.lastModified.date,
                      lastModifiedBy: d.lastModifiedBy, bytes: d.dataStorage, records: d.numRecords)
    }

    // MARK: SyncTransport

    func identityID() async throws -> String { identity }

    func listUpdates(identity: String, dataset: String, after lastSyncCount: UInt64) async throws -> RemoteUpdates {
        if let error = failPull.withLock({ $0.removeValue(forKey: dataset) }) { throw error }
        let stream = try stream(dataset, identity: identity)
        do {
            var page = try ledger.listRecords(stream, after: lastSyncCount, maxResults: pageSize)
            var records = page.records
            while let token = page.nextToken {
                page = try ledger.listRecords(stream, after: lastSyncCount, maxResults: pageSize, nextToken: token, sessionToken: page.syncSessionToken)
                records += page.records
            }
            counters.withLock {
                $0.pulls += 1
                $0.returned[dataset, default: 0] += records.count
            }
            return RemoteUpdates(records: records.map(Self.remote), datasetSyncCount: page.datasetSyncCount, datasetExists: page.datasetExists,
                                 deletedAfterRequestedSyncCount: page.datasetDeletedAfterRequestedSyncCount,
                                 mergedDatasetNames: page.mergedDatasetNames, syncSessionToken: page.syncSessionToken)
        } catch let error as LedgerError {
            throw Self.map(error)
        }
    }

    func putRecords(identity: String, dataset: String, patches: [SyncLedgerClient.RecordPatch], sessionToken: String, deviceID: String?) async throws -> [RemoteRecord] {
        let hook = beforePut.withLock { $0.isEmpty ? nil : $0.removeFirst() }
        if let hook { try await hook() }
        let stream = try stream(dataset, identity: identity)
        let ledgerPatches = patches.map { p in
            SyncLedger.RecordPatch(op: p.value == nil ? .remove : .replace, key: p.key, value: p.value, syncCount: p.syncCount,
                                   deviceModified: p.deviceLastModified.map(Timestamp.init))
        }
        counters.withLock { $0.pushes += 1 }
        do {
            let result = try await ledger.updateRecords(stream, patches: ledgerPatches, deviceID: deviceID, sessionToken: sessionToken)
            return result.records.map(Self.remote)
        } catch let error as LedgerError {
            if error.code == .conflict { counters.withLock { $0.conflicts += 1 } }
            throw Self.map(error)
        }
    }

    func deleteDataset(identity: String, dataset: String) async throws {
        do { try await ledger.deleteDataset(try stream(dataset, identity: identity)) } catch let error as LedgerError {
            if error.code == .notFound { return }
            throw Self.map(error)
        }
    }

    func listDatasets(identity: String) async throws -> [RemoteDataset] {
        do {
            let poolID = try IdentityPoolID(pool), identityID = try IdentityID(identity)
            var page = try ledger.listDatasets(pool: poolID, identity: identityID, maxResults: 60)
            var found = page.datasets
            while let token = page.nextToken {
                page = try ledger.listDatasets(pool: poolID, identity: identityID, maxResults: 60, nextToken: token)
                found += page.datasets
            }
            return found.map(Self.remote)
        } catch let error as LedgerError {
            throw Self.map(error)
        }
    }

    func describeDataset(identity: String, dataset: String) async throws -> RemoteDataset? {
        do { return Self.remote(try ledger.describeDataset(try stream(dataset, identity: identity))) } catch let error as LedgerError {
            if error.code == .notFound { return nil }
            throw Self.map(error)
        }
    }
}
