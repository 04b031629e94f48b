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

    /// The Prometheus text of `/metrics`.
    func renderMetrics() async -> String {
        metrics.render(ledger: ledger) + (transport.map { $0.metrics.render(connections: $0.connections, budget: $0.budget) } ?? "")
            + (push.map { $0.metrics.render(outbox: $0.outbox, ledger: ledger) } ?? "")
            + (streams?.renderMetrics() ?? "")
            + events.renderMetrics()
            + (await cluster?.renderMetrics(ledger: ledger) ?? "")
    }

    /// `GET /metrics`'s answer: the Prometheus text.
    func metricsResponse() async -> Response {
        Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: await renderMetrics())))
    }
}
