import Foundation
import Testing
@testable import SyncLedger
@testable import SyncLedgerServer

/// The hand-written JSON of the hottest answers (FastShapes.swift) says what Foundation's
/// encoder says for the same shapes: the same members, values and dates, none left out or added.
@Suite struct FastShapesTests {
    static func object(_ bytes: [UInt8]) throws -> NSDictionary {
        try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? NSDictionary)
    }

    static let records = [
        CognitoSync.Record(key: "a", value: "quote \" slash / line\nbreak ☃", syncCount: 3, lastModifiedDate: Timestamp(milliseconds: 1_795_835_811_686),
                           lastModifiedBy: "us-east-1:abc", deviceLastModifiedDate: Timestamp(milliseconds: 1_795_835_811_001)),
        CognitoSync.Record(key: "removed", value: nil, syncCount: 4, lastModifiedDate: Timestamp(milliseconds: 5), lastModifiedBy: "admin:K"),
    ]

    @Test func listRecordsMatchesTheEncoder() throws {
        for answer in [
            CognitoSync.ListRecordsResponse(records: Self.records, nextToken: "next", count: 2, datasetSyncCount: 4, lastModifiedBy: "x",
                                            mergedDatasetNames: ["m.1"], datasetExists: true, datasetDeletedAfterRequestedSyncCount: false,
                                            syncSessionToken: "token"),
            CognitoSync.ListRecordsResponse(records: [], count: 0, datasetSyncCount: 0, mergedDatasetNames: [], datasetExists: false,
                                            datasetDeletedAfterRequestedSyncCount: false, syncSessionToken: "t"),
        ] {
            #expect(try Self.object(answer.fastJSON) == Self.object(try WireJSON.encode(answer)))
            #expect(try WireJSON.decode(CognitoSync.ListRecordsResponse.self, from: answer.fastJSON) == answer)
        }
    }

    @Test func updateRecordsMatchesTheEncoder() throws {
        let answer = CognitoSync.UpdateRecordsResponse(records: Self.records)
        #expect(try Self.object(answer.fastJSON) == Self.object(try WireJSON.encode(answer)))
        #expect(try WireJSON.decode(CognitoSync.UpdateRecordsResponse.self, from: answer.fastJSON) == answer)
    }
}
