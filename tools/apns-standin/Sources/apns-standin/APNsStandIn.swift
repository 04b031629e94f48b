// apns-standin: a fast local stand-in for Apple's APNs provider API (token authentication),
// for benchmarks. The rules are those of Tests/wire/push/apns.py (the reference stand-in, which
// is correct but too slow to measure delivery latency), restricted to what SyncLedger sends:
// background pushes only. See README.md.

import Crypto
import Dispatch
import Foundation
import Hummingbird
import HTTPTypes
import HummingbirdHTTP2
import Logging
import NIOCore
import NIOSSL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Command line

struct Options {
    var cert = ""
    var key = ""
    var publicKey = ""
    var teamID = ""
    var keyID = ""
    var topic = ""
    var port = 0
    var out: String?
}

func usage(_ message: String) -> Never {
    FileHandle.standardError.write(Data("""
        apns-standin: \(message)
        usage: apns-standin --cert CERT.pem --key KEY.pem --public-key PUB.pem --team-id T --key-id K --topic TOPIC [--port 0] [--out FILE]

        """.utf8))
    exit(2)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("apns-standin: \(message)\n".utf8))
    exit(1)
}

func parseOptions(_ arguments: [String]) -> Options {
    var options = Options()
    var index = 1
    while index < arguments.count {
        let name = arguments[index]
        if name == "-h" || name == "--help" { usage("help") }
        guard index + 1 < arguments.count else { usage("\(name) needs a value") }
        let value = arguments[index + 1]
        switch name {
        case "--cert": options.cert = value
        case "--key": options.key = value
        case "--public-key": options.publicKey = value
        case "--team-id": options.teamID = value
        case "--key-id": options.keyID = value
        case "--topic": options.topic = value
        case "--port":
            guard let port = Int(value), (0...65535).contains(port) else { usage("bad --port \(value)") }
            options.port = port
        case "--out": options.out = value
        default: usage("unknown option \(name)")
        }
        index += 2
    }
    for (value, name) in [(options.cert, "--cert"), (options.key, "--key"), (options.publicKey, "--public-key"),
                          (options.teamID, "--team-id"), (options.keyID, "--key-id"), (options.topic, "--topic")]
    where value.isEmpty {
        usage("\(name) is required")
    }
    return options
}

// MARK: - Clock

/// Wall-clock milliseconds since 1970 (CLOCK_REALTIME).
@inline(__always)
func wallMillis() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

@inline(__always)
func wallSeconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec)
}

// MARK: - Refusals

/// An answer other than 200: status and Apple's `reason`.
struct Refusal: Error {
    let status: HTTPResponse.Status
    let reason: String
    init(_ status: Int, _ reason: String) {
        self.status = HTTPResponse.Status(code: status)
        self.reason = reason
    }
}

// MARK: - Records

final class Recorder: Sendable {
    struct State {
        var accepted = 0
        var rejected = 0
        var lines: [UInt8] = []
    }
    private let state = Mutex(State())

    func accept(_ line: String) {
        state.withLock {
            $0.accepted += 1
            $0.lines.append(contentsOf: line.utf8)
        }
    }

    func reject() { state.withLock { $0.rejected += 1 } }

    var counts: (accepted: Int, rejected: Int) { state.withLock { ($0.accepted, $0.rejected) } }

    /// Writes the recorded lines to `path` (an empty file when none).
    func write(to path: String) {
        let bytes = state.withLock { $0.lines }
        if !FileManager.default.createFile(atPath: path, contents: Data(bytes)) {
            FileHandle.standardError.write(Data("apns-standin: cannot write \(path)\n".utf8))
        }
    }
}

// MARK: - Request handling

enum Names {
    static let apnsID = HTTPField.Name("apns-id")!
    static let apnsTopic = HTTPField.Name("apns-topic")!
    static let apnsPushType = HTTPField.Name("apns-push-type")!
    static let apnsPriority = HTTPField.Name("apns-priority")!
    static let apnsExpiration = HTTPField.Name("apns-expiration")!
    static let apnsCollapseID = HTTPField.Name("apns-collapse-id")!
}

/// The headers APNs reads, each at most once.
struct APNsHeaders {
    var authorization: String?
    var apnsID: String?
    var topic: String?
    var pushType: String?
    var priority: String?
    var expiration: String?
    var collapseID: String?
    /// A header other than authorization sent twice.
    var duplicate = false
    var duplicateAuthorization = false

    init(_ fields: HTTPFields) {
        for field in fields {
            let name = field.name
            if name == .authorization {
                if authorization != nil { duplicateAuthorization = true }
                authorization = field.value
            }
            else if name == Names.apnsID { Self.set(&apnsID, field.value, &duplicate) }
            else if name == Names.apnsTopic { Self.set(&topic, field.value, &duplicate) }
            else if name == Names.apnsPushType { Self.set(&pushType, field.value, &duplicate) }
            else if name == Names.apnsPriority { Self.set(&priority, field.value, &duplicate) }
            else if name == Names.apnsExpiration { Self.set(&expiration, field.value, &duplicate) }
            else if name == Names.apnsCollapseID { Self.set(&collapseID, field.value, &duplicate) }
        }
    }

    private static func set(_ slot: inout String?, _ value: String, _ duplicate: inout Bool) {
        if slot != nil { duplicate = true }
        slot = value
    }
}

@inline(__always)
func isHex(_ c: UInt8) -> Bool {
    (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46)
}

/// A lowercase canonical UUID (8-4-4-4-12).
func isLowercaseUUID(_ text: String) -> Bool {
    var count = 0
    for (i, c) in text.utf8.enumerated() {
        count += 1
        if i == 8 || i == 13 || i == 18 || i == 23 {
            if c != UInt8(ascii: "-") { return false }
        } else if !((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66)) {
            return false
        }
    }
    return count == 36
}

let devicePrefix = "/3/device/"
let maxPayload = 4096
let maxCollapseID = 64

struct StandIn: Sendable {
    let topic: String
    let tokens: ProviderTokens
    let recorder: Recorder

    func respond(_ request: Request) async -> Response {
        let receivedMillis = wallMillis()
        let headers = APNsHeaders(request.headers)
        let apnsID = headers.apnsID.flatMap { isLowercaseUUID($0) ? $0 : nil } ?? UUID().uuidString.lowercased()
        let path = request.uri.path

        if path == "/stats" && request.method == .get {
            return stats()
        }
        do {
            // HTTP/1.1 (no ALPN h2): Hummingbird's HTTP/1 codec marks these scheme "http"; an
            // HTTP/2 request carries the client's `:scheme https`.
            if request.head.scheme != "https" { throw Refusal(505, "HTTPVersionNotSupported") }
            let token = try validate(request, headers: headers, path: path)
            let body = try await readBody(request)
            let payload: BackgroundPayload
            do { payload = try JSONDecoder().decode(BackgroundPayload.self, from: body) } catch {
                throw Refusal(400, "InvalidPayload")
            }
            let data = payload.data
            recorder.accept("\(data["identityId"] ?? "-") \(data["syncCount"] ?? "-") \(receivedMillis) \(data["datasetName"] ?? "-") \(token)\n")
            var fields = HTTPFields()
            fields[Names.apnsID] = apnsID
            return Response(status: .ok, headers: fields)
        } catch let refusal as Refusal {
            recorder.reject()
            var fields = HTTPFields()
            fields[Names.apnsID] = apnsID
            fields[.contentType] = "application/json"
            var body = ByteBuffer()
            body.writeString("{\"reason\": \"\(refusal.reason)\"}")
            return Response(status: refusal.status, headers: fields, body: .init(byteBuffer: body))
        } catch {
            recorder.reject()
            var fields = HTTPFields()
            fields[Names.apnsID] = apnsID
            fields[.contentType] = "application/json"
            var body = ByteBuffer()
            body.writeString("{\"reason\": \"InternalServerError\"}")
            return Response(status: .internalServerError, headers: fields, body: .init(byteBuffer: body))
        }
    }

    /// Apple's checks on method, path, provider token and headers, in the order apns.py applies
    /// them; returns the device token.
    func validate(_ request: Request, headers: APNsHeaders, path: String) throws(Refusal) -> Substring {
        guard request.method == .post else { throw Refusal(405, "MethodNotAllowed") }
        guard path.hasPrefix(devicePrefix) else { throw Refusal(404, "BadPath") }
        let token = path.dropFirst(devicePrefix.count)
        guard !token.isEmpty else { throw Refusal(400, "MissingDeviceToken") }

        if headers.duplicateAuthorization { throw Refusal(400, "DuplicateHeaders") }
        try tokens.check(headers.authorization, now: wallSeconds())
        if headers.duplicate { throw Refusal(400, "DuplicateHeaders") }

        guard let topic = headers.topic else { throw Refusal(400, "MissingTopic") }
        if topic.isEmpty || topic.contains(where: \.isWhitespace) { throw Refusal(400, "BadTopic") }
        if topic != self.topic { throw Refusal(400, "DeviceTokenNotForTopic") }

        // SyncLedger sends background pushes only: anything else is refused.
        guard headers.pushType == "background" else { throw Refusal(400, "InvalidPushType") }
        let priority = headers.priority ?? "10"
        guard priority == "5" || priority == "10" else { throw Refusal(400, "BadPriority") }
        if priority == "10" { throw Refusal(400, "BadPriority") }  // 10 with background

        if let expiration = headers.expiration,
           expiration.isEmpty || !expiration.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            throw Refusal(400, "BadExpirationDate")
        }
        if let collapseID = headers.collapseID, collapseID.utf8.count > maxCollapseID {
            throw Refusal(400, "BadCollapseId")
        }
        if let apnsID = headers.apnsID, !isLowercaseUUID(apnsID) { throw Refusal(400, "BadMessageId") }
        guard token.utf8.count % 2 == 0, token.utf8.allSatisfy(isHex) else { throw Refusal(400, "BadDeviceToken") }
        return token
    }

    /// The body, refused when empty or over the limit.
    func readBody(_ request: Request) async throws -> Data {
        var collected = [UInt8]()
        var size = 0
        for try await buffer in request.body {
            size += buffer.readableBytes
            if size <= maxPayload { collected.append(contentsOf: buffer.readableBytesView) }
        }
        if size == 0 { throw Refusal(400, "PayloadEmpty") }
        if size > maxPayload { throw Refusal(413, "PayloadTooLarge") }
        return Data(collected)
    }

    func stats() -> Response {
        let (accepted, rejected) = recorder.counts
        var body = ByteBuffer()
        body.writeString("{\"accepted\": \(accepted), \"rejected\": \(rejected), \"distinctProviderTokens\": \(tokens.distinctCount)}")
        var fields = HTTPFields()
        fields[.contentType] = "application/json"
        return Response(status: .ok, headers: fields, body: .init(byteBuffer: body))
    }
}

// MARK: - Main

/// SIGTERM / SIGINT: write the records and exit 0. The handler runs on its own dispatch queue.
func installSignalHandlers(recorder: Recorder, outPath: String?) -> [any DispatchSourceSignal] {
    let queue = DispatchQueue(label: "apns-standin.signals")
    return [SIGTERM, SIGINT].map { signalNumber in
        signal(signalNumber, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
        source.setEventHandler { @Sendable in
            if let outPath { recorder.write(to: outPath) }
            exit(0)
        }
        source.resume()
        return source
    }
}

@main
enum APNsStandInMain {
    // Not top-level code: top-level globals are main-actor isolated, and the request handler
    // must not hop to the main actor.
    static func main() async throws {
        let options = parseOptions(CommandLine.arguments)

        let publicKey: P256.Signing.PublicKey
        do {
            publicKey = try P256.Signing.PublicKey(
                pemRepresentation: String(contentsOfFile: options.publicKey, encoding: .utf8))
        } catch {
            fail("cannot read the P-256 public key \(options.publicKey): \(error)")
        }

        let tlsConfiguration: TLSConfiguration
        do {
            let chain = try NIOSSLCertificate.fromPEMFile(options.cert).map { NIOSSLCertificateSource.certificate($0) }
            let key = try NIOSSLPrivateKey(file: options.key, format: .pem)
            tlsConfiguration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        } catch {
            fail("cannot load the TLS certificate/key: \(error)")
        }

        let recorder = Recorder()
        let standIn = StandIn(
            topic: options.topic,
            tokens: ProviderTokens(teamID: options.teamID, keyID: options.keyID, publicKey: publicKey),
            recorder: recorder)
        let signalSources = installSignalHandlers(recorder: recorder, outPath: options.out)

        var logger = Logger(label: "apns-standin", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .warning
        let requestedPort = options.port
        let app = Application(
            responder: CallbackResponder<BasicRequestContext> { request, _ in await standIn.respond(request) },
            server: try .http2Upgrade(tlsConfiguration: tlsConfiguration),
            configuration: .init(address: .hostname("127.0.0.1", port: requestedPort), serverName: "apns-standin"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? requestedPort
                FileHandle.standardOutput.write(Data("listening https://127.0.0.1:\(port)\n".utf8))
            },
            logger: logger)
        try await app.runService(gracefulShutdownSignals: [])
        withExtendedLifetime(signalSources) {}
    }
}
