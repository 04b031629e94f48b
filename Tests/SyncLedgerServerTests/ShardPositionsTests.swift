import Testing
@testable import SyncLedger
@testable import SyncLedgerServer

/// Positions in the shards' logs, as cluster event ids and device-message consumers use them:
/// the text form reads back, a consumer's positions may name any shards, and combining two
/// moves each shard forward (joined) or back (met) on its own.
@Suite struct ShardPositionsTests {
    let map = try! ShardMap(count: 4)

    func parse(_ text: String) throws -> ShardPositions {
        try ShardPositions.parse(text, from: "Position", map: map, shards: nil, what: "positions")
    }

    @Test func theTextReadsBackAndAConsumersPositionsNameAnyShards() throws {
        for text in ["c:0=1", "c:1=5.2,3=9", "c:0=1,1=2,2=3,3=4"] {
            #expect(try parse(text).text == text)
        }
        #expect(try parse("c:3=9,1=5.2").text == "c:1=5.2,3=9", "shards in order")
        for bad in ["", "c:", "0=1", "c:4=1", "c:0=1,0=2", "c:0=x", "c:0=1.0", "c:0=-1", "c:0=1.2.3", "c: 0=1"] {
            #expect(throws: WireError.self, "\(bad)") { _ = try parse(bad) }
        }
        // An event id must name exactly its scope's shards.
        #expect(throws: WireError.self) {
            _ = try ShardPositions.parse("c:0=1", from: "id", map: map, shards: [0, 1], what: "an event id")
        }
    }

    @Test func joinedMovesEachShardForwardAndMetBack() throws {
        let a = try parse("c:0=5,1=3.1,2=7")
        let b = try parse("c:0=4,1=3,3=2")
        #expect(a.joined(b).text == "c:0=5,1=3,2=7,3=2", "shard 1: the whole message 3 is past its first entry")
        #expect(b.joined(a) == a.joined(b))
        #expect(a.met(b).text == "c:0=4,1=3.1", "a shard at its start in either is at its start")
        #expect(a.joined(a) == a && a.met(a) == a)
        #expect(a.covers(shard: 1, message: 3, index: 1) && !a.covers(shard: 1, message: 3, index: 2))
        #expect(a.covers(shard: 0, message: 5, index: 99) && !a.covers(shard: 3, message: 1, index: 1))
    }
}
