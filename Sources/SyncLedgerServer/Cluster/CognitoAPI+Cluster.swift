import SyncLedger

/// Where a request runs in cluster mode. A write runs on its shard's owner, whose replica holds
/// every acknowledged write of the shard (a lagging replica would judge sync counts and
/// existence on stale state), so a node that does not own the shard hands it on before
/// looking at anything; reads run on any node, once its replica caught up where that matters.
extension CognitoAPI {
    /// The Cognito Identity operations that change nothing.
    static let identityReads: Set<String> = ["DescribeIdentityPool", "ListIdentityPools", "DescribeIdentity", "ListIdentities",
                                             "LookupDeveloperIdentity", "GetIdentityPoolRoles"]

    /// Throws ``ShardOwnedElsewhere`` when this is a cluster node that does not own `shard`
    /// (the request handler then forwards the request to the owner).
    func requireOwner(of shard: Int) async throws {
        guard let cluster, !cluster.ownership.owns(shard) else { return }
        throw ShardOwnedElsewhere(shard: shard, owner: await cluster.owner(of: shard))
    }

    /// Names, in a cluster node's answer, the request's shard, the cluster's shard count and the
    /// shard's owner as this node knows it — `x-syncledger-shard`, `x-syncledger-shards`,
    /// `x-syncledger-shard-owner` — so a balancer (docs/cluster.md, HAProxy) or a client can
    /// send the next request of that identity straight to its owner. An answer the owner gave
    /// (forwarded) carries the owner's own headers.
    func ownerHeaders(of shard: Int) -> [(String, String)] {
        guard let cluster else { return [] }
        var headers = [("x-syncledger-shard", "\(shard)"), ("x-syncledger-shards", "\(cluster.shards.count)")]
        if let owner = cluster.knownOwner(of: shard) { headers.append(("x-syncledger-shard-owner", owner)) }
        return headers
    }

    /// Lets this node's replica catch up with `shard`'s log before a read (bounded; a replica
    /// that does not catch up in time answers from what it has).
    func catchUp(shard: Int) async {
        guard let cluster, !cluster.ownership.owns(shard) else { return }
        _ = try? await cluster.catchUp(shard: shard, ledger: ledger, timeout: .seconds(2))
    }

    /// The shard a Cognito Sync write belongs to: the identity's for its records and datasets,
    /// the registry shard for devices, subscriptions and pool settings.
    func shard(of route: Route) -> Int? {
        guard let cluster else { return nil }
        switch route.operation {
        case .updateRecords, .deleteDataset:
            guard let pool = route.pool, let identity = route.identity else { return nil }
            return cluster.shards.shard(pool: pool, identity: identity)
        default:
            return route.operation.isRead ? nil : ShardMap.registryShard
        }
    }

    /// `/devices` and `/messages` in cluster mode: a device message is a write of the sending
    /// identity's shard; the other writes are the registry's; reads catch up with the registry.
    func routeRegistryInCluster(_ operation: RegistryOperation, credential: Credential) async throws {
        guard let cluster else { return }
        if operation == .sendMessage, case .identity(let pool, let identity) = credential.scope {
            try await requireOwner(of: cluster.shards.shard(pool: pool, identity: identity))
        } else if operation.isMessage {
            return  // consumers: on any node (their positions are the shards', kept in the cluster)
        } else if operation.route.method == .get {
            await catchUp(shard: ShardMap.registryShard)
        } else {
            try await requireOwner(of: ShardMap.registryShard)
        }
    }
}

/// A request of a shard another node owns, with the answer its API gives when no owner takes
/// it (Cognito Identity's awsJson error, where Cognito Sync's is the plain 503):
/// ``APIMiddleware`` hands the request to the owner, or sends `answer`.
struct ForwardToOwner: Error {
    let elsewhere: ShardOwnedElsewhere
    let answer: WireResponse
}
