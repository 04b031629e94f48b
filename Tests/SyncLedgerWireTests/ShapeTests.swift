import Foundation
import Testing
import SyncLedgerWire

/// `bytes` as JSON with sorted keys, to compare two texts whatever their members' order.
private func object(_ bytes: [UInt8]) throws -> String {
    let value = try JSONSerialization.jsonObject(with: Data(bytes))
    return String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]), as: UTF8.self)
}

/// Decodes `json`, expecting a ``WireDecodingError`` about `field`.
private func expectFailure<T: Decodable>(_ type: T.Type, _ json: String, field: String, _ reason: String? = nil,
                                         sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        _ = try WireJSON.decode(T.self, from: Array(json.utf8))
        Issue.record("decoded \(json)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.field == field, "\(error)", sourceLocation: sourceLocation)
        if let reason { #expect(error.reason.contains(reason), "\(error)", sourceLocation: sourceLocation) }
        #expect("\(error)".hasPrefix(field), sourceLocation: sourceLocation)
    }
}

@Suite struct CognitoSyncShapeTests {
    /// ListRecords as botocore's model has it: a record with its dates as epoch seconds with a
    /// fraction, a removed record without `Value`.
    static let listRecords = """
        {"Records":[{"Key":"color","Value":"blue","SyncCount":3,"LastModifiedDate":1764322037.123,"LastModifiedBy":"us-east-1:1111-bbbb","DeviceLastModifiedDate":1764322030.5},\
        {"Key":"gone","SyncCount":4,"LastModifiedDate":1764322040,"LastModifiedBy":"us-east-1:1111-bbbb"}],\
        "NextToken":"page2","Count":2,"DatasetSyncCount":4,"LastModifiedBy":"us-east-1:1111-bbbb","MergedDatasetNames":["old.settings"],\
        "DatasetExists":true,"DatasetDeletedAfterRequestedSyncCount":false,"SyncSessionToken":"tok/en+="}
        """

    @Test func listRecordsRoundTrips() throws {
        let page = try WireJSON.decode(CognitoSync.ListRecordsResponse.self, from: Array(Self.listRecords.utf8))
        let records = try #require(page.records)
        #expect(records.count == 2)
        #expect(records[0] == CognitoSync.Record(key: "color", value: "blue", syncCount: 3, lastModifiedDate: Timestamp(milliseconds: 1_764_322_037_123),
                                                 lastModifiedBy: "us-east-1:1111-bbbb", deviceLastModifiedDate: Timestamp(milliseconds: 1_764_322_030_500)))
        #expect(records[1].value == nil && records[1].deviceLastModifiedDate == nil)
        #expect(records[1].lastModifiedDate == Timestamp(milliseconds: 1_764_322_040_000))
        #expect(page.nextToken == "page2" && page.count == 2 && page.datasetSyncCount == 4 && page.mergedDatasetNames == ["old.settings"])
        #expect(page.datasetExists == true && page.datasetDeletedAfterRequestedSyncCount == false && page.syncSessionToken == "tok/en+=")

        let encoded = try WireJSON.encode(page)
        #expect(try WireJSON.decode(CognitoSync.ListRecordsResponse.self, from: encoded) == page)
        // The same members and values as botocore's text: PascalCase, dates as numbers, no Value
        // for the removed record, slashes not escaped.
        let ours = try object(encoded), theirs = try object(Array(Self.listRecords.utf8))
        #expect(ours == theirs)
        let text = String(decoding: encoded, as: UTF8.self)
        #expect(text.contains(#""LastModifiedDate":1764322037.123"#) && text.contains(#""LastModifiedDate":1764322040"#))
        #expect(text.components(separatedBy: #""Value""#).count == 2, "one Value: the removed record has none")
        #expect(!String(decoding: encoded, as: UTF8.self).contains("\\/"))
        #expect(String(decoding: encoded, as: UTF8.self).contains("1764322037.123"))
    }

    @Test func updateRecordsRequestRoundTrips() throws {
        let text = #"{"SyncSessionToken":"t","DeviceId":"d-1","RecordPatches":[{"Op":"replace","Key":"k","Value":"v","SyncCount":0,"DeviceLastModifiedDate":1764322030.25},{"Op":"remove","Key":"old","SyncCount":7}]}"#
        let request = try WireJSON.decode(CognitoSync.UpdateRecordsRequest.self, from: Array(text.utf8))
        #expect(request == CognitoSync.UpdateRecordsRequest(syncSessionToken: "t", deviceId: "d-1", recordPatches: [
            RecordPatch(op: .replace, key: "k", value: "v", syncCount: 0, deviceModified: Timestamp(milliseconds: 1_764_322_030_250)),
            RecordPatch(op: .remove, key: "old", syncCount: 7),
        ]))
        let encoded = try WireJSON.encode(request)
        #expect((try object(encoded)) == (try object(Array(text.utf8))))
        #expect(try WireJSON.decode(CognitoSync.UpdateRecordsRequest.self, from: encoded) == request)
        // A date is rounded to the millisecond, as the server stores it.
        let fine = try WireJSON.decode(RecordPatch.self, from: Array(#"{"Op":"replace","Key":"k","Value":"v","SyncCount":1,"DeviceLastModifiedDate":1.0006}"#.utf8))
        #expect(fine.deviceModified == Timestamp(milliseconds: 1001))

        let answer = #"{"Records":[{"Key":"k","Value":"v","SyncCount":1,"LastModifiedDate":1764322031.001,"LastModifiedBy":"me"}]}"#
        let response = try WireJSON.decode(CognitoSync.UpdateRecordsResponse.self, from: Array(answer.utf8))
        #expect(response.records?.first?.lastModifiedDate == Timestamp(milliseconds: 1_764_322_031_001))
        #expect((try object(try WireJSON.encode(response))) == (try object(Array(answer.utf8))))
    }

    @Test func datasetsRoundTrip() throws {
        let dataset = #"{"IdentityId":"us-east-1:1111-bbbb","DatasetName":"settings","CreationDate":1764322000.007,"LastModifiedDate":1764322037.123,"LastModifiedBy":"us-east-1:1111-bbbb","DataStorage":42,"NumRecords":3}"#
        let list = #"{"Datasets":[\#(dataset),{"DatasetName":"empty"}],"Count":2,"NextToken":"n"}"#
        let page = try WireJSON.decode(CognitoSync.ListDatasetsResponse.self, from: Array(list.utf8))
        #expect(page.datasets?.count == 2 && page.count == 2 && page.nextToken == "n")
        let first = try #require(page.datasets?.first)
        #expect(first == CognitoSync.Dataset(identityId: "us-east-1:1111-bbbb", datasetName: "settings", creationDate: Timestamp(milliseconds: 1_764_322_000_007),
                                             lastModifiedDate: Timestamp(milliseconds: 1_764_322_037_123), lastModifiedBy: "us-east-1:1111-bbbb",
                                             dataStorage: 42, numRecords: 3))
        #expect(page.datasets?.last == CognitoSync.Dataset(datasetName: "empty"))
        #expect((try object(try WireJSON.encode(page))) == (try object(Array(list.utf8))))

        for text in [#"{"Dataset":\#(dataset)}"#] {
            let described = try WireJSON.decode(CognitoSync.DescribeDatasetResponse.self, from: Array(text.utf8))
            let deleted = try WireJSON.decode(CognitoSync.DeleteDatasetResponse.self, from: Array(text.utf8))
            #expect(described.dataset == first && deleted.dataset == first)
            #expect((try object(try WireJSON.encode(described))) == (try object(Array(text.utf8))))
            #expect((try object(try WireJSON.encode(deleted))) == (try object(Array(text.utf8))))
        }
        #expect(try WireJSON.decode(CognitoSync.DescribeDatasetResponse.self, from: Array("{}".utf8)).dataset == nil)
    }

    @Test func offlineMergeAnswerRoundTrips() throws {
        let text = #"{"FastForward":false,"DatasetSyncCount":9,"Records":[{"Key":"a","Value":"1","SyncCount":9},{"Key":"b","SyncCount":9}],"Conflicts":[{"Key":"c","BaseSyncCount":2,"SyncCount":5}]}"#
        let answer = try WireJSON.decode(CognitoSync.OfflineMergeResponse.self, from: Array(text.utf8))
        #expect(answer == CognitoSync.OfflineMergeResponse(
            fastForward: false, datasetSyncCount: 9,
            records: [CognitoSync.Record(key: "a", value: "1", syncCount: 9), CognitoSync.Record(key: "b", value: nil, syncCount: 9)],
            conflicts: [.init(key: "c", baseSyncCount: 2, syncCount: 5)]))
        #expect((try object(try WireJSON.encode(answer))) == (try object(Array(text.utf8))))
    }

    @Test func requestsNameTheirPathsAndQueries() {
        #expect(CognitoSync.recordsPath(pool: "us-east-1:0000-aaaa", identity: "us-east-1:1111-bbbb", dataset: "my settings")
            == "/identitypools/us-east-1%3A0000-aaaa/identities/us-east-1%3A1111-bbbb/datasets/my%20settings/records")
        #expect(CognitoSync.datasetPath(pool: "p:0", identity: "i:1", dataset: "d") == "/identitypools/p%3A0/identities/i%3A1/datasets/d")
        let records = CognitoSync.ListRecordsRequest(lastSyncCount: 4, nextToken: "a/b", maxResults: 1024)
        #expect(records.queryItems.map { "\($0.name)=\($0.value)" } == ["lastSyncCount=4", "maxResults=1024", "nextToken=a/b"])
        #expect(CognitoSync.ListDatasetsRequest(maxResults: 64).queryItems.map(\.name) == ["maxResults"])
        #expect(CognitoSync.ListRecordsRequest().queryItems.isEmpty)
    }

    @Test func decodeFailuresNameTheField() {
        typealias Page = CognitoSync.ListRecordsResponse
        expectFailure(Page.self, #"{"Records":[{"Key":"a"},{"Value":"b"}]}"#, field: "Records[1].Key", "missing")
        expectFailure(Page.self, #"{"Records":[{"Key":"a","SyncCount":"3"}]}"#, field: "Records[0].SyncCount", "a number")
        expectFailure(Page.self, #"{"Records":[{"Key":"a","SyncCount":-1}]}"#, field: "Records[0].SyncCount")
        expectFailure(Page.self, #"{"Records":[{"Key":"a","LastModifiedDate":"2026-11-28T00:00:00Z"}]}"#, field: "Records[0].LastModifiedDate", "a number")
        expectFailure(Page.self, #"{"Records":[{"Key":"a","DeviceLastModifiedDate":1e300}]}"#, field: "Records[0].DeviceLastModifiedDate", "epoch seconds")
        expectFailure(Page.self, #"{"DatasetExists":"yes"}"#, field: "DatasetExists", "a boolean")
        expectFailure(Page.self, #"{"Records":{"Key":"a"}}"#, field: "Records")
        expectFailure(Page.self, #"{"Records":[{"Key":"a"}"#, field: "")
        expectFailure(CognitoSync.UpdateRecordsRequest.self, #"{"RecordPatches":[]}"#, field: "SyncSessionToken", "missing")
        expectFailure(CognitoSync.UpdateRecordsRequest.self, #"{"SyncSessionToken":"t","RecordPatches":[{"Op":"replace","Key":"k","SyncCount":1},{"Op":"upsert","Key":"k","SyncCount":1}]}"#,
                      field: "RecordPatches[1].Op")
        expectFailure(CognitoSync.UpdateRecordsRequest.self, #"{"SyncSessionToken":"t","RecordPatches":[{"Op":"remove","Key":"k"}]}"#,
                      field: "RecordPatches[0].SyncCount", "missing")
        expectFailure(CognitoSync.ListDatasetsResponse.self, #"{"Datasets":[{"DatasetName":"a"},{"DatasetName":null}]}"#, field: "Datasets[1].DatasetName")
        expectFailure(CognitoSync.OfflineMergeResponse.self, #"{"Conflicts":[{"BaseSyncCount":1}]}"#, field: "Conflicts[0].Key", "missing")
    }
}

@Suite struct CognitoIdentityShapeTests {
    @Test func signInShapesRoundTrip() throws {
        let getID = #"{"IdentityPoolId":"us-east-1:0000-aaaa","Logins":{"accounts.google.com":"eyJ.a.b"}}"#
        let request = try WireJSON.decode(CognitoIdentity.GetIdRequest.self, from: Array(getID.utf8))
        #expect(request == CognitoIdentity.GetIdRequest(identityPoolId: "us-east-1:0000-aaaa", logins: ["accounts.google.com": "eyJ.a.b"]))
        #expect(try object(try WireJSON.encode(request)) == (try object(Array(getID.utf8))))
        #expect(try object(try WireJSON.encode(CognitoIdentity.GetIdRequest(identityPoolId: "p:0"))) == (try object(Array(#"{"IdentityPoolId":"p:0"}"#.utf8))))
        #expect(try WireJSON.decode(CognitoIdentity.GetIdResponse.self, from: Array(#"{"IdentityId":"us-east-1:1111-bbbb"}"#.utf8)).identityId == "us-east-1:1111-bbbb")

        let answer = #"{"IdentityId":"us-east-1:1111-bbbb","Credentials":{"AccessKeyId":"ASIAEXAMPLE","SecretKey":"s/k+","SessionToken":"tok","Expiration":1764325630.5}}"#
        let credentials = try WireJSON.decode(CognitoIdentity.GetCredentialsForIdentityResponse.self, from: Array(answer.utf8))
        #expect(credentials == CognitoIdentity.GetCredentialsForIdentityResponse(identityId: "us-east-1:1111-bbbb", credentials: .init(
            accessKeyId: "ASIAEXAMPLE", secretKey: "s/k+", sessionToken: "tok", expiration: Timestamp(milliseconds: 1_764_325_630_500))))
        #expect(try object(try WireJSON.encode(credentials)) == (try object(Array(answer.utf8))))
        let forIdentity = CognitoIdentity.GetCredentialsForIdentityRequest(identityId: "us-east-1:1111-bbbb")
        #expect(try object(try WireJSON.encode(forIdentity)) == (try object(Array(#"{"IdentityId":"us-east-1:1111-bbbb"}"#.utf8))))
        #expect(CognitoIdentity.target("GetId") == "AWSCognitoIdentityService.GetId")

        expectFailure(CognitoIdentity.GetCredentialsForIdentityResponse.self, #"{"Credentials":{"AccessKeyId":"a","Expiration":"tomorrow"}}"#,
                      field: "Credentials.Expiration", "a number")
        expectFailure(CognitoIdentity.GetIdRequest.self, #"{"Logins":{}}"#, field: "IdentityPoolId", "missing")
        expectFailure(CognitoIdentity.GetIdRequest.self, #"{"IdentityPoolId":"p:0","Logins":{"a":1}}"#, field: "Logins.a", "a string")
    }
}
