import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct OfflineMergeTests {
    /// A server and a device that share history up to `base`, then the device works offline.
    private func withServerAndDevice(_ body: (Ledger, Ledger, StreamName) async throws -> Void) async throws {
        try await withLedger { server in
            try await withLedger { device in
                let s = stream("notes")
                try await server.put(s, ["a": "1", "b": "1", "c": "1"])   // 1
                try await server.put(s, ["a": "2"])                       // 2
                try await device.merge(try #require(try server.streamSegment(s, after: 0)))
                try await body(server, device, s)
            }
        }
    }

    @Test func anUnchangedServerFastForwards() async throws {
        try await withServerAndDevice { server, device, s in
            try await device.put(s, ["b": "offline"], device: "phone")   // device 3
            try await device.put(s, ["d": "new"], device: "phone")       // device 4
            let offline = try #require(try device.streamSegment(s, after: 2))
            let report = try await server.mergeOffline(offline, deviceID: "phone", sessionToken: try server.token(s))
            #expect(report.fastForward && report.conflicts.isEmpty && report.syncCount == 4)
            #expect(Set(report.applied.map(\.key)) == ["b", "d"])
            // One server entry per device entry, with the device's changes — but the server's
            // own author, device and time: nothing of the device's entry but its events is kept.
            let written = try server.entries(in: s).suffix(2)
            let sent = try device.entries(in: s).suffix(2)
            #expect(written.map(\.offset) == [3, 4])
            #expect(written.map { $0.events.map(\.key) } == sent.map { $0.events.map(\.key) })
            #expect(written.allSatisfy { $0.author == s.identity.rawValue && $0.device == "phone" })
            #expect(zip(written, sent).allSatisfy { w, d in w.events.allSatisfy { if case .put(_, _, let t) = $0 { t == d.time } else { false } } },
                    "the device's entry time becomes its events' device time")
            #expect(try server.values(s) == ["a": "2", "b": "offline", "c": "1", "d": "new"])
            #expect(try server.verify().isValid)
        }
    }

    @Test func conflictsRefuseEverythingByDefault() async throws {
        try await withServerAndDevice { server, device, s in
            try await server.put(s, ["a": "server"])                     // server 3: a moved on
            try await device.put(s, ["a": "offline", "b": "offline"])    // device 3
            let offline = try #require(try device.streamSegment(s, after: 2))
            let error = await expectLedgerError(.conflict) { _ = try await server.mergeOffline(offline, deviceID: "phone", sessionToken: try server.token(s)) }
            #expect(error?.conflicts == [LedgerError.Conflict(key: "a", expected: 2, actual: 3)])
            #expect(try server.describeDataset(s).syncCount == 3)
            #expect(try server.values(s) == ["a": "server", "b": "1", "c": "1"])
        }
    }

    @Test func partialMergeWritesTheRestAsOneEntry() async throws {
        try await withServerAndDevice { server, device, s in
            try await server.put(s, ["a": "server"])                               // server 3
            try await device.put(s, ["a": "offline", "b": "offline"], device: "phone")  // device 3
            try await device.put(s, ["c": nil], device: "phone")                    // device 4: remove c
            let offline = try #require(try device.streamSegment(s, after: 2))
            let report = try await server.mergeOffline(offline, deviceID: "phone", sessionToken: try server.token(s), partial: true)
            #expect(!report.fastForward)
            #expect(report.conflicts.map(\.key) == ["a"])
            #expect(Set(report.applied.map(\.key)) == ["b", "c"] && report.syncCount == 4)
            #expect(report.applied.allSatisfy { $0.syncCount == 4 })
            #expect(try server.values(s) == ["a": "server", "b": "offline"])
            #expect(try server.entries(in: s).last.map { ($0.author, $0.device) } ?? ("", nil) == (s.identity.rawValue, "phone"))
            #expect(try server.verify().isValid)
            // Everything in conflict: nothing to write, even with partial.
            try await server.put(s, ["b": "server"])
            let again = try #require(try device.streamSegment(s, after: 3))
            await expectLedgerError(.conflict) { _ = try await server.mergeOffline(again, deviceID: "phone", sessionToken: try server.token(s), partial: true) }
        }
    }

    @Test func anOfflineDeleteNeedsAnUnchangedServer() async throws {
        try await withServerAndDevice { server, device, s in
            try await server.put(s, ["a": "server"])
            try await device.deleteDataset(s)
            let offline = try #require(try device.streamSegment(s, after: 2))
            await expectLedgerError(.conflict) { _ = try await server.mergeOffline(offline, deviceID: "phone", sessionToken: try server.token(s), partial: true) }
            #expect(try server.describeDataset(s).numRecords == 3)
        }
    }
}
