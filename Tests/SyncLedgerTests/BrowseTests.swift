import Foundation
import LedgerStorage
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

/// What the history browser reads: pools, datasets in pages, and one dataset verified alone.
@Suite struct BrowseTests {
    @Test func datasetsArePagedInNameOrderWithoutInternalStreams() async throws {
        try await withLedger { ledger in
            for i in 0..<3 { for d in ["a", "b"] { _ = try await ledger.put(stream(d, identity: "\(i)"), ["k": "v"]) } }
            _ = try await ledger.put(stream("x", identity: "9", pool: "test:9"), ["k": "v"])
            _ = try await ledger.setPoolConfiguration(stream().pool, pushSync: nil, cognitoStreams: StreamsConfiguration(streamName: "s", streamingStatus: "ENABLED"), caller: "admin")
            #expect(try ledger.browsePools().map(\.rawValue) == ["test:0", "test:9"])
            var seen: [String] = []
            var after: StreamName?
            while true {
                let page = try ledger.browseStreams(pool: stream().pool, after: after, limit: 4)
                seen += page.map { "\($0.stream.identity.rawValue)/\($0.stream.dataset.rawValue)" }
                guard page.count == 4, let last = page.last else { break }
                after = last.stream
            }
            #expect(seen == ["test:0/a", "test:0/b", "test:1/a", "test:1/b", "test:2/a", "test:2/b"])
            #expect(try ledger.browseStreams(pool: stream().pool, identity: try IdentityID("test:1")).map(\.syncCount) == [1, 1])
            #expect(try ledger.browseStreamHead(stream("a", identity: "2")) == 1)
            await expectLedgerError(.notFound) { _ = try ledger.browseStreamHead(stream("nope")) }
        }
    }

    @Test func oneDatasetIsVerifiedAloneAndATamperedOneIsReported() async throws {
        try await withLedger { ledger in
            let good = stream("good"), bad = stream("bad")
            _ = try await ledger.put(good, ["k": "v"])
            _ = try await ledger.put(bad, ["k": "v"])
            _ = try await ledger.put(bad, ["k": "w"])
            #expect(try ledger.verify(stream: good).isValid && ledger.verify(stream: bad).isValid)
            try await ledger.write { txn in
                let sequence = try #require(try ledger.entries(in: bad).first).sequence
                var row = try #require(try txn.get(ledger.schema.log, key: .bigEndian(sequence)))
                let index = try #require(row.lastIndex(of: UInt8(ascii: "v")))
                row[index] = UInt8(ascii: "x")
                try txn.put(ledger.schema.log, key: .bigEndian(sequence), value: row)
            }
            let report = try ledger.verify(stream: bad)
            #expect(report.problem?.stream == bad && report.problem?.offset == 1)
            #expect(try ledger.verify(stream: good).isValid)
            await expectLedgerError(.notFound) { _ = try ledger.verify(stream: stream("nope")) }
        }
    }
}
