import AsyncHTTPClient
import Foundation
import SyncLedger
import NIOCore
import NIOHTTP1
import NIOSSL

/// The follower's connection to its leader: one shared AsyncHTTPClient with connect and read
/// timeouts, HTTP/1.1 keep-alive (one connection, reused), TLS for `https://` leaders, and
/// SigV4-signed GETs.
final class LeaderClient: Sendable {
    /// An answer: status, headers (names lower-cased), body.
    struct Answer: Sendable {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]

        func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    /// The leader's URL as given.
    let url: String
    private let base: String
    private let hostHeader: String
    private let client: HTTPClient
    private let signer: SigV4Signer
    /// The largest answer body accepted.
    let maxBody: Int

    /// A client for `leader` (`http://HOST[:PORT]` or `https://HOST[:PORT]`).
    ///
    /// - Parameters:
    ///   - tls: the TLS configuration for an https leader (trust roots from `--follow-ca`).
    ///   - readTimeout: the longest silence while waiting for an answer; longer than the
    ///     feed's long-poll wait.
    /// - Throws: ``StartupError`` for a URL that is not an http(s) URL with a host.
    init(leader: String, tls: TLSConfiguration, signer: SigV4Signer, connectTimeout: Duration = .seconds(5), readTimeout: Duration, maxBody: Int = 80 << 20) throws {
        guard let parsed = URL(string: leader), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = parsed.host, !host.isEmpty, parsed.path.isEmpty || parsed.path == "/", parsed.query == nil else {
            throw StartupError("--follow needs a leader URL http://HOST:PORT or https://HOST:PORT, not \(leader)")
        }
        if parsed.port.map({ !(1...65535).contains($0) }) ?? false {
            throw StartupError("--follow \(leader): the port must be 1-65535")
        }
        let port = parsed.port ?? (scheme == "https" ? 443 : 80)
        let hostPart = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        self.url = leader
        self.base = "\(scheme)://\(hostPart):\(port)"
        self.hostHeader = "\(hostPart):\(port)"
        self.signer = signer
        self.maxBody = maxBody
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(connectTimeout), read: TimeAmount(readTimeout)),
            connectionPool: .init(idleTimeout: .seconds(90), concurrentHTTP1ConnectionsPerHostSoftLimit: 1),
            decompression: .disabled)
        configuration.httpVersion = .http1Only
        self.client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// A signed GET of `path?query` with `extraHeaders` among the signed headers.
    ///
    /// - Parameter deadline: how long the whole exchange may take.
    func get(path: String, query: String, signedHeaders extraHeaders: [(String, String)], deadline: Duration) async throws -> Answer {
        var request = HTTPClientRequest(url: "\(base)\(path)?\(query)")
        request.method = .GET
        request.headers.add(name: "host", value: hostHeader)
        for (name, value) in extraHeaders { request.headers.add(name: name, value: value) }
        for (name, value) in signer.sign(method: "GET", host: hostHeader, rawPath: path, rawQuery: query, headers: extraHeaders, body: []) {
            request.headers.add(name: name, value: value)
        }
        let response = try await client.execute(request, timeout: TimeAmount(deadline))
        let body: ByteBuffer
        do {
            body = try await response.body.collect(upTo: maxBody)
        } catch is NIOTooManyBytesError {
            throw ReplicationFailure(.transport, "the leader's answer exceeds \(maxBody) bytes")
        }
        return Answer(status: Int(response.status.code), headers: response.headers.map { ($0.name.lowercased(), $0.value) },
                      body: Array(body.readableBytesView))
    }

    /// Closes the connection; call once, when replication has stopped.
    func shutdown() async {
        try? await client.shutdown()
    }

}
