import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Synchronization
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

/// Every route family answered in process, through Hummingbird's testing framework
/// (`app.test(.router)`): the server's own request handler — routing, SigV4, authorization, the
/// API families' error formats, `/health`, `/metrics` — with no socket. The transport's guards
/// (timeouts, body budget) sit under it and are tested on the wire (Tests/wire/test_dos.py,
/// test_transport.py).
@Suite struct InProcessRouteTests {
    /// The authority Hummingbird's router test framework gives every request (its Host).
    static let host = "localhost"

    /// A single-node server's responder over `ledger` (no push, no streams, not a cluster), the
    /// admin credential it accepts, and a request helper.
    struct Harness {
        let ledger: Ledger
        let admin: Credential
        let app: Application<RouterResponder<SyncLedgerContext>>
        /// The request counts and latencies the routes record (by operation and status), and
        /// the ledger's group commits from the harness's start.
        let metrics: ServerMetrics

        init(_ ledger: Ledger) {
            self.ledger = ledger
            metrics = ServerMetrics(startSequence: 0, ledger: ledger)
            let admin = Credential.generate(scope: .admin)
            self.admin = admin
            let logger = Logger(label: "in-process")
            let api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: admin))
            let limits = HTTPLimits(idleTimeout: .seconds(60), headerTimeout: .seconds(10), bodyTimeout: .seconds(30), maxBodyBytes: 1 << 20)
            let events = EventService(ledger: ledger, authenticator: api.authenticator, options: EventStreamOptions(), maxConnections: 16,
                                      logger: logger, sources: ClientSource())
            let handler = RequestHandler(
                api: api, events: events, metrics: metrics,
                transport: TransportShared(limits: limits, connections: ConnectionRegistry(maximum: 16),
                                           budget: BodyBudget(capacity: 8 << 20, connections: 16, largestBody: 1 << 20), metrics: TransportMetrics()),
                ledger: ledger, push: nil, maxBodyBytes: 1 << 20, logger: logger)
            app = Application(router: handler.router(), logger: logger)
        }

        /// `path` (as sent, percent-encoded) with `query`, signed by `credential` for `service`
        /// unless it is nil.
        func request(_ method: HTTPRequest.Method, _ path: String, query: String? = nil, body: String = "",
                     headers extra: [(String, String)] = [], signedBy credential: Credential?, service: String = "cognito-sync",
                     _ check: @escaping @Sendable (TestResponse) throws -> Void) async throws {
            var headers = HTTPFields()
            for (name, value) in extra { headers[HTTPField.Name(name)!] = value }
            if let credential {
                let signer = SigV4Signer(accessKeyID: credential.accessKeyID, secretAccessKey: credential.secretAccessKey,
                                         sessionToken: credential.sessionToken, service: service)
                let signed = signer.sign(method: method.rawValue, host: InProcessRouteTests.host, rawPath: path, rawQuery: query,
                                         headers: extra, body: Array(body.utf8))
                for (name, value) in signed { headers[HTTPField.Name(name)!] = value }
            }
            let sent = headers
            try await app.test(.router) { client in
                try await client.execute(uri: path + (query.map { "?" + $0 } ?? ""), method: method, headers: sent,
                                         body: ByteBuffer(string: body)) { response in try check(response) }
            }
        }
    }

    static func json(_ response: TestResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any])
    }

    static func errorType(_ response: TestResponse) -> String? { response.headers[HTTPField.Name("x-amzn-ErrorType")!] }

    static let records = "/identitypools/us-east-1%3Aa0/identities/us-east-1%3Ab1/datasets/notes/records"
    static let dataset = "/identitypools/us-east-1%3Aa0/identities/us-east-1%3Ab1/datasets/notes"

    @Test func healthAndMetrics() async throws {
        try await withLedger { ledger in
            let server = Harness(ledger)
            try await server.request(.get, "/health", signedBy: nil) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body) == "{\"status\":\"ok\"}")
            }
            // /metrics on the API's listener needs the admin's signature.
            try await server.request(.get, "/metrics", signedBy: nil) { response in
                #expect(response.status == .forbidden)
                #expect(Self.errorType(response) == "NotAuthorizedException")
            }
            try await server.request(.get, "/metrics", signedBy: server.admin) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains("syncledger_"))
            }
        }
    }

    /// Every operation of botocore's Cognito Sync model has its route, and names its operation
    /// before the signature is checked (an unsigned request is refused, and counted under the
    /// operation it asked for); paths and methods the model does not have are unknown.
    @Test func everyCognitoSyncOperationHasItsRoute() async throws {
        let cases: [(HTTPRequest.Method, String, CognitoOperation)] = [
            (.get, "/identitypools", .listIdentityPoolUsage),
            (.get, "/identitypools/p", .describeIdentityPoolUsage),
            (.post, "/identitypools/p/bulkpublish", .bulkPublish),
            (.post, "/identitypools/p/getBulkPublishDetails", .getBulkPublishDetails),
            (.get, "/identitypools/p/events", .getCognitoEvents),
            (.post, "/identitypools/p/events", .setCognitoEvents),
            (.get, "/identitypools/p/configuration", .getIdentityPoolConfiguration),
            (.post, "/identitypools/p/configuration", .setIdentityPoolConfiguration),
            (.post, "/identitypools/p/identity/i/device", .registerDevice),
            (.get, "/identitypools/p/identities/i", .describeIdentityUsage),
            (.get, "/identitypools/p/identities/i/datasets", .listDatasets),
            (.get, "/identitypools/p/identities/i/datasets/d", .describeDataset),
            (.post, "/identitypools/p/identities/i/datasets/d", .updateRecords),
            (.delete, "/identitypools/p/identities/i/datasets/d", .deleteDataset),
            (.get, "/identitypools/p/identities/i/datasets/d/records", .listRecords),
            (.post, "/identitypools/p/identities/i/datasets/d/subscriptions/x", .subscribeToDataset),
            (.delete, "/identitypools/p/identities/i/datasets/d/subscriptions/x", .unsubscribeFromDataset),
        ]
        #expect(Set(cases.map(\.2)) == Set(CognitoOperation.allCases))
        try await withLedger { ledger in
            let server = Harness(ledger)
            for (method, path, _) in cases {
                try await server.request(method, path, signedBy: nil) { response in
                    #expect(response.status == .forbidden && Self.errorType(response) == "NotAuthorizedException", "\(method) \(path)")
                }
            }
            let counted = server.metrics.text(ledger: ledger)
            for (_, _, operation) in cases {
                #expect(counted.contains("syncledger_requests_total{operation=\"\(operation.rawValue)\",status=\"403\"} "), "\(operation)")
            }
            for (method, path) in [(HTTPRequest.Method.put, "/identitypools/p"), (.get, "/other"),
                                   (.get, "/identitypools/p/identities/i/datasets/d/nope"), (.patch, "/identitypools/p/identities/i/datasets/d")] {
                try await server.request(method, path, signedBy: server.admin) { response in
                    #expect(response.status == .notFound && Self.errorType(response) == "UnknownOperationException", "\(method) \(path)")
                }
            }
            // A segment that decodes to "..", or an empty one, is refused before any route runs.
            for path in ["/identitypools/p/identities/%2E%2E/datasets", "/identitypools//identities"] {
                try await server.request(.get, path, signedBy: server.admin) { response in
                    #expect(response.status == .badRequest && Self.errorType(response) == "InvalidParameterException", "\(path)")
                }
            }
        }
    }

    @Test func cognitoSyncWritesAndReadsAndRefusesInItsOwnFormat() async throws {
        try await withLedger { ledger in
            let server = Harness(ledger)
            let token = Mutex<String?>(nil)
            try await server.request(.get, Self.records, signedBy: server.admin) { response in
                #expect(response.status == .ok)
                token.withLock { $0 = (try? Self.json(response))?["SyncSessionToken"] as? String }
            }
            let sessionToken = try #require(token.withLock { $0 })
            let update = "{\"SyncSessionToken\":\"\(sessionToken)\",\"RecordPatches\":[{\"Op\":\"replace\",\"Key\":\"k\",\"Value\":\"v\",\"SyncCount\":0}]}"
            try await server.request(.post, Self.dataset, body: update, signedBy: server.admin) { response in
                #expect(response.status == .ok)
                let records = try #require(try Self.json(response)["Records"] as? [[String: Any]])
                #expect(records.first?["Key"] as? String == "k" && records.first?["SyncCount"] as? Int == 1)
            }
            try await server.request(.get, Self.records, query: "lastSyncCount=0", signedBy: server.admin) { response in
                let body = try Self.json(response)
                #expect(body["DatasetSyncCount"] as? Int == 1)
                #expect((body["Records"] as? [[String: Any]])?.map { $0["Value"] as? String } == ["v"])
                #expect(response.headers[HTTPField.Name("x-amzn-RequestId")!] != nil)
            }
            // The same write again (a stale sync count) is a conflict, said Cognito's way.
            try await server.request(.post, Self.dataset, body: update, signedBy: server.admin) { response in
                #expect(response.status.code == 409)
                #expect(Self.errorType(response) == "ResourceConflictException")
                let message = try Self.json(response)["message"]
                #expect(message is String)
            }
            // Unsigned, a wrong secret, another identity's credential, an unknown operation.
            try await server.request(.get, Self.records, signedBy: nil) { response in
                #expect(response.status == .forbidden && Self.errorType(response) == "NotAuthorizedException")
            }
            let forged = Credential(accessKeyID: server.admin.accessKeyID, secretAccessKey: "not-the-secret", scope: .admin)
            try await server.request(.get, Self.records, signedBy: forged) { response in
                #expect(response.status == .forbidden && Self.errorType(response) == "NotAuthorizedException")
            }
            let other = Credential.generate(scope: .identity(pool: "us-east-1:a0", identity: "us-east-1:c2"))
            try ledger.secrets.store(other)
            try await server.request(.get, Self.records, signedBy: other) { response in
                #expect(response.status == .forbidden)
                let message = try Self.json(response)["message"] as? String
                #expect(message == "access key \(other.accessKeyID) may reach only identity us-east-1:c2 in pool us-east-1:a0")
            }
            try await server.request(.put, Self.records, signedBy: server.admin) { response in
                #expect(response.status == .notFound && Self.errorType(response) == "UnknownOperationException")
            }
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func cognitoIdentitySpeaksAwsJson() async throws {
        try await withLedger { ledger in
            let server = Harness(ledger)
            let target = ("x-amz-target", "AWSCognitoIdentityService.CreateIdentityPool")
            let json = ("content-type", "application/x-amz-json-1.1")
            let pool = Mutex<String?>(nil)
            try await server.request(.post, "/", body: "{\"IdentityPoolName\":\"notes\",\"AllowUnauthenticatedIdentities\":true}",
                                     headers: [target, json], signedBy: server.admin, service: "cognito-identity") { response in
                #expect(response.status == .ok)
                pool.withLock { $0 = (try? Self.json(response))?["IdentityPoolId"] as? String }
            }
            let poolID = try #require(pool.withLock { $0 })
            // GetId needs no signature for a pool that allows unauthenticated identities.
            try await server.request(.post, "/", body: "{\"IdentityPoolId\":\"\(poolID)\"}",
                                     headers: [("x-amz-target", "AWSCognitoIdentityService.GetId"), json], signedBy: nil) { response in
                #expect(response.status == .ok)
                let answer = try Self.json(response)
                #expect((answer["IdentityId"] as? String)?.hasPrefix("us-east-1:") == true)
            }
            // Its errors are awsJson1_1's: {"__type", "message"}.
            try await server.request(.post, "/", body: "{\"IdentityPoolId\":\"us-east-1:00000000-0000-0000-0000-000000000000\"}",
                                     headers: [("x-amz-target", "AWSCognitoIdentityService.GetId"), json], signedBy: nil) { response in
                #expect(response.status == .badRequest || response.status == .notFound)
                let body = try Self.json(response)
                #expect(body["__type"] as? String == Self.errorType(response))
                let message = body["message"]
                #expect(message is String)
            }
        }
    }

    @Test func devicesMessagesSegmentsAdminAndClusterFamilies() async throws {
        try await withLedger { ledger in
            let server = Harness(ledger)
            let person = Credential.generate(scope: .identity(pool: "us-east-1:a0", identity: "us-east-1:b1"))
            try ledger.secrets.store(person)
            try await server.request(.get, "/devices", signedBy: person) { response in
                #expect(response.status == .ok)
                let answer = try Self.json(response)
                #expect(answer["Devices"] as? [Any] != nil)
            }
            try await server.request(.get, "/devices", signedBy: nil) { response in
                #expect(response.status == .forbidden && Self.errorType(response) == "NotAuthorizedException")
            }
            try await server.request(.post, "/messages", body: "{}", signedBy: server.admin) { response in
                #expect(response.status == .forbidden)
                let answer = try Self.json(response)
                #expect((answer["message"] as? String)?.contains("device's identity") == true)
            }
            try await server.request(.get, "/messages", query: "consumer=reader", signedBy: server.admin) { response in
                #expect(response.status == .ok)
            }
            try await server.request(.get, "/segments/digest", signedBy: server.admin) { response in
                #expect(response.status == .ok)
            }
            try await server.request(.get, "/segments/digest", signedBy: person) { response in
                #expect(response.status == .forbidden)
            }
            try await server.request(.get, "/admin/redactions", query: "IdentityPoolId=us-east-1%3Aa0", signedBy: server.admin) { response in
                #expect(response.status == .ok)
            }
            try await server.request(.get, "/admin/redactions", query: "IdentityPoolId=us-east-1%3Aa0", signedBy: person) { response in
                #expect(response.status == .forbidden && Self.errorType(response) == "NotAuthorizedException")
            }
            try await server.request(.get, "/cluster/status", signedBy: server.admin) { response in
                #expect(response.status == .badRequest)
                let answer = try Self.json(response)
                #expect((answer["message"] as? String)?.contains("not a cluster node") == true)
            }
            try await server.request(.get, "/.well-known/jwks.json", signedBy: nil) { response in
                #expect(response.status == .ok)
                let answer = try Self.json(response)
                #expect((answer["keys"] as? [[String: Any]])?.first?["kty"] as? String == "EC")
            }
        }
    }

    @Test func eventsAndTheHistoryPageRefuseTheUnsigned() async throws {
        try await withLedger { ledger in
            let server = Harness(ledger)
            try await server.request(.options, "/events", headers: [("origin", "https://app.example"), ("access-control-request-method", "GET")],
                                     signedBy: nil) { response in
                #expect(response.status.code < 300)
                #expect(response.headers[.accessControlAllowOrigin] != nil)
            }
            try await server.request(.get, "/events", signedBy: nil) { response in
                #expect(response.status == .forbidden && Self.errorType(response) == "NotAuthorizedException")
            }
            try await server.request(.get, "/ui/", signedBy: nil) { response in
                #expect(response.status == .forbidden)
            }
        }
    }

    /// Operation names come from the routes, never from the caller's text: a made-up Cognito
    /// Identity target or history-browser view, sent unsigned, is counted as `Unknown`, so an
    /// unauthenticated caller cannot mint new metric labels (each would be a new series kept in
    /// memory for the server's life).
    @Test func callersCannotMintOperationNames() async throws {
        try await withLedger { ledger in
            let server = Harness(ledger)
            for i in 0..<3 {
                try await server.request(.post, "/", body: "{}", headers: [("x-amz-target", "AWSCognitoIdentityService.Made\(i)Up"),
                                                                         ("content-type", "application/x-amz-json-1.1")], signedBy: nil) { response in
                    #expect(response.status == .badRequest)
                }
                try await server.request(.get, "/admin/ui/view\(i)", signedBy: nil) { response in
                    #expect(response.status == .forbidden)
                }
            }
            let counted = server.metrics.text(ledger: ledger)
            #expect(counted.contains("syncledger_requests_total{operation=\"Identity.Unknown\",status=\"400\"} 3"))
            #expect(counted.contains("syncledger_requests_total{operation=\"UI.Unknown\",status=\"403\"} 3"))
            #expect(!counted.contains("Made0Up") && !counted.contains("view0"))
        }
    }
}
