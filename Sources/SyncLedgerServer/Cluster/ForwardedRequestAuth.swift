import Foundation
import SyncLedger

/// Proves that a request came from a node of this cluster forwarding it to its shard's owner
/// (``ClusterForwarder``): the forwarder adds `x-syncledger-forward-mac:
/// <node>;<unix seconds>;<64 hex digits>`, an HMAC-SHA256 keyed from the cluster secret
/// (``ClusterKeys/forwardedRequestMAC(node:method:target:body:timestamp:)``) over the node, the
/// method, the path and query, the body's SHA-256 and the time. The owner believes it — and
/// skips what the forwarding node already did, such as charging the identity throttle — only
/// when the MAC checks out (constant time) and the time is within ``maxAge`` of its own clock.
///
/// A client's `x-syncledger-forwarded` header proves nothing (a client behind a reverse proxy
/// can send one), and neither does the peer's address: without a valid MAC a request is a
/// client's. A captured header could be replayed, unchanged, for ``maxAge``: it is bound to the
/// exact request, so that replays the same call, which is charged on the node it arrives at.
struct ForwardedRequestAuth: Sendable {
    /// The header the MAC travels in.
    static let header = "x-syncledger-forward-mac"
    /// The oldest (and furthest in the future) a forward's timestamp may be, in seconds.
    static let maxAge: Int64 = 60

    let keys: ClusterKeys
    let nodeID: String
    /// Seconds since 1970 (tests give their own).
    var now: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }

    /// The header value that authenticates `request` forwarded by this node now.
    func headerValue(for request: WireRequest) -> String {
        let t = now()
        return "\(nodeID);\(t);" + keys.forwardedRequestMAC(node: nodeID, method: request.method, target: Self.target(request), body: request.body, timestamp: t)
    }

    /// Whether `request` carries a valid, fresh MAC from a node of this cluster.
    func isAuthentic(_ request: WireRequest) -> Bool {
        guard let value = request.header(Self.header), value.utf8.count <= 256 else { return false }
        let parts = value.split(separator: ";", omittingEmptySubsequences: false)
        guard parts.count == 3, let t = Int64(parts[1]), abs(now() - t) <= Self.maxAge else { return false }
        return keys.isAuthenticForward(node: String(parts[0]), method: request.method, target: Self.target(request),
                                       body: request.body, timestamp: t, mac: String(parts[2]))
    }

    private static func target(_ request: WireRequest) -> String {
        request.rawPath + (request.rawQuery.map { "?" + $0 } ?? "")
    }
}
