import SyncLedger

/// `GET /cluster/status` (admin only): this node, every shard as it sees it, and the digest
/// of its replica's stream heads (equal on every node that applied the same messages).
extension CognitoAPI {
    func handleClusterStatus(_ request: WireRequest, query: [(String, String)]) async throws -> WireResponse {
        let credential = try authenticator.authenticate(request, queryPairs: query)
        guard credential.scope == .admin else { throw WireError.notAuthorized("GET /cluster/status needs the developer (admin) credential") }
        guard request.method == "GET" else { throw WireError.unknownOperation("no cluster operation is \(request.method) /cluster/status") }
        guard let cluster else { throw WireError.invalidParameter("this server is not a cluster node (serve --cluster)") }
        let shards = await cluster.status(ledger: ledger)
        let heads = try ledger.headsDigest()
        var w = JSONWriter(capacity: 256 + shards.count * 160)
        w.beginObject()
        w.member("Node", cluster.nodeID)
        w.key("ShardCount"); w.int(shards.count)
        w.member("OwnedHere", int: shards.filter(\.ownedHere).count)
        w.member("HeadsDigest", heads.digest.map { byte in String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }.joined())
        w.key("Streams"); w.int(heads.streams)
        w.key("ForgedRecords"); w.int(cluster.counters.forgedRecords)
        w.key("Shards"); w.beginArray()
        for shard in shards {
            w.beginObject()
            w.key("Shard"); w.int(shard.shard)
            w.member("Owner", shard.owner)
            w.member("OwnedHere", bool: shard.ownedHere)
            w.member("LastSequence", int: shard.lastSequence)
            w.key("Applied"); w.int(shard.applied)
            w.member("Lag", int: shard.lag)
            w.key("Appended"); w.int(shard.appended)
            w.key("Behind"); w.int(shard.behind)
            w.key("Retried"); w.int(shard.retried)
            w.key("Rejected"); w.int(shard.rejected)
            w.key("StaleFences"); w.int(shard.staleFences)
            w.member("LastRejected", shard.lastRejected)
            w.member("Failure", shard.failure)
            w.endObject()
        }
        w.endArray()
        w.endObject()
        return .json(w)
    }
}
