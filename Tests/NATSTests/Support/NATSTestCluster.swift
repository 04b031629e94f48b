import Foundation
import NATS

/// Three clustered nats-servers with JetStream (`sync_interval: always`), each with its own
/// store directory, configured by files generated in a temporary directory.
final class NATSTestCluster {
    let directory: URL
    private(set) var servers: [NATSServerProcess]

    /// Client URLs of all servers.
    var urls: [String] { servers.map(\.url) }

    private init(directory: URL, servers: [NATSServerProcess]) {
        self.directory = directory
        self.servers = servers
    }

    /// Starts the cluster and waits (bounded) until every server accepts connections and the
    /// JetStream meta group has a leader (`$JS.API.INFO` answers without error).
    static func start(size: Int = 3, clusterName: String = "testc") async throws -> NATSTestCluster {
        try await retryingTakenPorts { try await startOnce(size: size, clusterName: clusterName) }
    }

    private static func startOnce(size: Int, clusterName: String) async throws -> NATSTestCluster {
        let dir = try NATSServerProcess.makeTempDirectory()
        let clientPorts = try (0..<size).map { _ in try TestNetwork.freePort() }
        let routePorts = try (0..<size).map { _ in try TestNetwork.freePort() }
        var servers: [NATSServerProcess] = []
        let cluster = NATSTestCluster(directory: dir, servers: [])
        for i in 0..<size {
            let name = "n\(i + 1)"
            let routes = (0..<size).filter { $0 != i }.map { "\"nats://127.0.0.1:\(routePorts[$0])\"" }
            let store = dir.appendingPathComponent("store-\(name)").path
            let config = """
                server_name: \(name)
                listen: 127.0.0.1:\(clientPorts[i])
                log_file: "\(dir.appendingPathComponent("\(name).log").path)"
                jetstream {
                  store_dir: "\(store)"
                  sync_interval: always
                }
                cluster {
                  name: \(clusterName)
                  listen: 127.0.0.1:\(routePorts[i])
                  routes: [\(routes.joined(separator: ", "))]
                }
                """
            servers.append(try await NATSServerProcess.start(config: config, port: clientPorts[i], name: name, directory: dir, logFile: "\(name).log"))
        }
        cluster.servers = servers
        for s in servers { try await s.waitForPort() }
        try await cluster.waitForJetStream()
        return cluster
    }

    /// Waits until JetStream answers on every server.
    func waitForJetStream(timeout: Duration = .seconds(20)) async throws {
        for s in servers where s.isRunning {
            var options = NATSClientOptions(servers: [s.url])
            options.requestTimeout = .seconds(1)
            let client = try await NATSClient.connect(options)
            let js = JetStreamContext(client: client, timeout: .seconds(1))
            _ = try await eventually("JetStream ready on \(s.serverName)", timeout: timeout, interval: .milliseconds(100)) {
                try await js.accountInfo()
            }
            await client.close()
        }
    }

    /// The server whose `server_name` is `name`.
    func server(named name: String) -> NATSServerProcess? {
        servers.first { $0.serverName == name }
    }

    func stopAll() {
        for s in servers { s.stop() }
    }

    deinit {
        stopAll()
        try? FileManager.default.removeItem(at: directory)
    }
}
