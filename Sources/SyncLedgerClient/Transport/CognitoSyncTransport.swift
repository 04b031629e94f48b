public import AsyncHTTPClient
public import Foundation
import NIOHTTP1
import SyncLedgerWire

/// The Cognito Sync REST API (2014-06-30) over HTTP, as botocore's `cognito-sync` model and
/// the AWS SDKs speak it: SigV4-signed (service `cognito-sync`) with the provider's
/// credentials, every page of ListRecords and ListDatasets read.
///
/// Errors are ``SyncClientError``s: 409 `ResourceConflictException` is
/// ``SyncClientError/conflict(_:)``, `LimitExceededException` and `TooManyRequestsException`
/// ``SyncClientError/limitExceeded(_:)``, refused credentials or signatures
/// ``SyncClientError/notAuthorized(_:)``, `ResourceNotFoundException`
/// ``SyncClientError/notFound(_:)``, a server that cannot be reached or does not answer within
/// the timeout ``SyncClientError/network(_:)``, and any other answer
/// ``SyncClientError/server(status:type:message:)``.
public final class CognitoSyncTransport: SyncTransport {
    /// The identity pool.
    public let pool: String
    /// The region requests are signed for.
    public let region: String
    /// Where credentials and the identity come from.
    public let credentials: any CredentialsProvider
    private let endpoint: Result<HTTPEndpoint, SyncClientError>
    private let client: HTTPClient
    private let timeout: Duration

    /// ListRecords' page size (Android's and the model's maximum).
    static let recordsPageSize = 1024
    /// ListDatasets' page size.
    static let datasetsPageSize = 64
    /// Most pages followed before giving up (a server that keeps answering NextToken).
    static let maxPages = 100_000

    /// The HTTP client the transport and ``CognitoIdentityCredentials`` use unless given one:
    /// unlike `HTTPClient.shared` it does not retry a refused connection until the timeout (an
    /// offline device learns it at once), follows no redirects (requests are signed for one
    /// host), does not decompress, and connects within 10 seconds. It is never shut down.
    public static let defaultHTTPClient: HTTPClient = {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(10), read: .seconds(60)),
            connectionPool: .init(idleTimeout: .seconds(60)),
            decompression: .disabled)
        configuration.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    /// A transport to the server at `endpoint`.
    ///
    /// - Parameters:
    ///   - endpoint: `http://` or `https://` with a host (and a port); any other URL makes
    ///     every call throw ``SyncClientError/invalidParameter(_:)``.
    ///   - region: the region in the signatures' scope.
    ///   - pool: the identity pool id (`region:uuid`).
    ///   - credentials: signs every request; `identityID()` asks it too.
    ///   - httpClient: the AsyncHTTPClient to send with (by default ``defaultHTTPClient``).
    ///   - timeout: how long one HTTP exchange (one page) may take.
    public init(endpoint: URL, region: String = "us-east-1", pool: String, credentials: any CredentialsProvider,
                httpClient: HTTPClient = CognitoSyncTransport.defaultHTTPClient, timeout: Duration = .seconds(30)) {
        self.endpoint = HTTPEndpoint.parse(endpoint)
        self.region = region
        self.pool = pool
        self.credentials = credentials
        self.client = httpClient
        self.timeout = timeout
    }

    /// The credentials provider's identity.
    public func identityID() async throws -> String {
        try await credentials.identityID()
    }

    /// ListRecords after `lastSyncCount`, every page of 1,024, concatenated; the dataset
    /// fields and the session token are the last page's.
    public func listUpdates(identity: String, dataset: String, after lastSyncCount: UInt64) async throws -> RemoteUpdates {
        var records: [RemoteRecord] = []
        var nextToken: String?
        for _ in 0..<Self.maxPages {
            let query = CognitoSync.ListRecordsRequest(lastSyncCount: lastSyncCount, nextToken: nextToken, maxResults: Self.recordsPageSize)
            let path = CognitoSync.recordsPath(pool: pool, identity: identity, dataset: dataset)
            let page = try decodeAnswer(CognitoSync.ListRecordsResponse.self, try await call(.GET, path, query: query.queryItems),
                                        operation: "ListRecords")
            records += (page.records ?? []).map(RemoteRecord.init)
            nextToken = page.nextToken.flatMap { $0.isEmpty ? nil : $0 }
            guard nextToken != nil else {
                return RemoteUpdates(records: records, datasetSyncCount: page.datasetSyncCount ?? 0, datasetExists: page.datasetExists ?? false,
                                     deletedAfterRequestedSyncCount: page.datasetDeletedAfterRequestedSyncCount ?? false,
                                     mergedDatasetNames: page.mergedDatasetNames ?? [], syncSessionToken: page.syncSessionToken ?? "")
            }
        }
        throw SyncClientError.server(status: 200, type: "InvalidResponse", message: "ListRecords answered more than \(Self.maxPages) pages")
    }

    /// UpdateRecords (`POST …/datasets/{name}`): a nil value is `Op=remove`.
    /// - Throws: ``SyncClientError/conflict(_:)`` when a record changed since its sync count.
    public func putRecords(identity: String, dataset: String, patches: [RecordPatch], sessionToken: String, deviceID: String?) async throws -> [RemoteRecord] {
        try await sendUpdate(identity: identity, dataset: dataset, body: try Self.updateBody(patches, sessionToken: sessionToken, deviceID: deviceID))
    }

    /// UpdateRecords' JSON body.
    private static func updateBody(_ patches: [RecordPatch], sessionToken: String, deviceID: String?) throws -> [UInt8] {
        let request = CognitoSync.UpdateRecordsRequest(syncSessionToken: sessionToken, deviceId: deviceID, recordPatches: patches.map { patch in
            // The device time to the nearest millisecond, as the server rounds what it is sent.
            let device = patch.deviceLastModified.map { Timestamp(milliseconds: Int64(($0.timeIntervalSince1970 * 1000).rounded())) }
            return SyncLedgerWire.RecordPatch(op: patch.value == nil ? .remove : .replace, key: patch.key, value: patch.value,
                                              syncCount: patch.syncCount, deviceModified: device)
        })
        return try WireJSON.encode(request)
    }

    /// Posts an UpdateRecords body; the records the server answered.
    private func sendUpdate(identity: String, dataset: String, body: [UInt8]) async throws -> [RemoteRecord] {
        let answer = try await call(.POST, CognitoSync.datasetPath(pool: pool, identity: identity, dataset: dataset), body: body)
        return (try decodeAnswer(CognitoSync.UpdateRecordsResponse.self, answer, operation: "UpdateRecords").records ?? []).map(RemoteRecord.init)
    }

    /// Changes at least this big as UpdateRecords JSON are also encoded as a segment, and the
    /// smaller of the two is sent (small pushes are not worth compressing).
    public static let segmentThreshold = 16 * 1024

    /// Pushes as UpdateRecords, or as a zstd segment of offline changes
    /// (`POST /segments?mode=offline`) when the patches make at least ``segmentThreshold`` bytes
    /// of JSON and the segment is smaller. The server applies both with the same rules: a key
    /// changed on the server after `base` is a conflict (409) and nothing is written.
    public func pushChanges(identity: String, dataset: String, base: UInt64, patches: [RecordPatch], sessionToken: String, deviceID: String?) async throws -> [RemoteRecord] {
        let json = try Self.updateBody(patches, sessionToken: sessionToken, deviceID: deviceID)
        if json.count >= Self.segmentThreshold, patches.count <= 1024, let segment = try? Self.offlineSegment(identity: identity, pool: pool, dataset: dataset, base: base, patches: patches, deviceID: deviceID),
           segment.count < json.count {
            var query = [("mode", "offline"), ("syncSessionToken", sessionToken)]
            if let deviceID { query.append(("deviceId", deviceID)) }
            let answer = try await call(.POST, "/segments", query: query, body: segment, contentType: "application/vnd.syncledger.segment")
            let report = try decodeAnswer(CognitoSync.OfflineMergeResponse.self, answer, operation: "MergeOfflineSegment")
            if let conflicts = report.conflicts, !conflicts.isEmpty {
                throw SyncClientError.conflict("\(conflicts.count) record(s) changed on the server after sync count \(base)")
            }
            return (report.records ?? []).map(RemoteRecord.init)
        }
        return try await sendUpdate(identity: identity, dataset: dataset, body: json)
    }

    /// The patches as one offline entry on top of `base`, encoded (``OfflineSegment``).
    static func offlineSegment(identity: String, pool: String, dataset: String, base: UInt64, patches: [RecordPatch], deviceID: String?) throws -> [UInt8] {
        let stream = try StreamName(pool: pool, identity: identity, dataset: dataset)
        return try OfflineSegment.encode(stream: stream, base: base, patches: patches, author: deviceID ?? "device", device: deviceID, time: Timestamp(Date()))
    }

    /// DeleteDataset; a dataset the server does not have (404) is not an error.
    public func deleteDataset(identity: String, dataset: String) async throws {
        do {
            _ = try await call(.DELETE, CognitoSync.datasetPath(pool: pool, identity: identity, dataset: dataset))
        } catch SyncClientError.notFound {
            // A dataset the server never had (or already deleted): nothing to do.
        }
    }

    /// ListDatasets, every page of 64.
    public func listDatasets(identity: String) async throws -> [RemoteDataset] {
        var datasets: [RemoteDataset] = []
        var nextToken: String?
        for _ in 0..<Self.maxPages {
            let query = CognitoSync.ListDatasetsRequest(nextToken: nextToken, maxResults: Self.datasetsPageSize)
            let page = try decodeAnswer(CognitoSync.ListDatasetsResponse.self,
                                        try await call(.GET, CognitoSync.datasetsPath(pool: pool, identity: identity), query: query.queryItems),
                                        operation: "ListDatasets")
            datasets += (page.datasets ?? []).map(RemoteDataset.init)
            nextToken = page.nextToken.flatMap { $0.isEmpty ? nil : $0 }
            if nextToken == nil { return datasets }
        }
        throw SyncClientError.server(status: 200, type: "InvalidResponse", message: "ListDatasets answered more than \(Self.maxPages) pages")
    }

    /// DescribeDataset; nil on a 404.
    public func describeDataset(identity: String, dataset: String) async throws -> RemoteDataset? {
        do {
            let answer = try await call(.GET, CognitoSync.datasetPath(pool: pool, identity: identity, dataset: dataset))
            return try decodeAnswer(CognitoSync.DescribeDatasetResponse.self, answer, operation: "DescribeDataset").dataset.map(RemoteDataset.init)
        } catch SyncClientError.notFound {
            return nil
        }
    }

    // MARK: Requests

    /// A signed request; an answer that is not 2xx becomes its ``SyncClientError``.
    private func call(_ method: HTTPMethod, _ path: String, query: [(String, String)] = [], body: [UInt8] = [],
                      contentType: String = "application/json") async throws -> HTTPAnswer {
        let endpoint = try self.endpoint.get()
        let credentials = try await self.credentials.credentials()
        let signer = SigV4Signer(accessKeyID: credentials.accessKeyID, secretAccessKey: credentials.secretAccessKey,
                                 sessionToken: credentials.sessionToken, region: region, service: "cognito-sync")
        let rawQuery = query.map { SigV4.uriEncode($0.0) + "=" + SigV4.uriEncode($0.1) }.joined(separator: "&")
        let headers: [(String, String)] = body.isEmpty ? [] : [("content-type", contentType)]
        let answer = try await HTTPExchange.send(client, endpoint: endpoint, method: method, path: path, query: rawQuery,
                                                 headers: headers, body: body, signer: signer, timeout: timeout)
        guard (200..<300).contains(answer.status) else {
            throw AWSErrorBody(answer).clientError(status: answer.status)
        }
        return answer
    }
}

// MARK: From the shared wire shapes

extension RemoteRecord {
    /// A record as the server answered it (a missing sync count is 0).
    init(_ record: CognitoSync.Record) {
        self.init(key: record.key, value: record.value, syncCount: record.syncCount ?? 0, lastModified: record.lastModifiedDate?.date,
                  lastModifiedBy: record.lastModifiedBy, deviceLastModified: record.deviceLastModifiedDate?.date)
    }
}

extension RemoteDataset {
    /// A dataset as the server described it (missing sizes are 0).
    init(_ dataset: CognitoSync.Dataset) {
        self.init(name: dataset.datasetName, created: dataset.creationDate?.date, lastModified: dataset.lastModifiedDate?.date,
                  lastModifiedBy: dataset.lastModifiedBy, bytes: dataset.dataStorage ?? 0, records: dataset.numRecords ?? 0)
    }
}
