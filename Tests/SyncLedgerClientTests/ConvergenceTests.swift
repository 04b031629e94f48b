import Foundation
@testable import SyncLedgerClient
import Testing

/// A small seeded generator (SplitMix64), so a failing run can be replayed from its seed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random interleavings of edits and syncs on three devices of one identity, checked against a
/// model of what may happen to a local change: after each sync, every change that was dirty
/// before it is either on the server (pushed), still dirty locally, or was given to the
/// device's conflict handler. At the end every device holds the server's state.
final class ConvergenceTests {
    let server: TestServer
    var directories: [String] = []

    init() throws { server = try TestServer() }
    deinit {
        server.stop()
        for d in directories { try? FileManager.default.removeItem(atPath: d) }
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func randomInterleavingsConvergeWithEveryConflictSeen(round: UInt64) async throws {
        let seed = UInt64(Date().timeIntervalSince1970 * 1000) &* 31 &+ round
        var rng = SeededRandom(state: seed)
        let pool = try await server.createIdentityPool()
        let identity = newID()
        let keys = ["a", "b", "c", "d", "e"]
        let datasets = ["one", "two"]
        var devices: [SyncClient] = []
        var handlers: [RecordingHandler] = []
        for i in 0..<3 {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("client-\(UUID().uuidString)").path
            directories.append(dir)
            let transport = CognitoSyncTransport(endpoint: server.url, pool: pool, credentials: StaticCredentials(TestServer.admin, identityID: identity))
            devices.append(try SyncClient(store: try ClientStore(directory: dir), transport: transport, pool: pool, deviceID: "device-\(i)"))
            handlers.append(RecordingHandler(i == 0 ? .remote : i == 1 ? .local : .value("merged-\(i)")))
        }
        let admin = server.transport(pool: pool, identity: identity)
        var conflictsSeen = 0
        for step in 0..<80 {
            let i = Int.random(in: 0..<3, using: &rng)
            let device = devices[i]
            let dataset = datasets.randomElement(using: &rng)!
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<5:
                try await device.put(dataset, keys.randomElement(using: &rng)!, "v\(step)-d\(i)")
            case 5:
                try await device.remove(dataset, keys.randomElement(using: &rng)!)
            default:
                let before = try device.store.dirtyRecords(identity: identity, dataset: dataset)
                let seenBefore = handlers[i].seen.withLock { $0.count }
                do { try await device.synchronize(dataset, handler: handlers[i]) } catch SyncClientError.retriesExhausted {
                    continue  // legitimate under contention; the next sync goes on
                }
                let seen = handlers[i].seen.withLock { Set($0.dropFirst(seenBefore).map(\.key)) }
                conflictsSeen += seen.count
                let onServer = try await admin.listUpdates(identity: identity, dataset: dataset, after: 0)
                let server = Dictionary(uniqueKeysWithValues: onServer.records.map { ($0.key, $0.value) })
                for (key, change) in before {
                    let now = try device.store.record(identity: identity, dataset: dataset, key: key)
                    let pushed = server[key] == change.value
                    let stillDirty = now?.isDirty == true && now?.value == change.value
                    #expect(pushed || stillDirty || seen.contains(key),
                            "seed \(seed) step \(step): device \(i)'s change of \(key) in \(dataset) to \(change.value ?? "nil") was lost unseen")
                }
            }
        }
        // Quiesce: every device syncs every dataset until nothing moves.
        for _ in 0..<3 {
            for (i, device) in devices.enumerated() {
                for dataset in datasets { try await device.synchronize(dataset, handler: handlers[i]) }
            }
        }
        for dataset in datasets {
            let onServer = try await admin.listUpdates(identity: identity, dataset: dataset, after: 0)
            let expected = Dictionary(uniqueKeysWithValues: onServer.records.compactMap { r in r.value.map { (r.key, $0) } })
            for (i, device) in devices.enumerated() {
                #expect(try await device.getAll(dataset) == expected, "seed \(seed): device \(i) differs from the server in \(dataset)")
                #expect(try device.store.dirtyRecords(identity: identity, dataset: dataset).isEmpty, "seed \(seed): device \(i) has unsynced changes")
            }
        }
        print("convergence round \(round): seed \(seed), \(conflictsSeen) conflicts seen by handlers")
    }
}
