public import AsyncHTTPClient
public import Foundation
import NIOHTTP1
import SyncLedger

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
            var query = [("lastSyncCount", String(lastSyncCount)), ("maxResults", String(Self.recordsPageSize))]
            if let nextToken { query.append(("nextToken", nextToken)) }
            let page = try decodeAnswer(ListRecordsAnswer.self, try await call(.GET, recordsPath(identity, dataset), query: query),
                                        operation: "ListRecords")
            records += (page.Records ?? []).map(\.remote)
            nextToken = page.NextToken.flatMap { $0.isEmpty ? nil : $0 }
            guard nextToken != nil else {
                return RemoteUpdates(records: records, datasetSyncCount: page.DatasetSyncCount ?? 0, datasetExists: page.DatasetExists ?? false,
                                     deletedAfterRequestedSyncCount: page.DatasetDeletedAfterRequestedSyncCount ?? false,
                                     mergedDatasetNames: page.MergedDatasetNames ?? [], syncSessionToken: page.SyncSessionToken ?? "")
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
        let request = UpdateRecordsRequest(
            SyncSessionToken: sessionToken, DeviceId: deviceID,
            RecordPatches: patches.map {
                PatchBody(Op: $0.value == nil ? "remove" : "replace", Key: $0.key, Value: $0.value, SyncCount: $0.syncCount,
                          DeviceLastModifiedDate: $0.deviceLastModified?.timeIntervalSince1970)
            })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return Array(try encoder.encode(request))
    }

    /// Posts an UpdateRecords body; the records the server answered.
    private func sendUpdate(identity: String, dataset: String, body: [UInt8]) async throws -> [RemoteRecord] {
        let answer = try await call(.POST, datasetPath(identity, dataset), body: body)
        return (try decodeAnswer(UpdateRecordsAnswer.self, answer, operation: "UpdateRecords").Records ?? []).map(\.remote)
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
            let report = try decodeAnswer(OfflineMergeAnswer.self, answer, operation: "MergeOfflineSegment")
            if let conflicts = report.Conflicts, !conflicts.isEmpty {
                throw SyncClientError.conflict("\(conflicts.count) record(s) changed on the server after sync count \(base)")
            }
            return (report.Records ?? []).map { RemoteRecord(key: $0.Key, value: $0.Value, syncCount: $0.SyncCount ?? 0) }
        }
        return try await sendUpdate(identity: identity, dataset: dataset, body: json)
    }

    /// The patches as one offline entry on top of `base`, encoded.
    static func offlineSegment(identity: String, pool: String, dataset: String, base: UInt64, patches: [RecordPatch], deviceID: String?) throws -> [UInt8] {
        let stream = try StreamName(pool: pool, identity: identity, dataset: dataset)
        let events: [Event] = patches.map { p in
            let device = p.deviceLastModified.map(Timestamp.init)
            if let value = p.value { return .put(key: p.key, value: value, deviceModified: device) }
            return .remove(key: p.key, deviceModified: device)
        }
        let segment = Segment.offlineChanges(stream: stream, base: base, author: deviceID ?? "device", device: deviceID,
                                             batches: [(Timestamp(Date()), events)])
        return try segment.encoded()
    }

    /// DeleteDataset; a dataset the server does not have (404) is not an error.
    public func deleteDataset(identity: String, dataset: String) async throws {
        do {
            _ = try await call(.DELETE, datasetPath(identity, dataset))
        } catch SyncClientError.notFound {
            // A dataset the server never had (or already deleted): nothing to do.
        }
    }

    /// ListDatasets, every page of 64.
    public func listDatasets(identity: String) async throws -> [RemoteDataset] {
        var datasets: [RemoteDataset] = []
        var nextToken: String?
        for _ in 0..<Self.maxPages {
            var query = [("maxResults", String(Self.datasetsPageSize))]
            if let nextToken { query.append(("nextToken", nextToken)) }
            let page = try decodeAnswer(ListDatasetsAnswer.self, try await call(.GET, datasetsPath(identity), query: query),
                                        operation: "ListDatasets")
            datasets += (page.Datasets ?? []).map(\.remote)
            nextToken = page.NextToken.flatMap { $0.isEmpty ? nil : $0 }
            if nextToken == nil { return datasets }
        }
        throw SyncClientError.server(status: 200, type: "InvalidResponse", message: "ListDatasets answered more than \(Self.maxPages) pages")
    }

    /// DescribeDataset; nil on a 404.
    public func describeDataset(identity: String, dataset: String) async throws -> RemoteDataset? {
        do {
            let answer = try await call(.GET, datasetPath(identity, dataset))
            return try decodeAnswer(DescribeDatasetAnswer.self, answer, operation: "DescribeDataset").Dataset?.remote
        } catch SyncClientError.notFound {
            return nil
        }
    }

    // MARK: Requests

    private func datasetsPath(_ identity: String) -> String {
        "/identitypools/\(SigV4.uriEncode(pool))/identities/\(SigV4.uriEncode(identity))/datasets"
    }

    private func datasetPath(_ identity: String, _ dataset: String) -> String {
        datasetsPath(identity) + "/" + SigV4.uriEncode(dataset)
    }

    /// ListRecords' path (UpdateRecords posts to the dataset's own path).
    private func recordsPath(_ identity: String, _ dataset: String) -> String {
        datasetPath(identity, dataset) + "/records"
    }

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

// MARK: Wire shapes (botocore's cognito-sync model; dates are epoch seconds)

private struct RecordBody: Decodable {
    var Key: String
    var Value: String?
    var SyncCount: UInt64?
    var LastModifiedDate: Double?
    var LastModifiedBy: String?
    var DeviceLastModifiedDate: Double?

    var remote: RemoteRecord {
        RemoteRecord(key: Key, value: Value, syncCount: SyncCount ?? 0, lastModified: LastModifiedDate.map(Date.init(timeIntervalSince1970:)),
                     lastModifiedBy: LastModifiedBy, deviceLastModified: DeviceLastModifiedDate.map(Date.init(timeIntervalSince1970:)))
    }
}

private struct OfflineMergeAnswer: Decodable {
    struct Applied: Decodable {
        var Key: String
        var Value: String?
        var SyncCount: UInt64?
    }
    struct Conflict: Decodable { var Key: String }
    var Records: [Applied]?
    var Conflicts: [Conflict]?
    var DatasetSyncCount: UInt64?
}

private struct ListRecordsAnswer: Decodable {
    var Records: [RecordBody]?
    var NextToken: String?
    var DatasetSyncCount: UInt64?
    var MergedDatasetNames: [String]?
    var DatasetExists: Bool?
    var DatasetDeletedAfterRequestedSyncCount: Bool?
    var SyncSessionToken: String?
}

private struct PatchBody: Encodable {
    var Op: String
    var Key: String
    var Value: String?
    var SyncCount: UInt64
    var DeviceLastModifiedDate: Double?
}

private struct UpdateRecordsRequest: Encodable {
    var SyncSessionToken: String
    var DeviceId: String?
    var RecordPatches: [PatchBody]
}

private struct UpdateRecordsAnswer: Decodable {
    var Records: [RecordBody]?
}

private struct DatasetBody: Decodable {
    var DatasetName: String
    var CreationDate: Double?
    var LastModifiedDate: Double?
    var LastModifiedBy: String?
    var DataStorage: UInt64?
    var NumRecords: UInt64?

    var remote: RemoteDataset {
        RemoteDataset(name: DatasetName, created: CreationDate.map(Date.init(timeIntervalSince1970:)),
                      lastModified: LastModifiedDate.map(Date.init(timeIntervalSince1970:)), lastModifiedBy: LastModifiedBy,
                      bytes: DataStorage ?? 0, records: NumRecords ?? 0)
    }
}

private struct ListDatasetsAnswer: Decodable {
    var Datasets: [DatasetBody]?
    var NextToken: String?
}

private struct DescribeDatasetAnswer: Decodable {
    var Dataset: DatasetBody?
}
