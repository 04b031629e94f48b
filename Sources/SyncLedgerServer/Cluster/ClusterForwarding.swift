import AsyncHTTPClient
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOHTTP1
import SyncLedger

/// Forwards a request to the node that owns its shard: the request exactly as it arrived —
/// method, path, query, headers (its SigV4 signature and Host among them) and body — so the
/// owner authenticates and runs it as if the caller had sent it there. A forwarded request
/// carries `x-syncledger-forwarded`, and is never forwarded again.
struct ClusterForwarder: Sendable {
    static let header = "x-syncledger-forwarded"
    /// Headers that belong to one hop.
    private static let hopHeaders: Set<String> = ["connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection", "content-length", header, ForwardedRequestAuth.header]

    let client: HTTPClient
    let nodeID: String
    let timeout: Duration
    /// Authenticates each forward to the owner (``ForwardedRequestAuth``); nil: not authenticated.
    var auth: ForwardedRequestAuth? = nil

    init(nodeID: String, timeout: Duration = .seconds(15)) {
        var configuration = HTTPClient.Configuration(timeout: .init(connect: .seconds(2), read: .init(timeout)))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        // A refused connection fails the forward at once (the owner is down: the caller waits for
        // the shard's next owner) instead of being retried with back-off until the connect
        // time-out, which held every write of a dead owner's shards for those 2 s.
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.decompression = .disabled
        configuration.redirectConfiguration = .disallow
        self.client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.nodeID = nodeID
        self.timeout = timeout
    }

    /// The owner's answer to `request`, or 503 when its answer did not arrive; `refused` says
    /// whether the owner refused the connection (it is down, and the request surely not applied).
    func forward(_ request: WireRequest, to owner: LeaseHolder, shard: Int) async -> (response: WireResponse, refused: Bool) {
        let base = owner.url.hasSuffix("/") ? String(owner.url.dropLast()) : owner.url
        var outgoing = HTTPClientRequest(url: base + request.rawPath + (request.rawQuery.map { "?" + $0 } ?? ""))
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers where !Self.hopHeaders.contains(name.lowercased()) {
            outgoing.headers.add(name: name, value: value)
        }
        outgoing.headers.add(name: Self.header, value: nodeID)
        if let auth { outgoing.headers.add(name: ForwardedRequestAuth.header, value: auth.headerValue(for: request)) }
        outgoing.body = .bytes(ByteBuffer(bytes: request.body))
        do {
            let response = try await client.execute(outgoing, timeout: .seconds(Int64(timeout.components.seconds)))
            let body = try await response.body.collect(upTo: 64 << 20)
            var headers: [(String, String)] = []
            for header in response.headers where !Self.hopHeaders.contains(header.name.lowercased()) {
                headers.append((header.name.lowercased(), header.value))
            }
            headers.append(("x-syncledger-node", owner.node))
            return (WireResponse(status: Int(response.status.code), headers: headers, body: Array(body.readableBytesView)), false)
        } catch let error as IOError where error.errnoCode == ECONNREFUSED {
            return (.error(WireError(type: "ServiceUnavailableException", status: 503,
                                     message: "shard \(shard) is owned by node \(owner.node), which refused the connection (it is down); nothing was written, retry")), true)
        } catch {
            // The owner may have applied it before its answer was lost: the caller reads before
            // it retries, as after any timeout (a retry with stale sync counts gets a conflict).
            return (.error(WireError(type: "ServiceUnavailableException", status: 503,
                                     message: "shard \(shard) is owned by node \(owner.node), whose answer did not arrive (\(error)); the write may or may not have been applied there")), false)
        }
    }

    func shutdown() async {
        try? await client.shutdown()
    }
}

/// What became of a request that belongs to a shard another node owned.
enum Handover {
    /// This node owns the shard now: run the request here.
    case runHere
    /// The owner's answer (or a 503 saying its answer did not arrive).
    case answered(WireResponse)
    /// No node took the shard in time: keep the 503 the API gave.
    case noOwner
}

extension ClusterForwarder {
    /// A forwarded request found this node holding its shard's lease but still taking the
    /// shard over (catching up with its log, fencing it): the sender rightly named this node.
    /// Waits for the takeover, at most a lease and a round. - Returns: whether this node owns
    /// the shard now (the request then runs here).
    static func finishTakingOver(_ elsewhere: ShardOwnedElsewhere, cluster: ClusterNode) async -> Bool {
        guard elsewhere.owner?.node == cluster.nodeID else { return false }
        return await cluster.waitForOwner(elsewhere.shard, timeout: cluster.handoverTime)?.node == cluster.nodeID
    }

    /// Hands `request` to its shard's owner. A shard between owners (handed back, or its owner
    /// died) gets one within a lease: this waits for it rather than fail the caller; an owner
    /// that refuses the connection is down, so the request was surely not applied and goes, once,
    /// to the node that takes the shard.
    func handOver(_ request: WireRequest, _ elsewhere: ShardOwnedElsewhere, cluster: ClusterNode) async -> Handover {
        var owner = elsewhere.owner
        if owner == nil || owner?.node == cluster.nodeID { owner = await cluster.waitForOwner(elsewhere.shard, timeout: cluster.handoverTime) }
        var outcome = Handover.noOwner
        for attempt in 0..<2 {
            guard let target = owner else { break }
            if target.node == cluster.nodeID { return .runHere }
            let (answer, refused) = await forward(request, to: target, shard: elsewhere.shard)
            outcome = .answered(answer)
            guard refused, attempt == 0 else { break }
            owner = await cluster.waitForOwner(elsewhere.shard, other: target.node, timeout: cluster.handoverTime)
        }
        return outcome
    }
}
