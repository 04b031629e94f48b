import Foundation
import Synchronization
import Testing
import SyncLedger
@testable import SyncLedgerServer

/// ``ForwardedRequestAuth``: only a fresh MAC from this cluster's secret, over this exact
/// request, marks a request as forwarded by a node.
@Suite struct ForwardedRequestAuthTests {
    private final class Clock: Sendable {
        let now = Mutex<Int64>(1_800_000_000)
        var read: @Sendable () -> Int64 { { [self] in now.withLock { $0 } } }
    }

    private func request(_ body: String = "{\"IdentityPoolId\":\"us-east-1:x\"}", headers: [(String, String)] = []) -> WireRequest {
        WireRequest(method: "POST", rawPath: "/", rawQuery: nil,
                    headers: [("x-amz-target", "AWSCognitoIdentityService.GetId")] + headers, body: Array(body.utf8), peer: "127.0.0.1")
    }

    private func auth(_ secret: String = "cluster-secret", node: String = "n1", clock: Clock) -> ForwardedRequestAuth {
        var auth = ForwardedRequestAuth(keys: ClusterKeys(secret: secret), nodeID: node)
        auth.now = clock.read
        return auth
    }

    @Test func aForwardSignedByANodeOfTheClusterIsAuthentic() {
        let clock = Clock()
        let sender = auth(node: "n1", clock: clock), owner = auth(node: "n2", clock: clock)
        let value = sender.headerValue(for: request())
        #expect(owner.isAuthentic(request(headers: [(ForwardedRequestAuth.header, value)])))
        // Within a minute either way of the owner's clock.
        clock.now.withLock { $0 += 60 }
        #expect(owner.isAuthentic(request(headers: [(ForwardedRequestAuth.header, value)])))
    }

    @Test func anythingElseIsAClientsRequest() {
        let clock = Clock()
        let sender = auth(clock: clock), owner = auth(node: "n2", clock: clock)
        let value = sender.headerValue(for: request())
        // Only the cluster's marker, from any peer: not authentic.
        #expect(!owner.isAuthentic(request(headers: [(ClusterForwarder.header, "n1")])))
        // Another body, path, query or method under the same MAC.
        #expect(!owner.isAuthentic(request("{\"IdentityPoolId\":\"us-east-1:y\"}", headers: [(ForwardedRequestAuth.header, value)])))
        var other = request(headers: [(ForwardedRequestAuth.header, value)])
        other.rawQuery = "a=b"
        #expect(!owner.isAuthentic(other))
        other = request(headers: [(ForwardedRequestAuth.header, value)])
        other.method = "PUT"
        #expect(!owner.isAuthentic(other))
        // Another node's name, another timestamp, a changed digit, garbage.
        let parts = value.split(separator: ";").map(String.init)
        for forged in ["n9;\(parts[1]);\(parts[2])", "n1;\(Int64(parts[1])! + 1);\(parts[2])",
                       "n1;\(parts[1]);" + (parts[2].hasPrefix("0") ? "1" : "0") + parts[2].dropFirst(),
                       "n1;\(parts[1])", "", ";;", "n1;x;\(parts[2])", String(repeating: "a", count: 300)] {
            #expect(!owner.isAuthentic(request(headers: [(ForwardedRequestAuth.header, forged)])), "\(forged)")
        }
        // Another cluster's secret.
        let stranger = auth("another-secret", clock: clock).headerValue(for: request())
        #expect(!owner.isAuthentic(request(headers: [(ForwardedRequestAuth.header, stranger)])))
        // Stale (or from the future) by more than a minute.
        clock.now.withLock { $0 += 61 }
        #expect(!owner.isAuthentic(request(headers: [(ForwardedRequestAuth.header, value)])))
        clock.now.withLock { $0 -= 122 }
        #expect(!owner.isAuthentic(request(headers: [(ForwardedRequestAuth.header, value)])))
    }
}
