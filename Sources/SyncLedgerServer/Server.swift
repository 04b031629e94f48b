import Foundation
public import SyncLedger
import Hummingbird
public import Logging
import NIOCore
import HTTPTypes

/// How `syncledger serve` runs.
public struct ServerConfiguration: Sendable {
    /// The data directory.
    public var dataDirectory: String = "syncledger-data"
    /// The address to listen on.
    public var host: String = "127.0.0.1"
    /// The port (0: any free port; the chosen one is printed).
    public var port: Int = 8080
    /// Request bodies larger than this are refused with InvalidParameterException.
    public var maxBodyBytes: Int = 4 << 20
    /// The ledger's options (durability, limits, session lifetime).
    public var ledger = LedgerOptions()
    /// The admin credential's access key id and secret (from `SYNCLEDGER_ACCESS_KEY_ID` /
    /// `SYNCLEDGER_SECRET_ACCESS_KEY`); nil: use the one kept in the data directory, made on
    /// first start.
    public var adminAccessKeyID: String?
    /// See ``adminAccessKeyID``.
    public var adminSecretAccessKey: String?
    /// Keep a bulk publish IN_PROGRESS at least this long.
    public var bulkPublishMinimum: Duration = .zero
    /// The leader's URL (`http://HOST:PORT`): run as a read-only follower that replicates it,
    /// signing with the admin credential above (which the leader must share).
    public var follow: String?
    /// Called once the server listens, with the bound port.
    public var onListening: @Sendable (Int) -> Void = { _ in }

    /// The defaults: ./syncledger-data, 127.0.0.1:8080, 4 MiB bodies, durable.
    public init() {}
}

/// The SyncLedger HTTP server: the Cognito Sync API, `/health` and `/metrics` on Hummingbird.
public enum SyncLedgerServer {
    /// Opens the ledger, serves until SIGINT or SIGTERM, lets in-flight requests finish, then
    /// closes the ledger (finishing queued writes).
    public static func run(_ configuration: ServerConfiguration, logger: Logger = Logger(label: "syncledger")) async throws {
        let ledger = try Ledger(directory: configuration.dataDirectory, options: configuration.ledger)
        defer { ledger.close() }
        let admin: Credential
        if let id = configuration.adminAccessKeyID, let secret = configuration.adminSecretAccessKey, !id.isEmpty, !secret.isEmpty {
            admin = Credential(accessKeyID: id, secretAccessKey: secret, scope: .admin)
        } else {
            let (stored, created) = try ledger.secrets.generatedAdminCredential()
            admin = stored
            if created {
                say("""
                    Generated the admin (developer) credential; it is kept in \(configuration.dataDirectory) and shown only this once:
                      AccessKeyId:     \(stored.accessKeyID)
                      SecretAccessKey: \(stored.secretAccessKey)
                    Set SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY to use your own.
                    """)
            } else {
                say("Using the admin credential kept in \(configuration.dataDirectory) (access key \(stored.accessKeyID)).")
            }
        }
        for pool in configuration.follow != nil ? [] : try await ledger.failInterruptedBulkPublishes(caller: "syncledger-server") {
            logger.warning("a bulk publish was interrupted by a restart; marked FAILED", metadata: ["pool": "\(pool)"])
        }
        var api = CognitoAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, admin: admin), bulkPublishMinimum: configuration.bulkPublishMinimum)
        var follower: Follower?
        if let leader = configuration.follow {
            guard configuration.adminAccessKeyID != nil else {
                throw WireError.invalidParameter("a follower signs its pulls with the leader's admin credential: set SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY")
            }
            let status = ReplicationStatus(leader: leader)
            follower = try Follower(ledger: ledger, leader: leader, accessKeyID: admin.accessKeyID, secretAccessKey: admin.secretAccessKey, status: status, logger: logger)
            api.followedLeader = leader
            api.replication = status
        }
        let handler = RequestHandler(
            api: api,
            metrics: ServerMetrics(startSequence: (try? ledger.lastSequence) ?? 0, replication: api.replication),
            ledger: ledger, maxBodyBytes: configuration.maxBodyBytes, logger: logger)
        let onListening = configuration.onListening
        let host = configuration.host
        let app = Application(
            responder: CallbackResponder<BasicRequestContext> { request, _ in await handler.respond(request) },
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "SyncLedger"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                logger.info("listening", metadata: ["host": "\(host)", "port": "\(port)", "data": "\(configuration.dataDirectory)"])
                onListening(port)
            },
            logger: logger)
        let replication = follower.map { f in Task { await f.run() } }
        defer { replication?.cancel() }
        if let leader = configuration.follow { logger.info("following", metadata: ["leader": "\(leader)"]) }
        try await app.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        logger.info("stopped; closing the ledger")
    }
}

/// Writes a line to standard output at once (not buffered), for whoever reads it.
func say(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Adapts Hummingbird requests to the API, and logs and measures each one.
struct RequestHandler: Sendable {
    let api: CognitoAPI
    let metrics: ServerMetrics
    let ledger: Ledger
    let maxBodyBytes: Int
    let logger: Logger

    func respond(_ request: Request) async -> Response {
        let start = ContinuousClock.now
        let path = request.uri.path
        if request.method == .get, path == "/health" {
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"status\":\"ok\"}")))
        }
        if request.method == .get, path == "/metrics" {
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: metrics.render(ledger: ledger))))
        }
        var request = request
        let wire: WireResponse
        var operation = "Unknown"
        var identity: String?
        do {
            let buffer = try await request.collectBody(upTo: maxBodyBytes)
            // HTTP/1's Host header arrives as the :authority pseudo-header.
            var headers = request.headers.map { ($0.name.canonicalName, $0.value) }
            if let authority = request.head.authority { headers.append(("host", authority)) }
            (wire, operation, identity) = await api.handle(WireRequest(
                method: request.method.rawValue, rawPath: path, rawQuery: request.uri.query,
                headers: headers, body: Array(buffer.readableBytesView)))
        } catch {
            wire = .error(.invalidParameter("the request body exceeds \(maxBodyBytes) bytes or could not be read"))
        }
        let elapsed = (ContinuousClock.now - start).components
        let seconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        let micros = Int(seconds * 1_000_000)
        metrics.record(operation: operation, status: wire.status, seconds: seconds)
        logger.info("request", metadata: [
            "op": "\(operation)", "identity": "\(identity ?? "-")", "status": "\(wire.status)",
            "ms": "\(micros / 1000).\(String(micros % 1000 + 1000).dropFirst())",
        ])
        var fields = HTTPFields()
        for (name, value) in wire.headers {
            if let n = HTTPField.Name(name) { fields.append(HTTPField(name: n, value: value)) }
        }
        return Response(status: .init(code: wire.status), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: wire.body)))
    }
}
