// syncledger-load --sign-in: how fast an app signs in (issue 11), against ListRecords.
//
//   syncledger-load --sign-in --endpoint http://127.0.0.1:8080 [--identities 64] [--seconds 5] [--rounds 3]
//                   [--oidc-key DIR/oidc-key.pem]
//   syncledger-load --oidc-setup DIR     (writes DIR/oidc-key.pem and DIR/jwks.json, for `identities providers add`)
//
// Makes an identity pool that allows unauthenticated identities (CreateIdentityPool, admin
// credential from SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY). Then N connections,
// in alternating phases on the same server: a sign-in is GetId then GetCredentialsForIdentity
// (unsigned, awsJson1_1), back to back; a ListRecords is one signed ListRecords of a small
// dataset of the connection's identity. With `--oidc-key`, a third phase: a returning user of an
// OpenID Connect provider (issuer `https://bench.oidc.test`, configured by tools/sign-in-bench)
// signs in — GetId then GetCredentialsForIdentity, both with `Logins` holding an ES256 ID token
// the server verifies each time. Prints the rates and the ratios to ListRecords (the median of
// each round's; goal ≥ 0.5).
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncLedger
import SyncLedgerServer

struct SignInOptions {
    var host = "127.0.0.1"
    var port = 8080
    var connections = 64
    var seconds = 5.0
    var rounds = 3
    var oidcKey: String?

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
            case "--oidc-key": oidcKey = next()
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

/// The benchmark's OpenID Connect provider.
let benchIssuer = "https://bench.oidc.test"

private func base64URL(_ bytes: some Sequence<UInt8>) -> String {
    Base64URL.string(Array(bytes))
}

/// `--oidc-setup DIR`: a P-256 key for the bench's provider and its JWKS.
func writeOIDCSetup() throws {
    guard let i = CommandLine.arguments.firstIndex(of: "--oidc-setup"), i + 1 < CommandLine.arguments.count else { fail("--oidc-setup needs a directory") }
    let dir = CommandLine.arguments[i + 1]
    let key = P256.Signing.PrivateKey()
    let raw = Array(key.publicKey.rawRepresentation)
    let jwks = ["keys": [["kty": "EC", "crv": "P-256", "kid": "bench-1", "use": "sig", "alg": "ES256",
                          "x": base64URL(raw[0..<32]), "y": base64URL(raw[32..<64])]]]
    try key.pemRepresentation.write(toFile: "\(dir)/oidc-key.pem", atomically: true, encoding: .utf8)
    try JSONSerialization.data(withJSONObject: jwks).write(to: URL(fileURLWithPath: "\(dir)/jwks.json"))
}

/// An ES256 ID token of the bench's provider for `subject`, valid for an hour.
private func idToken(_ key: P256.Signing.PrivateKey, subject: String) throws -> String {
    let now = Int(Date().timeIntervalSince1970)
    let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "typ": "JWT", "kid": "bench-1"])
    let claims = try JSONSerialization.data(withJSONObject: ["iss": benchIssuer, "sub": subject, "aud": "bench", "iat": now, "exp": now + 3600])
    let input = base64URL(header) + "." + base64URL(claims)
    return input + "." + base64URL(try key.signature(for: Array(input.utf8)).rawRepresentation)
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
        var definition: [String: Any] = ["IdentityPoolName": "sign in bench", "AllowUnauthenticatedIdentities": true]
        if options.oidcKey != nil { definition["OpenIdConnectProviderARNs"] = ["arn:aws:iam::000000000000:oidc-provider/bench.oidc.test"] }
        let made = try await identityCall(&exchange, target: "CreateIdentityPool", definition, signer: identitySigner)
        pool = made["IdentityPoolId"] as? String ?? ""
    }
    let poolID = pool
    let oidcKey = try options.oidcKey.map { try P256.Signing.PrivateKey(pemRepresentation: try String(contentsOfFile: $0, encoding: .utf8)) }
    enum Kind { case list, unauthenticated, openID }
    func phase(_ kind: Kind) async throws -> (rate: Double, p50: Double, p99: Double) {
        let deadline = ContinuousClock.now + .milliseconds(Int(options.seconds * 1000))
        let start = ContinuousClock.now
        let latencies = try await withThrowingTaskGroup(of: [Double].self) { tasks in
            for n in 0..<options.connections {
                tasks.addTask {
                    var own: [Double] = []
                    try await withExchange(options, group: group) { exchange in
                        let identity = "us-east-1:5160\(String(n, radix: 16))-0000-4000-8000-000000000001"
                        let path = "/identitypools/\(SigV4.uriEncode(poolID))/identities/\(SigV4.uriEncode(identity))/datasets/prefs/records"
                        // A returning user: the connection's user signed in once before the phase.
                        let logins = try oidcKey.map { ["bench.oidc.test": try idToken($0, subject: "user-\(n)")] } ?? [:]
                        if kind == .openID { _ = try await identityCall(&exchange, target: "GetId", ["IdentityPoolId": poolID, "Logins": logins]) }
                        while ContinuousClock.now < deadline {
                            let t = ContinuousClock.now
                            if kind == .unauthenticated {
                                let got = try await identityCall(&exchange, target: "GetId", ["IdentityPoolId": poolID])
                                _ = try await identityCall(&exchange, target: "GetCredentialsForIdentity", ["IdentityId": got["IdentityId"] as? String ?? ""])
                            } else if kind == .openID {
                                let got = try await identityCall(&exchange, target: "GetId", ["IdentityPoolId": poolID, "Logins": logins])
                                _ = try await identityCall(&exchange, target: "GetCredentialsForIdentity", ["IdentityId": got["IdentityId"] as? String ?? "", "Logins": logins])
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
    var signIns: [Double] = [], lists: [Double] = [], openIDs: [Double] = []
    var ratios: [Double] = [], openIDRatios: [Double] = []
    var last: [Kind: (rate: Double, p50: Double, p99: Double)] = [:]
    for round in 1...options.rounds {
        let list = try await phase(.list)
        let sign = try await phase(.unauthenticated)
        let openID = oidcKey == nil ? nil : try await phase(.openID)
        progress("round \(round) of \(options.rounds): \(Int(sign.rate)) sign-ins/s (p50 \(String(format: "%.1f", sign.p50)) ms), "
                 + (openID.map { "\(Int($0.rate)) OpenID sign-ins/s (p50 \(String(format: "%.1f", $0.p50)) ms), " } ?? "")
                 + "\(Int(list.rate)) ListRecords/s (p50 \(String(format: "%.1f", list.p50)) ms)")
        ratios.append(sign.rate / list.rate)
        signIns.append(sign.rate)
        lists.append(list.rate)
        last[.list] = list
        last[.unauthenticated] = sign
        if let openID {
            openIDs.append(openID.rate)
            openIDRatios.append(openID.rate / list.rate)
            last[.openID] = openID
        }
    }
    func row(_ name: String, _ rates: [Double], _ kind: Kind) -> String {
        "| \(name) | \(Int(median(rates))) (\(rates.map { String(Int($0)) }.joined(separator: ", "))) | \(String(format: "%.1f / %.1f", last[kind]!.p50, last[kind]!.p99)) |"
    }
    func verdict(_ name: String, _ values: [Double]) -> String {
        let ratio = median(values)
        return "| \(name) (goal ≥ 0.5), median of rounds | **\(String(format: "%.2f", ratio)) \(ratio >= 0.5 ? "PASS" : "MISS")** (\(values.map { String(format: "%.2f", $0) }.joined(separator: ", "))) | |"
    }
    print("| \(options.connections) connections | per s, median (each round) | p50 / p99 ms (last round) |")
    print("|---|---:|---:|")
    print(row("sign-in: GetId + GetCredentialsForIdentity", signIns, .unauthenticated))
    if !openIDs.isEmpty { print(row("returning OpenID Connect user: both with `Logins` (ES256 token verified)", openIDs, .openID)) }
    print(row("ListRecords", lists, .list))
    print(verdict("sign-ins ÷ ListRecords", ratios))
    if !openIDs.isEmpty { print(verdict("OpenID sign-ins ÷ ListRecords", openIDRatios)) }
    try await group.shutdownGracefully()
}
