import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import SyncLedger

/// What the server's routes answer with: the APIs, the event streams, the metrics, and in
/// cluster mode the forwarder and this node. ``router()`` (ServerRoutes.swift) lays out the
/// routes over them.
struct RequestHandler: Sendable {
    let api: CognitoAPI
    /// `GET /events`: live event streams.
    let events: EventService
    let metrics: ServerMetrics
    /// The listener's connections and bodies (nil when embedded in a host's server, whose
    /// transport is its own).
    var transport: TransportShared?
    let ledger: Ledger
    let push: PushService?
    /// Cognito Streams delivery (nil on a follower).
    var streams: StreamService? = nil
    let maxBodyBytes: Int
    let logger: Logger
    /// In cluster mode: forwards writes of shards another node owns to that node.
    var forwarder: ClusterForwarder? = nil
    /// In cluster mode: this node (for `/metrics` and `GET /cluster/status`).
    var cluster: ClusterNode? = nil

    /// The Prometheus text of `/metrics`: sets the series read at scrape time (the ledger's,
    /// the transport's, the outbox's, the streams', the event streams' and in cluster mode the
    /// shards'), then emits the server's registry (``ServerMetrics/registry``).
    func renderMetrics() async -> String {
        let shards = await cluster?.status(ledger: ledger)
        return metrics.registry.render { scrape in
            metrics.refresh(ledger: ledger, into: &scrape)
            if let transport { transport.metrics.refresh(connections: transport.connections, budget: transport.budget, into: &scrape) }
            if let push { push.metrics.refresh(outbox: push.outbox, ledger: ledger, into: &scrape) }
            streams?.refreshMetrics(into: &scrape)
            events.refreshMetrics(into: &scrape)
            if let cluster, let shards { cluster.refreshMetrics(shards: shards, into: &scrape) }
        }
    }

    /// `GET /metrics`'s answer: the Prometheus text.
    func metricsResponse() async -> Response {
        Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: await renderMetrics())))
    }
}
