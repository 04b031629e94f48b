import Foundation
import Testing
@testable import SyncLedger
@testable import SyncLedgerServer

/// What the MACs alone do not stop — an authenticated value put back later — and how the
/// sealing fails rather than seal something else.
extension ClusterSealingTests {
    @Test func aNodeRecordOlderThanThreeLeaseTimesIsNotCurrent() throws {
        let now: Int64 = 1_800_000_000_000
        let lease = Duration.seconds(6)
        func record(at: Int64) -> NodeRecord { NodeRecord(url: "http://127.0.0.1:1", applied: [], owned: [], rejected: nil, at: at) }
        #expect(record(at: now).isCurrent(now: now, leaseTime: lease))
        #expect(record(at: now - 17_999).isCurrent(now: now, leaseTime: lease), "a clock up to three lease times behind")
        #expect(!record(at: now - 18_001).isCurrent(now: now, leaseTime: lease), "replayed")
        #expect(record(at: now + 60_000).isCurrent(now: now, leaseTime: lease), "a clock ahead")
        #expect(!record(at: now - 1_000).isCurrent(now: now, leaseTime: .milliseconds(300)))
        // The time is sealed with the record: changing it breaks the MAC.
        let sealed = try sealing.sealNode(record(at: now - 60_000), node: "node1")
        var text = String(decoding: sealed, as: UTF8.self)
        text = text.replacingOccurrences(of: "\"at\":\(now - 60_000)", with: "\"at\":\(now)")
        #expect(text != String(decoding: sealed, as: UTF8.self))
        #expect(sealing.openNode(Array(text.utf8), key: ClusterNames.node("node1")) == nil)
        // A record without the time (as sealed before it was added) does not open.
        let untimed = sealing.keys.sealRecord(Array(#"{"url":"http://x","applied":[],"owned":[]}"#.utf8), bucket: ClusterNames.leases, key: "node.node1")
        #expect(sealing.openNode(untimed, key: "node.node1") == nil)
    }

    struct Unencodable: Encodable {
        struct Refused: Error {}
        func encode(to encoder: any Encoder) throws { throw Refused() }
    }

    @Test func aValueThatDoesNotEncodeIsNotSealed() throws {
        #expect(throws: Unencodable.Refused.self) { try sealing.seal(Unencodable(), key: "node.x") }
        // Not finite: JSONEncoder refuses it.
        #expect(throws: (any Error).self) { try sealing.seal(["x": Double.nan], key: "node.x") }
    }

    @Test func theOptionsNeverShowTheSecret() throws {
        let secret = "s3cret-cluster-key-that-must-not-leak"
        var options = ClusterOptions(servers: ["nats://127.0.0.1:4222"], nodeID: "node0")
        options.secret = secret
        options.connection.credentials = .userPassword(user: "syncledger", password: "nats-password-not-shown")
        var dumped = ""
        dump(options, to: &dumped)
        for shown in [String(describing: options), String(reflecting: options), "\(options)", dumped] {
            #expect(!shown.contains(secret), "\(shown)")
            #expect(!shown.contains("nats-password-not-shown"), "\(shown)")
            #expect(shown.contains("node0"), "\(shown)")
        }
        #expect(String(describing: options).contains("<redacted>"))
        #expect(Mirror(reflecting: options).children.allSatisfy { "\($0.value)" != secret })
    }

    /// A generation sealed with the time of its rotation.
    func generation(_ n: UInt64, at: Int64) throws -> (RotatedGeneration, [UInt8]) {
        let rotated = RotatedGeneration(generation: IdentityKeyGeneration(current: n, previous: n > 1 ? n - 1 : nil), rotatedAt: at)
        return (rotated, try sealing.seal(rotated, bucket: ClusterNames.settings, key: ClusterIdentityKey.key))
    }

    @Test func aNodeNeverTakesAnOlderIdentityKeyGenerationNotEvenAfterARestart() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("floor-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent(ClusterNode.identityKeyFile).path
        let (g2, v2) = try generation(2, at: 1_000)
        let (g3, v3) = try generation(3, at: 2_000)
        let floor = IdentityKeyFloor(file: file, sealing: sealing)
        #expect(floor.generation == nil)
        #expect(floor.admit(g2, value: v2))
        #expect(floor.admit(g3, value: v3))
        #expect(floor.admit(g3, value: v3), "the same one again")
        #expect(!floor.admit(g2, value: v2), "put back from before the rotation")
        // The same generation number from an earlier rotation (or a later number sealed with an
        // earlier time) is refused too.
        let (old3, oldValue3) = try generation(3, at: 1_500)
        #expect(!floor.admit(old3, value: oldValue3))
        let (odd4, oddValue4) = try generation(4, at: 1_900)
        #expect(!floor.admit(odd4, value: oddValue4))
        // Restarted: the floor is read back from the data directory.
        let restarted = IdentityKeyFloor(file: file, sealing: sealing)
        #expect(restarted.generation == g3)
        #expect(!restarted.admit(g2, value: v2))
        let (g4, v4) = try generation(4, at: 3_000)
        #expect(restarted.admit(g4, value: v4))
        #expect(IdentityKeyFloor(file: file, sealing: sealing).generation == g4)
        // A file another key sealed (or anyone wrote) counts as nothing seen.
        let other = ClusterSealing(keys: ClusterKeys(secret: "another-secret-0123456789"))
        #expect(IdentityKeyFloor(file: file, sealing: other).generation == nil)
        try Data("{\"generation\":{\"current\":99},\"rotatedAt\":9}".utf8).write(to: URL(fileURLWithPath: file))
        #expect(IdentityKeyFloor(file: file, sealing: sealing).generation == nil)
    }
}
