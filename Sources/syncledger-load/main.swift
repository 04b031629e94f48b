// syncledger-load: drives a SyncLedger server through the Cognito sync loop over loopback.
//
//   syncledger-load --endpoint http://127.0.0.1:8080 [--endpoint URL ...] [--identities 64] [--seconds 10]
//                   [--records 10] [--serial-seconds 3]
//                   [--devices N] [--commit-log FILE] [--interval-ms MS]
//
// Each virtual identity keeps one HTTP/1.1 connection and loops: ListRecords(lastSyncCount) →
// UpdateRecords of N records with the sync counts it knows, signed with SigV4 (the admin
// credential from SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY). First it runs one
// identity one request at a time (the serial rate), then all identities at once, and prints
// UpdateRecords per second with p50/p99 latency for both.
//
// With --devices N, each identity first registers N APNs devices (random hex tokens) and
// subscribes them to its dataset, so every update notifies N devices (the pool must have push
// sync configured). With --commit-log FILE, every acknowledged update of the concurrent phase
// is written as `identity syncCount commitMillis` (the server's commit time from the answer), so
// a push stand-in's receive times can be matched to commits (tools/push-bench). With
// --interval-ms, each identity waits that long after each update (a paced load, not a flat-out one).
// With --messages, device messages against UpdateRecords of the same size (MessageBench.swift).
// --endpoint may be given several times (the nodes of a cluster, tools/cluster-bench): identity n
// talks to endpoint n mod the count, so the identities are spread round-robin over them.
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncLedger
import SyncLedgerServer
import Synchronization

struct Options {
    var host = "127.0.0.1"
    var port = 8080
    var identities = 64
    var seconds = 10.0
    var serialSeconds = 3.0
    var records = 10
    var pool = "us-east-1:10ad"
    var devices = 0
    var intervalMilliseconds = 0
    var commitLog: String?
    /// Every --endpoint given, in order; empty: `host`/`port` (which name the first one).
    var endpoints: [(host: String, port: Int)] = []

    /// The endpoint of identity `n` (round-robin over the endpoints given).
    func endpoint(_ n: Int) -> (host: String, port: Int) {
        endpoints.isEmpty ? (host, port) : endpoints[n % endpoints.count]
    }

    init(_ args: [String]) {
        var i = 1
        func next() -> String {
            i += 1
            guard i < args.count else { fatalError("missing value for \(args[i - 1])") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--endpoint":
                let url = URL(string: next())!
                endpoints.append((url.host ?? host, url.port ?? 80))
                (host, port) = endpoints[0]
            case "--identities": identities = Int(next())!
            case "--seconds": seconds = Double(next())!
            case "--serial-seconds": serialSeconds = Double(next())!
            case "--records": records = Int(next())!
            case "--pool": pool = next()
            case "--devices": devices = Int(next())!
            case "--interval-ms": intervalMilliseconds = Int(next())!
            case "--commit-log": commitLog = next()
            default: fatalError("unknown option \(args[i])")
            }
            i += 1
        }
    }
}

/// One keep-alive connection that sends a request and reads its response, in turn.
struct Connection {
    let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>

    static func open(host: String, port: Int, group: any EventLoopGroup) async throws -> Connection {
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return Connection(channel: channel)
    }
}

struct Failure: Error, CustomStringConvertible {
    let description: String
}

/// Runs one virtual identity's sync loop until `deadline`; returns UpdateRecords latencies.
func syncLoop(identity: String, endpoint: Int = 0, options: Options, signer: SigV4Signer, group: any EventLoopGroup, deadline: ContinuousClock.Instant, commits: CommitLog?, registerOnly: Bool = false) async throws -> [Double] {
    let (host, port) = options.endpoint(endpoint)
    let connection = try await Connection.open(host: host, port: port, group: group)
    var latencies: [Double] = []
    try await connection.channel.executeThenClose { inbound, outbound in
        var responses = inbound.makeAsyncIterator()
        let hostHeader = "\(host):\(port)"
        func send(_ method: HTTPMethod, _ path: String, _ query: String?, _ body: [UInt8]) async throws -> (Int, [UInt8]) {
            var headers = HTTPHeaders()
            headers.add(name: "host", value: hostHeader)
            headers.add(name: "content-type", value: "application/x-amz-json-1.1")
            headers.add(name: "content-length", value: "\(body.count)")
            for (name, value) in signer.sign(method: method.rawValue, host: hostHeader, rawPath: path, rawQuery: query, body: body) {
                headers.add(name: name, value: value)
            }
            let uri = query.map { "\(path)?\($0)" } ?? path
            var parts: [HTTPClientRequestPart] = [.head(HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: headers))]
            if !body.isEmpty { parts.append(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
            parts.append(.end(nil))
            try await outbound.write(contentsOf: parts)  // one flush: one segment per request
            var status = 0
            var data: [UInt8] = []
            while let part = try await responses.next() {
                switch part {
                case .head(let head): status = Int(head.status.code)
                case .body(let buffer): data += buffer.readableBytesView
                case .end: return (status, data)
                }
            }
            throw Failure(description: "connection closed")
        }
        let path = "/identitypools/\(SigV4.uriEncode(options.pool))/identities/\(SigV4.uriEncode(identity))/datasets/load"
        if registerOnly {
            for _ in 0..<options.devices {
                let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
                let registerPath = "/identitypools/\(SigV4.uriEncode(options.pool))/identity/\(SigV4.uriEncode(identity))/device"
                let (status, body) = try await send(.POST, registerPath, nil, Array(try JSONSerialization.data(withJSONObject: ["Platform": "APNS", "Token": token])))
                guard status == 200, let id = (try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["DeviceId"] as? String else {
                    throw Failure(description: "RegisterDevice answered \(status): \(String(decoding: body, as: UTF8.self))")
                }
                let (subscribed, answer) = try await send(.POST, path + "/subscriptions/\(SigV4.uriEncode(id))", nil, [])
                guard subscribed == 200 else { throw Failure(description: "SubscribeToDataset answered \(subscribed): \(String(decoding: answer, as: UTF8.self))") }
            }
            return
        }
        var lastSyncCount: Int64 = 0
        var counts: [String: Int64] = [:]
        var round = 0
        while ContinuousClock.now < deadline {
            let (listStatus, listBody) = try await send(.GET, path + "/records", "lastSyncCount=\(lastSyncCount)", [])
            guard listStatus == 200, let list = try JSONSerialization.jsonObject(with: Data(listBody)) as? [String: Any],
                  let token = list["SyncSessionToken"] as? String else {
                throw Failure(description: "ListRecords answered \(listStatus): \(String(decoding: listBody, as: UTF8.self))")
            }
            for case let record as [String: Any] in list["Records"] as? [Any] ?? [] {
                if let key = record["Key"] as? String, let count = (record["SyncCount"] as? NSNumber)?.int64Value { counts[key] = count }
            }
            lastSyncCount = (list["DatasetSyncCount"] as? NSNumber)?.int64Value ?? lastSyncCount
            round += 1
            let patches = (0..<options.records).map { i -> [String: Any] in
                let key = "k\(i)"
                return ["Op": "replace", "Key": key, "Value": "value \(round) of \(key) for \(identity)", "SyncCount": counts[key] ?? 0]
            }
            let body = try JSONSerialization.data(withJSONObject: ["SyncSessionToken": token, "DeviceId": "load", "RecordPatches": patches])
            let start = ContinuousClock.now
            let (status, response) = try await send(.POST, path, nil, Array(body))
            let elapsed = ContinuousClock.now - start
            guard status == 200, let result = try JSONSerialization.jsonObject(with: Data(response)) as? [String: Any] else {
                throw Failure(description: "UpdateRecords answered \(status): \(String(decoding: response, as: UTF8.self))")
            }
            latencies.append(elapsed.inSeconds)
            var committed = 0.0
            for case let record as [String: Any] in result["Records"] as? [Any] ?? [] {
                if let key = record["Key"] as? String, let count = (record["SyncCount"] as? NSNumber)?.int64Value {
                    counts[key] = count
                    lastSyncCount = max(lastSyncCount, count)
                }
                committed = max(committed, (record["LastModifiedDate"] as? NSNumber)?.doubleValue ?? 0)
            }
            if let commits {
                let line = "\(identity) \(lastSyncCount) \(Int64((committed * 1000).rounded()))"
                commits.lines.withLock { $0.append(line) }
            }
            if options.intervalMilliseconds > 0 { try await Task.sleep(for: .milliseconds(options.intervalMilliseconds)) }
        }
    }
    return latencies
}

/// The concurrent phase's acknowledged updates, `identity syncCount commitMillis` per line.
final class CommitLog: Sendable {
    let lines = Mutex<[String]>([])
}

struct Phase {
    let name: String
    let identities: Int
    let updates: Int
    let seconds: Double
    let p50: Double
    let p99: Double
    var rate: Double { Double(updates) / seconds }
}

func run(_ name: String, identities: Int, seconds: Double, options: Options, signer: SigV4Signer, group: any EventLoopGroup, commits: CommitLog? = nil) async throws -> Phase {
    let names = (0..<identities).map { n in "us-east-1:\(String(n, radix: 16))-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))" }
    if commits != nil, options.devices > 0 {
        try await withThrowingTaskGroup(of: [Double].self) { tasks in
            for (n, identity) in names.enumerated() {
                tasks.addTask { try await syncLoop(identity: identity, endpoint: n, options: options, signer: signer, group: group, deadline: .now, commits: nil, registerOnly: true) }
            }
            try await tasks.waitForAll()
        }
    }
    let start = ContinuousClock.now
    let deadline = start + .milliseconds(Int(seconds * 1000))
    let latencies = try await withThrowingTaskGroup(of: [Double].self) { tasks in
        for (n, identity) in names.enumerated() {
            tasks.addTask { try await syncLoop(identity: identity, endpoint: n, options: options, signer: signer, group: group, deadline: deadline, commits: commits) }
        }
        return try await tasks.reduce(into: [Double]()) { $0 += $1 }.sorted()
    }
    let elapsed = ContinuousClock.now - start
    let wall = elapsed.inSeconds
    func pct(_ p: Double) -> Double { latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] * 1000 }
    return Phase(name: name, identities: identities, updates: latencies.count, seconds: wall, p50: pct(0.5), p99: pct(0.99))
}

if CommandLine.arguments.contains("--oidc-setup") {
    try writeOIDCSetup()
    exit(0)
}
if CommandLine.arguments.contains("--sync-trigger") {
    try await runSyncTriggerBenchmark()
    exit(0)
}
if CommandLine.arguments.contains("--client") {
    try await runClientBenchmark()
    exit(0)
}
if CommandLine.arguments.contains("--sign-in") {
    try await runSignInBenchmark()
    exit(0)
}
if CommandLine.arguments.contains("--messages") {
    try await runMessageBenchmark()
    exit(0)
}
let options = Options(CommandLine.arguments)
let environment = ProcessInfo.processInfo.environment
guard let key = environment["SYNCLEDGER_ACCESS_KEY_ID"], let secret = environment["SYNCLEDGER_SECRET_ACCESS_KEY"] else {
    FileHandle.standardError.write(Data("set SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY to the server's admin credential\n".utf8))
    exit(2)
}
let signer = SigV4Signer(accessKeyID: key, secretAccessKey: secret)
let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let serial = try await run("serial (1 identity, 1 request at a time)", identities: 1, seconds: options.serialSeconds, options: options, signer: signer, group: group)
let commits = CommitLog()
let loaded = try await run("\(options.identities) concurrent identities", identities: options.identities, seconds: options.seconds, options: options, signer: signer, group: group,
                           commits: options.devices > 0 || options.commitLog != nil ? commits : nil)
if let path = options.commitLog {
    let text = commits.lines.withLock { $0.joined(separator: "\n") } + "\n"
    FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
}
print("| load | UpdateRecords/s | p50 ms | p99 ms | × serial |")
print("|---|---:|---:|---:|---:|")
for phase in [serial, loaded] {
    print(String(format: "| %@ | %.0f | %.2f | %.2f | %.2f |", phase.name, phase.rate, phase.p50, phase.p99, phase.rate / serial.rate))
}
print("(each UpdateRecords writes \(options.records) records after a ListRecords; \(loaded.updates) updates in \(String(format: "%.1f", loaded.seconds)) s)")
try await group.shutdownGracefully()
