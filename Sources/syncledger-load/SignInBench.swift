// syncledger-load --sign-in: how fast an app signs in (issue 11), against ListRecords.
//
//   syncledger-load --sign-in --endpoint http://127.0.0.1:8080 [--identities 64] [--seconds 5] [--rounds 3]
//
// Makes an identity pool that allows unauthenticated identities (CreateIdentityPool, admin
// credential from SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY). Then N connections,
// in alternating phases on the same server: a sign-in is GetId then GetCredentialsForIdentity
// (unsigned, awsJson1_1), back to back; a ListRecords is one signed ListRecords of a small
// dataset of the connection's identity. Prints sign-ins per second, ListRecords per second, and
// the ratio (the median of each round's pair; goal ≥ 0.5).
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncLedgerServer

struct SignInOptions {
    var host = "127.0.0.1"
    var port = 8080
    var connections = 64
    var seconds = 5.0
    var rounds = 3

    init(_ args: [String]) {
        var i = 1
        func next() -> String {
            i += 1
            guard i < args.count else { fail("missing value for \(args[i - 1])") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--sign-in": break
            case "--endpoint":
                guard let url = URL(string: next()), let host = url.host, let port = url.port else { fail("--endpoint must be http://HOST:PORT") }
                (self.host, self.port) = (host, port)
            case "--identities": connections = Int(next()) ?? connections
            case "--seconds": seconds = Double(next()) ?? seconds
            case "--rounds": rounds = Int(next()) ?? rounds
            default: fail("unknown option \(args[i])")
            }
            i += 1
        }
    }
}

/// Runs `body` with an exchange over a new keep-alive connection.
private func withExchange(_ options: SignInOptions, group: any EventLoopGroup, _ body: (inout Exchange) async throws -> Void) async throws {
    let connection = try await Connection.open(host: options.host, port: options.port, group: group)
    try await connection.channel.executeThenClose { inbound, outbound in
        var exchange = Exchange(responses: inbound.makeAsyncIterator(), outbound: outbound, hostHeader: "\(options.host):\(options.port)", signer: nil)
        try await body(&exchange)
    }
}

private func identityCall(_ exchange: inout Exchange, target: String, _ object: [String: Any], signer: SigV4Signer? = nil) async throws -> [String: Any] {
    let body = Array(try JSONSerialization.data(withJSONObject: object))
    var headers = [("content-type", "application/x-amz-json-1.1"), ("x-amz-target", "AWSCognitoIdentityService.\(target)")]
    if let signer { headers += signer.sign(method: "POST", host: exchange.hostHeader, rawPath: "/", rawQuery: nil, headers: headers, body: body) }
    let (status, answer) = try await exchange.raw(.POST, "/", nil, headers: headers, body)
    guard status == 200, let json = try JSONSerialization.jsonObject(with: Data(answer)) as? [String: Any] else {
        throw Failure(description: "\(target) answered \(status): \(String(decoding: answer, as: UTF8.self))")
    }
    return json
}

/// Runs the benchmark and prints its table.
func runSignInBenchmark() async throws {
    let options = SignInOptions(CommandLine.arguments)
    let environment = ProcessInfo.processInfo.environment
    guard let key = environment["SYNCLEDGER_ACCESS_KEY_ID"], let secret = environment["SYNCLEDGER_SECRET_ACCESS_KEY"] else { fail("set the admin credential") }
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let host = "\(options.host):\(options.port)"
    let identitySigner = SigV4Signer(accessKeyID: key, secretAccessKey: secret, service: "cognito-identity")
    let syncSigner = SigV4Signer(accessKeyID: key, secretAccessKey: secret)
    var pool = ""
    try await withExchange(options, group: group) { exchange in
        let made = try await identityCall(&exchange, target: "CreateIdentityPool",
                                          ["IdentityPoolName": "sign in bench", "AllowUnauthenticatedIdentities": true], signer: identitySigner)
        pool = made["IdentityPoolId"] as? String ?? ""
    }
    let poolID = pool
    func phase(signIn: Bool) async throws -> (rate: Double, p50: Double, p99: Double) {
        let deadline = ContinuousClock.now + .milliseconds(Int(options.seconds * 1000))
        let start = ContinuousClock.now
        let latencies = try await withThrowingTaskGroup(of: [Double].self) { tasks in
            for n in 0..<options.connections {
                tasks.addTask {
                    var own: [Double] = []
                    try await withExchange(options, group: group) { exchange in
                        let identity = "us-east-1:5160\(String(n, radix: 16))-0000-4000-8000-000000000001"
                        let path = "/identitypools/\(SigV4.uriEncode(poolID))/identities/\(SigV4.uriEncode(identity))/datasets/prefs/records"
                        while ContinuousClock.now < deadline {
                            let t = ContinuousClock.now
                            if signIn {
                                let got = try await identityCall(&exchange, target: "GetId", ["IdentityPoolId": poolID])
                                _ = try await identityCall(&exchange, target: "GetCredentialsForIdentity", ["IdentityId": got["IdentityId"] as? String ?? ""])
                            } else {
                                let headers = syncSigner.sign(method: "GET", host: host, rawPath: path, rawQuery: "lastSyncCount=0", body: [])
                                let (status, answer) = try await exchange.raw(.GET, path, "lastSyncCount=0", headers: headers, [])
                                guard status == 200 else { throw Failure(description: "ListRecords answered \(status): \(String(decoding: answer, as: UTF8.self))") }
                            }
                            own.append(seconds(ContinuousClock.now - t))
                        }
                    }
                    return own
                }
            }
            return try await tasks.reduce(into: [Double]()) { $0 += $1 }.sorted()
        }
        let wall = seconds(ContinuousClock.now - start)
        return (Double(latencies.count) / wall, percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000)
    }
    var ratios: [Double] = []
    var signIns: [Double] = [], lists: [Double] = []
    var last: (sign: (rate: Double, p50: Double, p99: Double), list: (rate: Double, p50: Double, p99: Double))?
    for round in 1...options.rounds {
        let list = try await phase(signIn: false)
        let sign = try await phase(signIn: true)
        progress("round \(round) of \(options.rounds): \(Int(sign.rate)) sign-ins/s (p50 \(String(format: "%.1f", sign.p50)) ms), \(Int(list.rate)) ListRecords/s (p50 \(String(format: "%.1f", list.p50)) ms)")
        ratios.append(sign.rate / list.rate)
        signIns.append(sign.rate)
        lists.append(list.rate)
        last = (sign, list)
    }
    let ratio = median(ratios)
    print("| \(options.connections) connections | per s, median (each round) | p50 / p99 ms (last round) |")
    print("|---|---:|---:|")
    print("| sign-in: GetId + GetCredentialsForIdentity | \(Int(median(signIns))) (\(signIns.map { String(Int($0)) }.joined(separator: ", "))) | \(String(format: "%.1f / %.1f", last!.sign.p50, last!.sign.p99)) |")
    print("| ListRecords | \(Int(median(lists))) (\(lists.map { String(Int($0)) }.joined(separator: ", "))) | \(String(format: "%.1f / %.1f", last!.list.p50, last!.list.p99)) |")
    print("| sign-ins ÷ ListRecords (goal ≥ 0.5), median of rounds | **\(String(format: "%.2f", ratio)) \(ratio >= 0.5 ? "PASS" : "MISS")** (\(ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "))) | |")
    try await group.shutdownGracefully()
}
