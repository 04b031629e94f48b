import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Prometheus
import Synchronization
import Testing
import SyncLedgerClient
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

/// SyncLedger embedded in a host application (docs/embedding.md): the host's own router, request
/// context and middleware, SyncLedger's routes under `/sync`, its services in the host's group,
/// a real listener on loopback, and the client library as the device.
@Suite struct EmbeddingTests {
    /// A host's request context: SyncLedger's two members beside one of its own.
    struct HostContext: SyncLedgerRequestContext {
        var coreContext: CoreRequestContextStorage
        let channel: any Channel
        var syncLedger = SyncLedgerRequestState()
        /// The host's own state (set by its middleware).
        var tenant = "-"

        init(source: ApplicationRequestContextSource) {
            coreContext = .init(source: source)
            channel = source.channel
        }
    }

    /// The host's middleware, around its routes and SyncLedger's alike.
    struct HostStamp: RouterMiddleware {
        typealias Context = HostContext
        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            var context = context
            context.tenant = "acme"
            var response = try await next(request, context)
            response.headers[HTTPField.Name("x-host-tenant")!] = context.tenant
            return response
        }
    }

    @Test func aHostServesSyncLedgerUnderItsPrefixToTheClientLibrary() async throws {
        try await withLedger { ledger in
            let pool = try await ledger.createIdentityPool(region: "us-east-1", name: "embedded", allowUnauthenticatedIdentities: true,
                                                           developerProviderName: nil, supportedLoginProviders: [:], caller: "test")
            // The host's own Prometheus registry, with a series of its own.
            let registry = PrometheusCollectorRegistry()
            registry.makeCounter(name: "host_hellos_total").increment()
            let embedding = SyncLedgerEmbedding(ledger: ledger, admin: Credential.generate(scope: .admin), prometheus: registry,
                                                logger: Logger(label: "embedded"))
            let router = Router(context: HostContext.self)
            router.add(middleware: HostStamp())
            router.get("/hello") { _, context in "hello from \(context.tenant)" }
            router.addRoutes(embedding.routes(), atPath: "/sync")
            let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                                  services: embedding.services, logger: Logger(label: "host"))
            // The host shuts the embedding down once its group stopped, whatever happened.
            do {
                try await drive(app, embedding: embedding, ledger: ledger, pool: pool.id)
            } catch {
                await embedding.shutdown()
                throw error
            }
            await embedding.shutdown()
        }
    }

    private func drive(_ app: some ApplicationProtocol, embedding: SyncLedgerEmbedding, ledger: Ledger, pool poolID: String) async throws {
            try await app.test(.live) { client in
                let port = try #require(client.port)
                let endpoint = try #require(URL(string: "http://127.0.0.1:\(port)/sync"))
                // The device: Cognito Identity (unsigned GetId, then temporary credentials) and
                // Cognito Sync, both through the host's prefix.
                let credentials = CognitoIdentityCredentials(endpoint: endpoint, pool: poolID)
                let transport = CognitoSyncTransport(endpoint: endpoint, pool: poolID, credentials: credentials)
                let storeDirectory = temporaryPath("embedded-client")
                defer { try? FileManager.default.removeItem(atPath: storeDirectory) }
                let device = try SyncClient(store: try ClientStore(directory: storeDirectory), transport: transport, pool: poolID)
                _ = try await device.put("settings", "theme", "dark")
                _ = try await device.synchronize("settings")
                let identity = try await device.identity()
                // Written through the same rules and apply as `serve`: in the ledger, the chain verifies.
                let stream = try StreamName(pool: poolID, identity: identity, dataset: "settings")
                #expect(try ledger.describeDataset(stream).syncCount == 1)
                #expect(try ledger.verify().isValid)

                // The host's own route and middleware sit beside and around SyncLedger's.
                try await client.execute(uri: "/hello", method: .get) { response in
                    #expect(String(buffer: response.body) == "hello from acme")
                }
                try await client.execute(uri: "/sync/identitypools/\(poolID)/identities/\(identity)/datasets", method: .get) { response in
                    #expect(response.status == .forbidden)
                    #expect(response.headers[HTTPField.Name("x-amzn-ErrorType")!] == "NotAuthorizedException")
                    #expect(response.headers[HTTPField.Name("x-host-tenant")!] == "acme")
                }
                // SyncLedger's series beside the host's, in the host's registry.
                let text = await embedding.metricsText()
                #expect(text.contains("host_hellos_total 1"))
                #expect(text.contains("syncledger_requests_total{operation=\"UpdateRecords\",status=\"200\"} 1"))
                #expect(text.contains("syncledger_requests_total{operation=\"Identity.GetId\",status=\"200\"} 1"))
            }
    }

    /// The unsigned Cognito Identity calls (they create identities and mint credentials) are
    /// limited in a host as on `serve`: a source past its bucket gets 429.
    @Test func unsignedIdentityCallsAreThrottledInAHost() async throws {
        try await withLedger { ledger in
            let pool = try await ledger.createIdentityPool(region: "us-east-1", name: "throttled", allowUnauthenticatedIdentities: true,
                                                           developerProviderName: nil, supportedLoginProviders: [:], caller: "test")
            var throttle = IdentityThrottleOptions()
            (throttle.sourceRate, throttle.sourceBurst) = (0.0001, 2)
            let embedding = SyncLedgerEmbedding(ledger: ledger, identityThrottle: throttle)
            let router = Router(context: HostContext.self)
            router.addRoutes(embedding.routes(), atPath: "/sync")
            let app = Application(router: router, logger: Logger(label: "host"))
            let statuses = Mutex<[UInt]>([])
            do {
                try await app.test(.router) { client in
                    for _ in 0..<3 {
                        let body = ByteBuffer(string: "{\"IdentityPoolId\":\"\(pool.id)\"}")
                        let status = try await client.execute(uri: "/sync/", method: .post,
                                                              headers: [.contentType: "application/x-amz-json-1.1",
                                                                        HTTPField.Name("x-amz-target")!: "AWSCognitoIdentityService.GetId"],
                                                              body: body) { $0.status.code }
                        statuses.withLock { $0.append(UInt(status)) }
                    }
                }
            } catch {
                await embedding.shutdown()
                throw error
            }
            await embedding.shutdown()
            #expect(statuses.withLock { $0 } == [200, 200, 429])
        }
    }
}
