import Foundation
import SyncLedger
@testable import SyncLedgerClient
import Testing

/// The client writes the offline segment itself (it does not link the domain): the domain's
/// decoder — the server's — must read it as the changes it was given.
@Suite struct OfflineSegmentTests {
    @Test func theServersDecoderReadsTheClientsSegment() throws {
        let time = Date(timeIntervalSince1970: 1_764_322_030.25)
        let patches = [
            SyncLedgerClient.RecordPatch(key: "a", value: "1", syncCount: 0, deviceLastModified: time),
            SyncLedgerClient.RecordPatch(key: "b", value: nil, syncCount: 3, deviceLastModified: nil),
            SyncLedgerClient.RecordPatch(key: "ключ ✓", value: String(repeating: "x", count: 300), syncCount: 0, deviceLastModified: nil),
            SyncLedgerClient.RecordPatch(key: "d", value: nil, syncCount: 1, deviceLastModified: time),
        ]
        let expected: [Event] = [
            .put(key: "a", value: "1", deviceModified: Timestamp(time)), .remove(key: "b", deviceModified: nil),
            .put(key: "ключ ✓", value: String(repeating: "x", count: 300), deviceModified: nil), .remove(key: "d", deviceModified: Timestamp(time)),
        ]
        let stream = try StreamName(pool: "us-east-1:0000-aaaa", identity: "us-east-1:1111-bbbb", dataset: "settings")
        for device in ["device-1", nil] {
            let bytes = try CognitoSyncTransport.offlineSegment(identity: "us-east-1:1111-bbbb", pool: "us-east-1:0000-aaaa", dataset: "settings",
                                                                base: 7, patches: patches, deviceID: device)
            let segment = try Segment.decode(bytes)
            #expect(segment.scope == .stream(stream) && segment.previousHash == LogEntry.genesisHash && segment.entries.count == 1)
            let entry = try #require(try segment.entries.first?.entry)
            #expect(entry.offset == 8 && entry.device == device && entry.author == (device ?? "device"))
            #expect(entry.events == expected)
            // The domain's own writer carries the same changes at the same place.
            let reference = Segment.offlineChanges(stream: stream, base: 7, author: entry.author, device: device, batches: [(entry.time, expected)])
            let theirs = try #require(try Segment.decode(try reference.encoded()).entries.first?.entry)
            #expect(theirs.offset == entry.offset && theirs.events == entry.events && theirs.device == entry.device)
            // Every byte counts: a changed one is refused.
            for index in stride(from: 0, to: bytes.count, by: 7) {
                var damaged = bytes
                damaged[index] ^= 0x20
                #expect(throws: LedgerError.self, "byte \(index)") { try Segment.decode(damaged) }
            }
        }
        // A name the server would refuse is refused before anything is sent.
        #expect(throws: LedgerError.self) {
            try CognitoSyncTransport.offlineSegment(identity: "nope", pool: "us-east-1:0000-aaaa", dataset: "settings", base: 0, patches: patches, deviceID: nil)
        }
    }
}
