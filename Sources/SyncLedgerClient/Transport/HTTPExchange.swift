import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SyncLedgerWire

/// A server's base address, checked once: `http(s)://host[:port][/prefix]`.
struct HTTPEndpoint: Sendable {
    /// `scheme://host:port` with no trailing slash.
    let origin: String
    /// The `Host` header (the port only when it is not the scheme's default, as SDKs send it).
    let hostHeader: String
    /// A path prefix before the API's paths ("" or "/prefix"), already percent-encoded.
    let pathPrefix: String

    /// The endpoint of `url`, or why it cannot be one.
    static func parse(_ url: URL) -> Result<HTTPEndpoint, SyncClientError> {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host(percentEncoded: false), !host.isEmpty, url.query == nil, url.fragment == nil, url.user == nil else {
            return .failure(.invalidParameter("the endpoint must be an http or https URL with a host and no query, not \(url.absoluteString)"))
        }
        let defaultPort = scheme == "https" ? 443 : 80
        if let port = url.port, !(1...65535).contains(port) {
            return .failure(.invalidParameter("the endpoint's port must be 1-65535, not \(port)"))
        }
        let port = url.port ?? defaultPort
        let hostPart = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        var prefix = url.path(percentEncoded: true)
        while prefix.hasSuffix("/") { prefix.removeLast() }
        return .success(HTTPEndpoint(origin: "\(scheme)://\(hostPart):\(port)",
                                     hostHeader: port == defaultPort ? hostPart : "\(hostPart):\(port)",
                                     pathPrefix: prefix))
    }
}

/// An answer: the status, the headers and the whole body.
struct HTTPAnswer: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: [UInt8]

    /// The first value of a header (case-insensitive).
    func header(_ name: String) -> String? { headers.first(name: name) }
}

/// One HTTP exchange with a time limit over the whole of it (the head and the body) and a
/// bound on the body read.
enum HTTPExchange {
    /// The largest response body read (a hostile server must not exhaust memory).
    static let maxResponseBytes = 64 << 20

    /// Sends `method path?query` with `headers` and `body`, signed with `signer` when given.
    ///
    /// - Parameters:
    ///   - path: the path after the endpoint's prefix, percent-encoded as it is sent.
    ///   - query: the raw query (percent-encoded), or "".
    /// - Throws: ``SyncClientError/network(_:)`` when the server cannot be reached or does not
    ///   answer in time; ``SyncClientError/server(status:type:message:)`` for a body too large.
    static func send(_ client: HTTPClient = CognitoSyncTransport.defaultHTTPClient, endpoint: HTTPEndpoint, method: HTTPMethod, path: String, query: String = "",
                     headers: [(String, String)] = [], body: [UInt8] = [], signer: SigV4Signer? = nil,
                     timeout: Duration) async throws -> HTTPAnswer {
        let rawPath = endpoint.pathPrefix + path
        var request = HTTPClientRequest(url: endpoint.origin + rawPath + (query.isEmpty ? "" : "?" + query))
        request.method = method
        request.headers.add(name: "host", value: endpoint.hostHeader)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let signer {
            for (name, value) in signer.sign(method: method.rawValue, host: endpoint.hostHeader, rawPath: rawPath,
                                             rawQuery: query.isEmpty ? nil : query, headers: headers, body: body) {
                request.headers.add(name: name, value: value)
            }
        }
        if !body.isEmpty || method == .POST || method == .PUT {
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let prepared = request
        let limit = maxResponseBytes
        do {
            return try await withThrowingTaskGroup(of: HTTPAnswer?.self) { group in
                group.addTask {
                    let response = try await client.execute(prepared, timeout: TimeAmount(timeout))
                    let status = Int(response.status.code)
                    let collected: ByteBuffer
                    do {
                        collected = try await response.body.collect(upTo: limit)
                    } catch is NIOTooManyBytesError {
                        throw SyncClientError.server(status: status, type: "ResponseTooLarge",
                                                     message: "the server's answer exceeds \(limit) bytes")
                    }
                    return HTTPAnswer(status: status, headers: response.headers, body: Array(collected.readableBytesView))
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let answer = first else {
                    throw SyncClientError.network("no answer from \(endpoint.origin) within \(timeout)")
                }
                return answer
            }
        } catch let error as SyncClientError {
            throw error
        } catch is CancellationError where Task.isCancelled {
            throw CancellationError()
        } catch {
            throw SyncClientError.network("\(method.rawValue) \(endpoint.origin): \(describe(error))")
        }
    }

    /// A short description of a transport failure (never a header or body).
    private static func describe(_ error: any Error) -> String {
        if let http = error as? HTTPClientError { return "\(http)" }
        return String(describing: error)
    }

}

/// The error an AWS JSON answer describes: its type (from `x-amzn-ErrorType`, else `__type`,
/// else `code`; a namespace before `#` and details after `:` dropped) and message.
struct AWSErrorBody: Sendable {
    var type: String
    var message: String

    init(_ answer: HTTPAnswer) {
        let object = (try? JSONSerialization.jsonObject(with: Data(answer.body.prefix(1 << 20)))) as? [String: Any] ?? [:]
        var type = answer.header("x-amzn-ErrorType") ?? (object["__type"] as? String) ?? (object["code"] as? String) ?? ""
        if let colon = type.firstIndex(of: ":") { type = String(type[..<colon]) }
        if let hash = type.lastIndex(of: "#") { type = String(type[type.index(after: hash)...]) }
        self.type = type.isEmpty ? "HTTP\(answer.status)" : type
        let message = (object["message"] as? String) ?? (object["Message"] as? String)
        self.message = message ?? String(decoding: answer.body.prefix(200), as: UTF8.self)
    }

    private static let notAuthorizedTypes: Set<String> = [
        "NotAuthorizedException", "AccessDenied", "AccessDeniedException", "InvalidClientTokenId", "SignatureDoesNotMatch",
        "IncompleteSignature", "IncompleteSignatureException", "MissingAuthenticationToken", "MissingAuthenticationTokenException",
        "ExpiredToken", "ExpiredTokenException", "UnrecognizedClientException", "InvalidSignatureException",
    ]

    /// The client error of this answer.
    func clientError(status: Int) -> SyncClientError {
        switch type {
        case "ResourceConflictException": return .conflict(message)
        case "LimitExceededException", "TooManyRequestsException", "ThrottlingException": return .limitExceeded(message)
        case "ResourceNotFoundException": return .notFound(message)
        case _ where Self.notAuthorizedTypes.contains(type): return .notAuthorized(message)
        default:
            switch status {
            case 409: return .conflict(message)
            case 429: return .limitExceeded(message)
            case 401, 403: return .notAuthorized(message)
            default: return .server(status: status, type: type, message: message)
            }
        }
    }
}

/// JSON decoding of an answer body, a failure being the server's.
func decodeAnswer<T: Decodable>(_ type: T.Type, _ answer: HTTPAnswer, operation: String) throws -> T {
    do {
        return try WireJSON.decode(T.self, from: answer.body)
    } catch {
        throw SyncClientError.server(status: answer.status, type: "InvalidResponse", message: "\(operation): the answer is not the expected JSON: \(error)")
    }
}
