import Foundation
import Testing
@testable import SyncLedgerClient

/// Named sync config files: what parses, and errors that say which sync and which field.
@Suite struct NamedSyncConfigTests {
    @Test func aConfigParsesWithItsDefaults() throws {
        let json = """
        {"syncs":[
          {"syncName":"prefsDown","syncType":"syncDown","datasets":["prefs","notes"],"options":{"mergeMode":"LEAVE_IF_CHANGED"}},
          {"syncName":"up","syncType":"syncUp","datasets":["prefs"]},
          {"syncName":"both","syncType":"sync","datasets":["a.b_c-1:x"],"options":{}}]}
        """
        let config = try SyncConfig(json: Data(json.utf8))
        #expect(config.syncs.map(\.syncName) == ["prefsDown", "up", "both"])
        #expect(config.syncs[0].syncType == .syncDown && config.syncs[0].options.mergeMode == .leaveIfChanged)
        #expect(config.syncs[0].datasets == ["prefs", "notes"])
        #expect(config.syncs[1].syncType == .syncUp && config.syncs[1].options.mergeMode == .overwrite)
        #expect(config.syncs[2].syncType == .sync && config.syncs[2].options.mergeMode == .overwrite)
        // What it encodes to parses back the same.
        #expect(try SyncConfig(json: JSONEncoder().encode(config)) == config)
        // And from a file.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("usersyncs-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        #expect(try SyncConfig(contentsOf: path) == config)
        #expect(throws: SyncClientError.self) { try SyncConfig(contentsOf: path + ".missing") }
    }

    @Test(arguments: [
        (#"{"syncs":[{"syncName":"s1","syncType":"syncSideways","datasets":["p"]}]}"#, ["\"s1\"", "syncType", "syncSideways"]),
        (#"{"syncs":[{"syncName":"s2","syncType":"syncDown","datasets":["p"],"options":{"mergeMode":"MERGE"}}]}"#, ["\"s2\"", "options.mergeMode", "MERGE"]),
        (#"{"syncs":[{"syncName":"s3","syncType":"syncDown","datasets":["ok","bad/name"]}]}"#, ["\"s3\"", "datasets", "bad/name"]),
        (#"{"syncs":[{"syncName":"s4","syncType":"syncDown"}]}"#, ["\"s4\"", "datasets"]),
        (#"{"syncs":[{"syncName":"s5","syncType":"syncDown","datasets":[]}]}"#, ["\"s5\"", "datasets"]),
        (#"{"syncs":[{"syncName":"s6","syncType":"syncDown","datasets":["p"]},{"syncName":"s6","syncType":"syncUp","datasets":["p"]}]}"#, ["\"s6\"", "syncName"]),
        (#"{"syncs":[{"syncName":"ok","syncType":"syncDown","datasets":["p"]},{"syncType":"syncDown","datasets":["p"]}]}"#, ["#2", "syncName"]),
        (#"{"syncs":[{"syncName":"s8","syncType":"syncDown","datasets":["p","p"]}]}"#, ["\"s8\"", "datasets", "twice"]),
        (#"{"syncs":[{"syncName":"s9","datasets":["p"]}]}"#, ["\"s9\"", "syncType"]),
        (#"{"syncs":[{"syncName":"s10","syncType":"syncUp","datasets":["_syncledger.x"]}]}"#, ["\"s10\"", "datasets", "reserved"]),
        (#"{"nosyncs":[]}"#, ["syncs"]),
        ("not json", ["JSON"]),
    ])
    func badConfigsSayWhichSyncAndWhichField(json: String, mentions: [String]) {
        do {
            _ = try SyncConfig(json: Data(json.utf8))
            Issue.record("\(json) parsed")
        } catch SyncClientError.invalidParameter(let message) {
            for word in mentions { #expect(message.contains(word), "\(message) does not mention \(word)") }
        } catch {
            Issue.record("expected invalidParameter, got \(error)")
        }
    }

    @Test func definitionsMadeInCodeAreCheckedToo() throws {
        #expect(throws: SyncClientError.self) { try SyncDefinition(syncName: "", syncType: .syncDown, datasets: ["p"]) }
        #expect(throws: SyncClientError.self) { try SyncDefinition(syncName: "x", syncType: .syncDown, datasets: ["."]) }
        let a = try SyncDefinition(syncName: "x", syncType: .syncDown, datasets: ["p"])
        #expect(throws: SyncClientError.self) { try SyncConfig(syncs: [a, a]) }
    }
}
