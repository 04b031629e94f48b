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
}
