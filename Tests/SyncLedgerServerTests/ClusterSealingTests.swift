import Foundation
import NATS
import Testing
@testable import SyncLedger
@testable import SyncLedgerServer

/// The cluster's message authentication: a shard message, lease or node record opens only with
/// the cluster's key, on the shard or key it was sealed for, byte for byte.
@Suite struct ClusterSealingTests {
    let sealing = ClusterSealing(keys: ClusterKeys(secret: "wire-test-admin-secret/0123456789"))
    let payload: [UInt8] = Array("a segment's bytes".utf8)

    func message(_ headers: NATSHeaders?, shard: Int = 3, payload: [UInt8]? = nil, subject: String? = nil) -> StoredMessage {
        StoredMessage(subject: subject ?? ClusterNames.subject(shard), sequence: 7, headers: headers, payload: payload ?? self.payload, time: Date())
    }

    func refused(_ message: StoredMessage, shard: Int = 3) -> Bool {
        do {
            _ = try sealing.open(message, shard: shard)
            return false
        } catch is UnauthenticatedShardMessage {
            return true
        } catch {
            return false
        }
    }

    @Test func aSealedMessageOpensOnItsShardOnly() throws {
        let headers = sealing.headers(shard: 3, kind: ClusterNames.entriesKind, node: "node0", payload: payload)
        guard case .entries(let bytes) = try sealing.open(message(headers), shard: 3) else { Issue.record("not entries"); return }
        #expect(bytes == payload)
        // Another shard (its subject too), another key, a changed byte, kind or node, no MAC.
        #expect(refused(message(headers, shard: 4), shard: 4))
        #expect(refused(message(headers), shard: 4))
        let otherKey = ClusterSealing(keys: ClusterKeys(secret: "another-secret-0123456789"))
        #expect(refused(message(otherKey.headers(shard: 3, kind: ClusterNames.entriesKind, node: "node0", payload: payload))))
        for i in payload.indices {
            var tampered = payload
            tampered[i] ^= 0x01
            #expect(refused(message(headers, payload: tampered)), "byte \(i)")
        }
        #expect(refused(message(headers, payload: payload + [0])))
        var kind = headers
        kind[ClusterNames.kindHeader] = ClusterNames.fenceKind
        #expect(refused(message(kind)))
        var node = headers
        node[ClusterNames.nodeHeader] = "node1"
        #expect(refused(message(node)))
        var bare = headers
        bare[ClusterSealing.macHeader] = nil
        #expect(refused(message(bare)))
        #expect(refused(message(nil)))
        var flipped = headers
        flipped[ClusterSealing.macHeader] = String(headers[ClusterSealing.macHeader]!.reversed())
        #expect(refused(message(flipped)))
    }

    @Test func aFenceCarriesItsLeaseRevision() throws {
        let note = FenceNote(node: "node1", url: "http://127.0.0.1:1", revision: 42)
        let bytes = Array(try JSONEncoder().encode(note))
        let headers = sealing.headers(shard: 0, kind: ClusterNames.fenceKind, node: "node1", payload: bytes)
        guard case .fence(let opened) = try sealing.open(message(headers, shard: 0, payload: bytes), shard: 0) else { Issue.record("not a fence"); return }
        #expect(opened == note)
        // An unauthenticated fence (what anyone on the bus could send) is refused.
        var forged = NATSHeaders()
        forged[ClusterNames.kindHeader] = ClusterNames.fenceKind
        #expect(refused(message(forged, shard: 0, payload: bytes), shard: 0))
    }

    @Test func leasesAndNodeRecordsOpenForTheirKeyOnly() throws {
        let holder = LeaseHolder(node: "node0", url: "http://127.0.0.1:8080")
        let value = try sealing.sealLease(holder, shard: 2)
        #expect(sealing.openLease(value, shard: 2) == holder)
        #expect(sealing.openLease(value, shard: 3) == nil, "another shard's key")
        #expect(sealing.openLease(Array(try JSONEncoder().encode(LeaseHolder(node: "evil", url: "http://attacker"))), shard: 2) == nil, "unsealed")
        var tampered = value
        tampered[tampered.count - 3] ^= 0x01
        #expect(sealing.openLease(tampered, shard: 2) == nil)
        #expect(ClusterSealing(keys: ClusterKeys(secret: "another-secret-0123456789")).openLease(value, shard: 2) == nil)
        let record = NodeRecord(url: "http://127.0.0.1:8080", applied: [1, 2], owned: [0], rejected: 3, at: NodeRecord.now)
        let sealed = try sealing.sealNode(record, node: "node0")
        #expect(sealing.openNode(sealed, key: ClusterNames.node("node0")) == record)
        #expect(sealing.openNode(sealed, key: ClusterNames.node("node9")) == nil, "copied under another node's key")
        #expect(sealing.openLease(sealed, shard: 0) == nil)
        for short in [[], Array(repeating: UInt8(ascii: "0"), count: 65), Array(value.prefix(64))] {
            #expect(sealing.openLease(short, shard: 2) == nil)
        }
    }
}
