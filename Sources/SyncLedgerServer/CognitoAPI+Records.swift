import Foundation
import NIOPosix
import SyncLedger

/// The record and dataset operations' wire shapes.
extension CognitoAPI {
    // MARK: Records

    /// Datasets up to this many bytes are read on the request's own task rather than on the
    /// blocking pool (``offPool(_:)``): at most this much is decoded and written out before the
    /// task yields its thread.
    static let inlineReadBytes: UInt64 = 64 * 1024

    func listRecords(_ route: Route, _ query: [(String, String)]) async throws -> WireResponse {
        let s = try stream(route)
        let after = try queryInt(query, "lastSyncCount", range: 0...Int64.max) ?? 0
        let max = Int(try queryInt(query, "maxResults", range: 1...1_000_000) ?? 1024)
        let (next, session) = (queryValue(query, "nextToken"), queryValue(query, "syncSessionToken"))
        let ledger = self.ledger
        let read = { @Sendable in try ledger.listRecords(s, after: UInt64(after), maxResults: max, nextToken: next, sessionToken: session) }
        // A small dataset is read where the request runs (a few µs); handing it to the blocking
        // pool and back would cost more than the read. A large one goes there.
        var page = try ledger.datasetBytes(s) <= Self.inlineReadBytes ? try read() : try await offPool(read)
        // A cluster node answers from its replica once the replica has what the caller has seen:
        // a caller ahead of it (it wrote through another node) waits for the shard's log, or goes
        // to the shard's owner.
        if let cluster, UInt64(after) > page.datasetSyncCount {
            if try await cluster.catchUp(with: s, ledger: ledger, timeout: .seconds(2)) {
                page = try await offPool(read)
            } else {
                let shard = cluster.shards.shard(of: s)
                throw ShardOwnedElsewhere(shard: shard, owner: await cluster.owner(of: shard))
            }
        }
        let answer = CognitoSync.ListRecordsResponse(
            records: page.records.map(Self.wireRecord), nextToken: page.nextToken, count: page.records.count,
            datasetSyncCount: page.datasetSyncCount, lastModifiedBy: page.lastModifiedBy, mergedDatasetNames: page.mergedDatasetNames,
            datasetExists: page.datasetExists, datasetDeletedAfterRequestedSyncCount: page.datasetDeletedAfterRequestedSyncCount,
            syncSessionToken: page.syncSessionToken)
        return WireResponse(status: 200, headers: [("content-type", "application/json")], body: answer.fastJSON)
    }

    /// A record in the wire's shape.
    static func wireRecord(_ record: Record) -> CognitoSync.Record {
        CognitoSync.Record(key: record.key, value: record.value, syncCount: record.syncCount, lastModifiedDate: record.state.lastModified,
                           lastModifiedBy: record.state.lastModifiedBy, deviceLastModifiedDate: record.state.deviceModified)
    }

    /// The pool's SyncTrigger for this caller: none for the developer's (admin) credential, as in
    /// Cognito; a configured ARN without a hook is refused rather than skipped.
    func syncTrigger(_ pool: IdentityPoolID, _ credential: Credential) throws -> (any SyncTrigger)? {
        if case .admin = credential.scope { return nil }
        guard let arn = try ledger.cognitoEvents(pool)["SyncTrigger"], !arn.isEmpty else { return nil }
        guard let hook = try ledger.secrets.hook(arn: arn) else {
            throw WireError(LedgerError(.hookInvalidOutput, "identity pool \(pool)'s SyncTrigger \(arn) has no hook endpoint configured (syncledger sync-trigger set)"))
        }
        guard let client = syncTriggerClient else {
            throw WireError(LedgerError(.hookInvalidOutput, "identity pool \(pool)'s SyncTrigger \(arn) cannot be called: this server was started without a hook client"))
        }
        return WebhookSyncTrigger(hook: hook, client: client, timeout: syncTriggerTimeout)
    }

    func updateRecords(_ route: Route, _ request: WireRequest, _ credential: Credential) async throws -> WireResponse {
        let s = try stream(route)
        let body = try decode(CognitoSync.UpdateRecordsRequest.self, request)
        let (token, deviceID, patches) = (body.syncSessionToken, body.deviceId, body.recordPatches ?? [])
        let result = try await ledger.updateRecords(s, patches: patches, deviceID: deviceID, caller: caller(credential), sessionToken: token,
                                                    idempotencyKey: request.header("idempotency-key"), trigger: try syncTrigger(s.pool, credential))
        let answer = CognitoSync.UpdateRecordsResponse(records: result.records.map(Self.wireRecord))
        var response = WireResponse(status: 200, headers: [("content-type", "application/json")], body: answer.fastJSON)
        if result.replayed { response.headers.append(("x-syncledger-replayed", "true")) }
        return response
    }

    // MARK: Datasets and usage

    func listDatasets(_ route: Route, _ query: [(String, String)]) async throws -> WireResponse {
        let max = Int(try queryInt(query, "maxResults", range: 1...1_000_000) ?? 20)
        let (pool, id, next) = (try poolID(route), try identityID(route), queryValue(query, "nextToken"))
        let ledger = self.ledger
        let page = try await offPool { try ledger.listDatasets(pool: pool, identity: id, maxResults: max, nextToken: next) }
        return try .json(CognitoSync.ListDatasetsResponse(datasets: page.datasets.map(Self.wireDataset), count: page.datasets.count,
                                                           nextToken: page.nextToken))
    }

    /// A dataset in the wire's shape.
    static func wireDataset(_ d: DatasetDescription) -> CognitoSync.Dataset {
        CognitoSync.Dataset(identityId: d.stream.identity.rawValue, datasetName: d.stream.dataset.rawValue, creationDate: d.created,
                            lastModifiedDate: d.lastModified, lastModifiedBy: d.lastModifiedBy, dataStorage: d.dataStorage, numRecords: d.numRecords)
    }

    /// A pool's usage in the wire's shape.
    static func wirePoolUsage(_ u: PoolUsage) -> CognitoSync.IdentityPoolUsage {
        CognitoSync.IdentityPoolUsage(identityPoolId: u.pool.rawValue, syncSessionsCount: UInt64(u.syncSessionsCount), dataStorage: UInt64(u.dataStorage),
                                      lastModifiedDate: u.lastModified)
    }
}
