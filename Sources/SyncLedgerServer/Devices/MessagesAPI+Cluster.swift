import SyncLedger

/// Device-message consumers on a cluster node (docs/devices.md "On a cluster"): the same
/// operations, with positions in the shards' logs (``ShardPositions`` text) where a single
/// server uses change-feed sequences, so a consumer reads and acknowledges on any node.
extension CognitoAPI {
    func receiveOnCluster(_ consumers: ClusterConsumers, name: String, limit: Int) async throws -> WireResponse {
        let page = try await consumers.page(name, limit: limit, ledger: ledger, now: ledger.options.clock())
        var w = JSONWriter(capacity: 512 + page.messages.count * 300)
        w.beginObject()
        w.member("Consumer", name)
        w.member("Position", page.positions.text)
        w.key("Messages"); w.beginArray()
        for (m, position) in page.messages { writeReceived(&w, m, position: position.text) }
        w.endArray()
        w.member("LastPosition", page.last.text)
        w.member("SkippedExpired", int: page.skippedExpired)
        w.endObject()
        return .json(w)
    }

    func acknowledgeOnCluster(_ consumers: ClusterConsumers, name: String, json: JSON) async throws -> WireResponse {
        guard json["Sequence"] == nil else {
            throw WireError.invalidParameter("on a cluster a consumer acknowledges a Position (a message's, or the page's LastPosition), not a Sequence: a change-feed sequence is one node's own")
        }
        let text = try string(json["Position"], "Position", required: true)!
        let given = try ShardPositions.parse(text, from: "Position", map: consumers.map, shards: nil,
                                             what: "a position this cluster's ReceiveMessages gave (a message's Position or the page's LastPosition)")
        let consumer = try await consumers.acknowledge(name, through: given, ledger: ledger, now: ledger.options.clock())
        var w = JSONWriter()
        w.beginObject(); w.key("Consumer"); writeClusterConsumer(&w, consumer); w.endObject()
        return .json(w)
    }

    func listOnCluster(_ consumers: ClusterConsumers) async throws -> WireResponse {
        var w = JSONWriter()
        w.beginObject(); w.key("Consumers"); w.beginArray()
        for c in try await consumers.all() { writeClusterConsumer(&w, c) }
        w.endArray(); w.endObject()
        return .json(w)
    }

    private func writeClusterConsumer(_ w: inout JSONWriter, _ c: ClusterConsumer) {
        w.beginObject()
        w.member("Name", c.name)
        w.member("Position", c.positions)
        w.member("Acknowledged", int: c.acknowledged)
        w.member("Expired", int: c.expired)
        w.member("CreationDate", date: c.created.milliseconds)
        w.member("LastModifiedDate", date: c.updated.milliseconds)
        w.endObject()
    }
}
