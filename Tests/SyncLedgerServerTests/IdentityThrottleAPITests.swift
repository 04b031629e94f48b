import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger
@testable import SyncLedgerServer

/// The identity throttle as ``CognitoAPI`` applies it: which requests take a token.
@Suite struct IdentityThrottleAPITests {
    /// An API whose source bucket holds one token and (practically) never refills.
    private func api(_ ledger: Ledger, auth: ForwardedRequestAuth? = nil) -> CognitoAPI {
        var api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, configuredAdmin: Credential.generate(scope: .admin)))
        var options = IdentityThrottleOptions()
        (options.sourceRate, options.sourceBurst, options.poolRate) = (0.0001, 1, 0)
        api.identityThrottle = IdentityThrottle(options: options)
        api.forwardAuth = auth
        return api
    }

    private func call(_ operation: String, _ body: String, headers: [(String, String)] = [], charged: Bool = false) -> WireRequest {
        var request = WireRequest(method: "POST", rawPath: "/", rawQuery: nil,
                                  headers: [("host", "h:1"), ("x-amz-target", "AWSCognitoIdentityService." + operation),
                                            ("content-type", "application/x-amz-json-1.1")] + headers,
                                  body: Array(body.utf8), peer: "192.0.2.1")
        request.identityThrottleCharged = charged
        return request
    }

    /// The status of `request` as the Cognito Identity handler answers it (no cluster here, so
    /// it never throws).
    private func handle(_ api: CognitoAPI, _ request: WireRequest) async -> (WireResponse, operation: String) {
        var operation = ""
        let target = request.header("x-amz-target") ?? ""
        do {
            return (try await api.handleIdentity(request, target: target, query: [], operation: &operation), operation)
        } catch {
            return (WireResponse(status: 0, body: []), operation)
        }
    }

    private let getId = "{\"IdentityPoolId\":\"us-east-1:00000000-0000-0000-0000-000000000000\"}"

    @Test func aRequestRunAgainAfterAHandOverIsNotChargedTwice() async throws {
        try await withLedger { ledger in
            let api = api(ledger)
            #expect(await handle(api, call("GetId", getId)).0.status != 429)
            // The same request run again on this node (it became the shard's owner): no second token.
            #expect(await handle(api, call("GetId", getId, charged: true)).0.status != 429)
            #expect(await handle(api, call("GetId", getId)).0.status == 429)
        }
    }

    @Test func onlyAnAuthenticForwardSkipsTheBuckets() async throws {
        try await withLedger { ledger in
            let auth = ForwardedRequestAuth(keys: ClusterKeys(secret: "s"), nodeID: "node2")
            let api = api(ledger, auth: auth)
            #expect(await handle(api, call("GetId", getId)).0.status != 429)
            // The client's own marker, with or without a made-up MAC: charged.
            #expect(await handle(api, call("GetId", getId, headers: [(ClusterForwarder.header, "node1")])).0.status == 429)
            #expect(await handle(api, call("GetId", getId, headers: [(ClusterForwarder.header, "node1"),
                                                                    (ForwardedRequestAuth.header, "node1;\(Int(Date().timeIntervalSince1970));" + String(repeating: "0", count: 64))])).0.status == 429)
            // A node's forward, MAC'd with the cluster's key: not charged again.
            let forward = ForwardedRequestAuth(keys: ClusterKeys(secret: "s"), nodeID: "node1").headerValue(for: call("GetId", getId))
            #expect(await handle(api, call("GetId", getId, headers: [(ClusterForwarder.header, "node1"), (ForwardedRequestAuth.header, forward)])).0.status != 429)
        }
    }

    @Test func unlinkIdentityIsUnsignedSoItIsThrottledToo() async throws {
        try await withLedger { ledger in
            let api = api(ledger)
            let unlink = "{\"IdentityId\":\"us-east-1:00000000-0000-0000-0000-000000000001\",\"Logins\":{},\"LoginsToRemove\":[]}"
            #expect(await handle(api, call("UnlinkIdentity", unlink)).0.status != 429)
            // It took the source's one token: every unsigned call from there now waits.
            let refused = await handle(api, call("UnlinkIdentity", unlink)).0
            #expect(refused.status == 429)
            #expect(String(decoding: refused.body, as: UTF8.self).contains("TooManyRequestsException"))
            #expect(await handle(api, call("GetId", getId)).0.status == 429)
            #expect(api.identityThrottle.map { MetricsRegistry.text($0.refresh) }?.contains("syncledger_identity_throttled_total{operation=\"UnlinkIdentity\",limit=\"source\"} 1") == true)
        }
    }
}
