// syncledger-load --sync-trigger: what a SyncTrigger hook costs a write (issue 13).
//
//   syncledger-load --sync-trigger --endpoint URL --plain POOL:IDENTITY:KEY:SECRET --hooked POOL:IDENTITY:KEY:SECRET
//                   [--connections 16] [--seconds 4] [--rounds 3]
//
// Two identities with their own credentials (tools/sync-trigger-bench mints them): one in a pool
// with no SyncTrigger, one in a pool whose SyncTrigger calls a loopback hook that answers at once.
// Phases alternate; each connection pushes one record per UpdateRecords to its own dataset.
// Prints both rates and their ratio (goal ≥ 0.5).
import Foundation
import SyncLedgerClient

private struct Target {
    let pool: String
    let identity: String
    let credentials: AWSCredentials

    init(_ text: String) {
        let parts = text.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 4 else { fail("a target is POOL|IDENTITY|KEY|SECRET") }
        pool = parts[0]
        identity = parts[1]
        credentials = AWSCredentials(accessKeyID: parts[2], secretAccessKey: parts[3])
    }
}

/// Runs the SyncTrigger benchmark and prints its table.
func runSyncTriggerBenchmark() async throws {
    let args = CommandLine.arguments
    func value(_ name: String) -> String? { args.firstIndex(of: name).flatMap { $0 + 1 < args.count ? args[$0 + 1] : nil } }
    guard let endpoint = value("--endpoint").flatMap(URL.init(string:)), let plain = value("--plain").map(Target.init),
          let hooked = value("--hooked").map(Target.init) else { fail("give --endpoint, --plain and --hooked") }
    let connections = value("--connections").flatMap(Int.init) ?? 16
    let phaseSeconds = value("--seconds").flatMap(Double.init) ?? 4
    let rounds = value("--rounds").flatMap(Int.init) ?? 3

    func phase(_ target: Target, round: Int) async throws -> Double {
        let transport = CognitoSyncTransport(endpoint: endpoint, pool: target.pool,
                                             credentials: StaticCredentials(target.credentials, identityID: target.identity))
        let deadline = ContinuousClock.now + .milliseconds(Int(phaseSeconds * 1000))
        let start = ContinuousClock.now
        let count = try await withThrowingTaskGroup(of: Int.self) { group in
            for c in 0..<connections {
                group.addTask {
                    let dataset = "bench-\(c)"  // the same 16 every round (20 datasets per identity)
                    var done = 0
                    let first = try await transport.listUpdates(identity: target.identity, dataset: dataset, after: 0)
                    var syncCount = first.records.first { $0.key == "k" }?.syncCount ?? 0
                    var token = first.syncSessionToken
                    while ContinuousClock.now < deadline {
                        let written = try await transport.putRecords(identity: target.identity, dataset: dataset,
                                                                      patches: [RecordPatch(key: "k", value: "value \(done)", syncCount: syncCount, deviceLastModified: nil)],
                                                                      sessionToken: token, deviceID: "bench")
                        syncCount = written.first { $0.key == "k" }?.syncCount ?? syncCount + 1
                        done += 1
                        if done % 200 == 0 { token = try await transport.listUpdates(identity: target.identity, dataset: dataset, after: syncCount).syncSessionToken }
                    }
                    return done
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(count) / seconds(ContinuousClock.now - start)
    }

    var plainRates: [Double] = [], hookedRates: [Double] = [], ratios: [Double] = []
    for round in 1...rounds {
        let a = try await phase(plain, round: round)
        let b = try await phase(hooked, round: round)
        plainRates.append(a)
        hookedRates.append(b)
        ratios.append(b / a)
        progress("round \(round) of \(rounds): \(Int(a)) updates/s without a hook, \(Int(b)) with one")
    }
    let ratio = median(ratios)
    print("| \(connections) connections, one record per UpdateRecords | updates/s, median (each round) |")
    print("|---|---:|")
    print("| without a SyncTrigger | \(Int(median(plainRates))) (\(plainRates.map { String(Int($0)) }.joined(separator: ", "))) |")
    print("| with a loopback hook that answers at once | \(Int(median(hookedRates))) (\(hookedRates.map { String(Int($0)) }.joined(separator: ", "))) |")
    print("| with ÷ without (goal ≥ 0.5), median of rounds | **\(String(format: "%.2f", ratio)) \(ratio >= 0.5 ? "PASS" : "MISS")** (\(ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "))) |")
}
