import Foundation
import HTTPTypes
import Hummingbird
import LedgerStorage
import NIOCore
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

@Suite struct InternalErrorTests {
    @Test func aFiveHundredSaysNothingOfItsCause() async throws {
        try await withLedger { ledger in
            let s = stream()
            try await ledger.put(s, ["k": "v"])
            // Damage the dataset's view: reading it now fails inside the ledger.
            try await ledger.write { txn in
                let head = try #require(try ledger.head(txn, s))
                try txn.put(ledger.schema.datasets, key: .bigEndian(head.id), value: [0xEE, 0x01, 0x02])
            }
            let server = InProcessRouteTests.Harness(ledger)
            let path = "/identitypools/test%3A0/identities/test%3A1/datasets/ds"
            try await server.request(.get, path, signedBy: server.admin) { response in
                #expect(response.status == .internalServerError)
                let message = String(buffer: response.body)
                let requestID = try #require(response.headers[HTTPField.Name("x-amzn-RequestId")!])
                #expect(message.contains(requestID), "the answer names the request id to find in the log")
                #expect(!message.contains("decode") && !message.contains("flags") && !message.contains("test:0/test:1"),
                        "no internal text: \(message)")
            }
            #expect(server.metrics.text(ledger: ledger).contains("syncledger_requests_total{operation=\"DescribeDataset\",status=\"500\"} 1"))
        }
    }
}
