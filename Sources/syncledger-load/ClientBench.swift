// syncledger-load --client: the client library's speed (issue 12), each figure against a
// baseline measured in the same run.
//
//   syncledger-load --client --endpoint http://127.0.0.1:8080 [--rounds 5]
//
// 1. First sync of a 1,024-record dataset into an empty store ÷ the raw ListRecords pages of the
//    same data (the transport alone): goal ≥ 0.5.
// 2. An incremental sync that pulls 10 changed records, in a 10-record and in a 1,024-record
//    dataset: goal within 2× of each other.
// 3. Local puts (one record per transaction, as an app's put) ÷ raw LMDB doing the same puts (the
//    record and the dataset's row) in the same transactions: goal ≥ 0.5; durable and not.
import Foundation
import LedgerStorage
import SyncLedger
import SyncLedgerClient

private struct ClientBenchOptions {
    var endpoint = URL(string: "http://127.0.0.1:8080")!
    var rounds = 5

    init(_ args: [String]) {
        var i = 1
        while i < args.count {
            switch args[i] {
            case "--client": break
            case "--endpoint":
                i += 1
                guard i < args.count, let url = URL(string: args[i]) else { fail("--endpoint needs a URL") }
                endpoint = url
            case "--rounds":
                i += 1
                rounds = i < args.count ? Int(args[i]) ?? rounds : rounds
            default: fail("unknown option \(args[i])")
            }
            i += 1
        }
    }
}

private func temporaryDirectory(_ name: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("client-bench-\(name)-\(UUID().uuidString)").path
}

private func timed(_ body: () async throws -> Void) async rethrows -> Double {
    let start = ContinuousClock.now
    try await body()
    return seconds(ContinuousClock.now - start)
}

/// Runs the client benchmark and prints its table.
func runClientBenchmark() async throws {
    let options = ClientBenchOptions(CommandLine.arguments)
    let environment = ProcessInfo.processInfo.environment
    guard let key = environment["SYNCLEDGER_ACCESS_KEY_ID"], let secret = environment["SYNCLEDGER_SECRET_ACCESS_KEY"] else { fail("set the admin credential") }
    let admin = AWSCredentials(accessKeyID: key, secretAccessKey: secret)
    let pool = "us-east-1:00000000-0000-4000-8000-0000000c11e7"
    let identity = "us-east-1:00000000-0000-4000-8000-\(String(UInt64.random(in: 0..<1 << 40), radix: 16).leftPadded(12))"
    let transport = CognitoSyncTransport(endpoint: options.endpoint, pool: pool, credentials: StaticCredentials(admin, identityID: identity))
    var scratch: [String] = []
    defer { for d in scratch { try? FileManager.default.removeItem(atPath: d) } }

    func fill(_ dataset: String, count: Int) async throws {
        let first = try await transport.listUpdates(identity: identity, dataset: dataset, after: 0)
        let patches = (0..<count).map { RecordPatch(key: String(format: "key-%04d", $0), value: "value \($0) " + String(repeating: "x", count: 80), syncCount: 0, deviceLastModified: nil) }
        _ = try await transport.putRecords(identity: identity, dataset: dataset, patches: patches, sessionToken: first.syncSessionToken, deviceID: "bench")
    }
    func change(_ dataset: String, _ n: Int, round: Int) async throws {
        let current = try await transport.listUpdates(identity: identity, dataset: dataset, after: 0)
        let patches = current.records.prefix(n).map { RecordPatch(key: $0.key, value: "changed \(round)", syncCount: $0.syncCount, deviceLastModified: nil) }
        _ = try await transport.putRecords(identity: identity, dataset: dataset, patches: Array(patches), sessionToken: current.syncSessionToken, deviceID: "bench")
    }
    func newClient(durable: Bool = true) throws -> SyncClient {
        let dir = temporaryDirectory("store")
        scratch.append(dir)
        return try SyncClient(store: try ClientStore(directory: dir, durable: durable), transport: transport, pool: pool, deviceID: "bench-client")
    }

    progress("client bench: filling datasets on \(options.endpoint)")
    try await fill("big", count: 1024)
    try await fill("small", count: 10)

    // 1. First sync vs the raw pages.
    var raw: [Double] = [], first: [Double] = []
    for round in 1...options.rounds {
        raw.append(try await timed { _ = try await transport.listUpdates(identity: identity, dataset: "big", after: 0) })
        let client = try newClient()
        first.append(try await timed { try await client.synchronize("big") })
        guard try await client.getAll("big").count == 1024 else { fail("the first sync did not bring 1,024 records") }
        progress("round \(round): raw pages \(String(format: "%.1f", raw.last! * 1000)) ms, first sync \(String(format: "%.1f", first.last! * 1000)) ms")
    }

    // 2. Incremental syncs of 10 changed records.
    let bigClient = try newClient(), smallClient = try newClient()
    try await bigClient.synchronize("big")
    try await smallClient.synchronize("small")
    var incBig: [Double] = [], incSmall: [Double] = []
    for round in 1...max(options.rounds, 5) {
        try await change("big", 10, round: round)
        incBig.append(try await timed { try await bigClient.synchronize("big") })
        try await change("small", 10, round: round)
        incSmall.append(try await timed { try await smallClient.synchronize("small") })
    }

    // 3. Local puts vs raw LMDB puts in the same transactions.
    func localPuts(durable: Bool, count: Int) throws -> Double {
        let dir = temporaryDirectory("puts")
        scratch.append(dir)
        let store = try ClientStore(directory: dir, durable: durable)
        let start = ContinuousClock.now
        for i in 0..<count { try store.put(identity: identity, dataset: "puts", key: "key-\(i % 1000)", value: "value \(i) " + String(repeating: "x", count: 80)) }
        return Double(count) / seconds(ContinuousClock.now - start)
    }
    func rawPuts(durable: Bool, count: Int) throws -> Double {
        let dir = temporaryDirectory("raw")
        scratch.append(dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var envOptions = EnvironmentOptions()
        envOptions.durable = durable
        let env = try Environment(path: dir, options: envOptions)
        let records = try env.openDatabase("records"), datasets = try env.openDatabase("datasets")
        let datasetKey = Array(identity.utf8) + [0] + Array("puts".utf8)
        let start = ContinuousClock.now
        for i in 0..<count {
            try env.write { txn in
                try txn.put(records, key: [0, 0, 0, 0, 0, 0, 0, 1] + Array("key-\(i % 1000)".utf8), value: Array(("value \(i) " + String(repeating: "x", count: 80)).utf8))
                try txn.put(datasets, key: datasetKey, value: [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 48))
            }
        }
        return Double(count) / seconds(ContinuousClock.now - start)
    }
    var putRows: [(String, Double, Double)] = []
    for (durable, count) in [(true, 2000), (false, 20000)] {
        var locals: [Double] = [], raws: [Double] = []
        for _ in 1...3 {
            raws.append(try rawPuts(durable: durable, count: count))
            locals.append(try localPuts(durable: durable, count: count))
        }
        putRows.append((durable ? "durable" : "not durable (`durable: false`)", median(locals), median(raws)))
    }

    let firstRatio = median(raw) / median(first)
    let incRatio = median(incBig) / median(incSmall)
    print("| measure | value | baseline (same run) | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    print("| first sync of 1,024 records (median of \(options.rounds)) | \(String(format: "%.1f", median(first) * 1000)) ms | raw ListRecords pages \(String(format: "%.1f", median(raw) * 1000)) ms | **\(String(format: "%.2f", firstRatio))** | ≥ 0.5: \(firstRatio >= 0.5 ? "PASS" : "MISS") |")
    print("| incremental sync of 10 changed records, 1,024-record dataset | \(String(format: "%.1f", median(incBig) * 1000)) ms | 10-record dataset \(String(format: "%.1f", median(incSmall) * 1000)) ms | **\(String(format: "%.2f", incRatio))×** | ≤ 2×: \(incRatio <= 2 ? "PASS" : "MISS") |")
    for (mode, local, rawRate) in putRows {
        let ratio = local / rawRate
        print("| local puts, one per transaction, \(mode) | \(Int(local))/s | raw LMDB same puts \(Int(rawRate))/s | **\(String(format: "%.2f", ratio))** | ≥ 0.5: \(ratio >= 0.5 ? "PASS" : "MISS") |")
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
