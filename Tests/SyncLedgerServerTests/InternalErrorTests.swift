import Foundation
import LedgerStorage
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
            let admin = Credential.generate(scope: .admin)
            let api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: admin))
            let path = "/identitypools/test%3A0/identities/test%3A1/datasets/ds"
            let signer = SigV4Signer(accessKeyID: admin.accessKeyID, secretAccessKey: admin.secretAccessKey)
            let headers = signer.sign(method: "GET", host: "h:1", rawPath: path, rawQuery: nil, body: [])
            let (response, operation, _) = await api.handle(WireRequest(method: "GET", rawPath: path, rawQuery: nil, headers: [("host", "h:1")] + headers, body: []))
            #expect(operation == "DescribeDataset")
            #expect(response.status == 500)
            let message = String(decoding: response.body, as: UTF8.self)
            let requestID = try #require(response.headers.first { $0.0 == "x-amzn-RequestId" }?.1)
            #expect(message.contains(requestID), "the answer names the request id to find in the log")
            #expect(!message.contains("decode") && !message.contains("flags") && !message.contains("test:0/test:1"),
                    "no internal text: \(message)")
        }
    }
}
