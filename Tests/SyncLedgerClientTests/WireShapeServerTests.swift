import Foundation
import NIOHTTP1
@testable import SyncLedgerClient
import SyncLedgerWire
import Testing

/// The shared shapes against the real server's answers: each answer decodes, and encoded again
/// it is the same JSON member for member — the condition for the server to write its answers
/// through these shapes without changing its wire output.
final class WireShapeServerTests {
    let server: TestServer

    init() throws { server = try TestServer() }
    deinit { server.stop() }

    /// `bytes` as JSON with sorted keys, to compare two texts whatever their member order.
    private func canonical(_ bytes: [UInt8]) throws -> String {
        let object = try JSONSerialization.jsonObject(with: Data(bytes))
        return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    /// Calls the server as the admin; decodes its 2xx answer as `shape` and checks that the
    /// shape encodes back to the same JSON.
    private func call<Shape: Codable>(_ shape: Shape.Type, _ method: HTTPMethod, _ path: String, query: [(name: String, value: String)] = [],
                                      body: [UInt8] = [], contentType: String = "application/json",
                                      sourceLocation: SourceLocation = #_sourceLocation) async throws -> Shape {
        let signer = SigV4Signer(accessKeyID: TestServer.admin.accessKeyID, secretAccessKey: TestServer.admin.secretAccessKey)
        let rawQuery = query.map { SigV4.uriEncode($0.name) + "=" + SigV4.uriEncode($0.value) }.joined(separator: "&")
        let answer = try await HTTPExchange.send(endpoint: try HTTPEndpoint.parse(server.url).get(), method: method, path: path, query: rawQuery,
                                                 headers: body.isEmpty ? [] : [("content-type", contentType)], body: body, signer: signer,
                                                 timeout: .seconds(10))
        try #require(answer.status == 200, "\(method) \(path): \(answer.status) \(String(decoding: answer.body, as: UTF8.self))", sourceLocation: sourceLocation)
        let decoded = try WireJSON.decode(Shape.self, from: answer.body)
        #expect(try canonical(try WireJSON.encode(decoded)) == canonical(answer.body), "\(Shape.self)", sourceLocation: sourceLocation)
        return decoded
    }

    @Test func everyAnswerTheClientReadsRoundTripsThroughItsShape() async throws {
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let recordsPath = CognitoSync.recordsPath(pool: pool, identity: identity, dataset: "prefs")
        let datasetPath = CognitoSync.datasetPath(pool: pool, identity: identity, dataset: "prefs")

        let empty = try await call(CognitoSync.ListRecordsResponse.self, .GET, recordsPath, query: CognitoSync.ListRecordsRequest(lastSyncCount: 0).queryItems)
        #expect(empty.datasetExists == false && empty.records == [] && empty.syncSessionToken != nil)

        let first = CognitoSync.UpdateRecordsRequest(syncSessionToken: try #require(empty.syncSessionToken), deviceId: "device-1", recordPatches: [
            RecordPatch(op: .replace, key: "color", value: "blue", syncCount: 0, deviceModified: Timestamp(milliseconds: 1_700_000_000_250)),
            RecordPatch(op: .replace, key: "size / ü", value: "{\"n\": 1}", syncCount: 0),
        ])
        let written = try await call(CognitoSync.UpdateRecordsResponse.self, .POST, datasetPath, body: try WireJSON.encode(first))
        #expect(written.records?.count == 2 && written.records?.first { $0.key == "color" }?.deviceLastModifiedDate == Timestamp(milliseconds: 1_700_000_000_250))

        let second = try await call(CognitoSync.ListRecordsResponse.self, .GET, recordsPath, query: CognitoSync.ListRecordsRequest(lastSyncCount: 1).queryItems)
        let removal = CognitoSync.UpdateRecordsRequest(syncSessionToken: try #require(second.syncSessionToken),
                                                       recordPatches: [RecordPatch(op: .remove, key: "color", syncCount: 1)])
        _ = try await call(CognitoSync.UpdateRecordsResponse.self, .POST, datasetPath, body: try WireJSON.encode(removal))

        let page = try await call(CognitoSync.ListRecordsResponse.self, .GET, recordsPath,
                                  query: CognitoSync.ListRecordsRequest(lastSyncCount: 0, maxResults: 1).queryItems)
        #expect(page.records?.count == 1 && page.nextToken != nil && page.datasetSyncCount == 2 && page.datasetExists == true)
        let all = try await call(CognitoSync.ListRecordsResponse.self, .GET, recordsPath, query: CognitoSync.ListRecordsRequest(lastSyncCount: 0).queryItems)
        let removed = try #require(all.records?.first { $0.key == "color" })
        #expect(removed.value == nil && removed.syncCount == 2 && removed.lastModifiedDate != nil)

        let listed = try await call(CognitoSync.ListDatasetsResponse.self, .GET, CognitoSync.datasetsPath(pool: pool, identity: identity),
                                    query: CognitoSync.ListDatasetsRequest(maxResults: 64).queryItems)
        #expect(listed.datasets?.map(\.datasetName) == ["prefs"] && listed.count == 1)
        let described = try await call(CognitoSync.DescribeDatasetResponse.self, .GET, datasetPath)
        #expect(described.dataset?.numRecords == 1 && described.dataset?.identityId == identity)

        // A segment of offline changes, and its answer.
        let stream = try StreamName(pool: pool, identity: identity, dataset: "prefs")
        let segment = try OfflineSegment.encode(stream: stream, base: 2, patches: [SyncLedgerClient.RecordPatch(key: "k", value: "v", syncCount: 0, deviceLastModified: nil)],
                                                author: "device-1", device: "device-1", time: .now)
        let merged = try await call(CognitoSync.OfflineMergeResponse.self, .POST, "/segments",
                                    query: [("mode", "offline"), ("syncSessionToken", try #require(all.syncSessionToken))],
                                    body: segment, contentType: "application/vnd.syncledger.segment")
        #expect(merged.records?.map(\.key) == ["k"] && merged.conflicts == [] && merged.datasetSyncCount == 3)

        let deleted = try await call(CognitoSync.DeleteDatasetResponse.self, .DELETE, datasetPath)
        #expect(deleted.dataset?.datasetName == "prefs" && deleted.dataset?.numRecords == 2)
    }
}
