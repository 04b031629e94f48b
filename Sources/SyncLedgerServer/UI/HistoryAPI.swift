import Foundation
import SyncLedger

/// The JSON the history browser (`/ui/`, see ``HistoryPage``) reads, under `/admin/ui/`: GET
/// only, the admin credential only (SigV4, checked before anything is read), every answer
/// bounded and never cached. Docs: docs/ui.md.
///
/// - `pools` — `{"Pools": [id]}`.
/// - `streams?pool=P[&identity=I][&after=I/D]` — up to 500 datasets in name order:
///   `{"Streams": [{"IdentityId", "DatasetName", "SyncCount"}], "More"}`.
/// - `entries?pool&identity&dataset[&from=N][&limit=1-500]` — a page of the timeline (default:
///   the last 100 entries): `{"Head", "From", "Entries": [{"SyncCount", "Sequence", "Time",
///   "Author", "Device", "Changes": [{"Op", "Key"}], "MoreChanges"}]}`.
/// - `record?pool&identity&dataset&key[&from=N][&limit=1-500]` — one record's changes.
/// - `diff?pool&identity&dataset&from=N[&to=N]` — the records that differ.
/// - `dataset?pool&identity&dataset[&syncCount=N]` — the records as of a sync count.
/// - `status[?pool&identity&dataset]` — the latest signed digest, and the dataset verified.
///
/// Values a redaction erased are sent as `"Erased": true` with no value; values are cut to
/// ``valueLimit`` characters (`"Truncated": true`).
extension CognitoAPI {
    /// The most entries, changes or records one answer holds.
    static let uiPageLimit = 500
    /// The most records a diff or a dataset answer holds.
    static let uiRecordLimit = 2000
    /// The most characters of one value sent.
    static let valueLimit = 2048
    /// The most keys listed for one timeline entry.
    static let uiKeysPerEntry = 50

    /// `GET /admin/ui/<view>`, the router matched and the signature checked. Returns the
    /// answer, the operation's name (`UI.<view>`) and the identity involved.
    func handleHistoryUI(_ view: String, _ context: APIRequest) async throws -> (WireResponse, String, String?) {
        let (query, credential) = (context.query, try context.signer())
        let name = Self.uiOperation(view)
        guard credential.scope == .admin else { throw WireError.notAuthorized("the history browser needs the developer (admin) credential; \(credential.accessKeyID) is an identity's") }
        let ledger = self.ledger
        var w = JSONWriter(capacity: 4096)
        switch view {
        case "pools":
            let pools = try await offPool { try ledger.browsePools() }
            w.beginObject(); w.key("Pools"); w.beginArray()
            for pool in pools { w.string(pool.rawValue) }
            w.endArray(); w.endObject()
        case "streams":
            let pool = try IdentityPoolID(try required(query, "pool"))
            let identity = try queryValue(query, "identity").map { try IdentityID($0) }
            var after: StreamName?
            if let text = queryValue(query, "after") {
                let parts = text.split(separator: "/", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { throw WireError.invalidParameter("after must be IDENTITY/DATASET") }
                after = try StreamName(pool: pool.rawValue, identity: parts[0], dataset: parts[1])
            }
            let limit = Self.uiPageLimit
            let start = after
            let list = try await offPool { try ledger.browseStreams(pool: pool, identity: identity, after: start, limit: limit + 1) }
            w.beginObject(); w.key("Streams"); w.beginArray()
            for item in list.prefix(limit) {
                w.beginObject()
                w.member("IdentityId", item.stream.identity.rawValue)
                w.member("DatasetName", item.stream.dataset.rawValue)
                w.member("SyncCount", int: item.syncCount)
                w.endObject()
            }
            w.endArray()
            w.member("More", bool: list.count > limit)
            w.endObject()
        case "entries":
            let stream = try uiStream(query)
            let limit = Int(try queryInt(query, "limit", range: 1...Int64(Self.uiPageLimit)) ?? 100)
            let from = try queryInt(query, "from", range: 1...Int64.max).map(UInt64.init)
            let (head, start, page) = try await offPool { () -> (UInt64, UInt64, [LogEntry]) in
                let head = try ledger.browseStreamHead(stream)
                let start = from ?? (head > UInt64(limit) ? head - UInt64(limit) + 1 : 1)
                return (head, start, try ledger.entries(in: stream, from: start, limit: limit))
            }
            w.beginObject()
            w.member("Head", int: head)
            w.member("From", int: start)
            w.key("Entries"); w.beginArray()
            for entry in page { writeTimelineEntry(entry, to: &w) }
            w.endArray(); w.endObject()
        case "record":
            let stream = try uiStream(query)
            let key = try required(query, "key")
            let limit = Int(try queryInt(query, "limit", range: 1...Int64(Self.uiPageLimit)) ?? 200)
            let from = UInt64(try queryInt(query, "from", range: 1...Int64.max) ?? 1)
            let (head, changes) = try await offPool { () -> (UInt64, [KeyChange]) in
                let head = try ledger.browseStreamHead(stream)
                var changes: [KeyChange] = []
                try ledger.history(of: key, in: stream, from: from) { change in
                    changes.append(change)
                    return changes.count <= limit
                }
                return (head, changes)
            }
            w.beginObject()
            w.member("Head", int: head)
            w.member("Key", key)
            w.key("Changes"); w.beginArray()
            for change in changes.prefix(limit) { writeKeyChange(change, to: &w) }
            w.endArray()
            w.member("More", bool: changes.count > limit)
            if changes.count > limit { w.member("Next", int: changes[limit].offset) }
            w.endObject()
        case "diff":
            try await writeDiff(query, to: &w)
        case "dataset":
            try await writeDatasetAsOf(query, to: &w)
        case "status":
            try await writeStatus(query, to: &w)
        default:
            throw WireError.unknownOperation("no history browser operation is GET \(context.wire.rawPath.prefix(200))")
        }
        return (Self.uiJSON(w), name, nil)
    }

    /// The views of `GET /admin/ui/<view>`.
    static let uiViews: Set<String> = ["pools", "streams", "entries", "record", "diff", "dataset", "status"]

    /// A view's operation name in logs and metrics, `UI.Unknown` for any other text (a path
    /// segment names it before the signature is checked: it must not mint metric labels).
    static func uiOperation(_ view: String) -> String { uiViews.contains(view) ? "UI." + view : "UI.Unknown" }

    /// A JSON answer of the history browser: never cached, never sniffed.
    static func uiJSON(_ writer: JSONWriter) -> WireResponse {
        var response = WireResponse.json(writer)
        response.headers += [("cache-control", "no-store"), ("x-content-type-options", "nosniff")]
        return response
    }

    func required(_ query: [(String, String)], _ name: String) throws -> String {
        guard let value = queryValue(query, name), !value.isEmpty else { throw WireError.invalidParameter("\(name) is required") }
        return value
    }

    /// The dataset named by `pool`, `identity` and `dataset`.
    func uiStream(_ query: [(String, String)]) throws -> StreamName {
        try StreamName(pool: try required(query, "pool"), identity: try required(query, "identity"), dataset: try required(query, "dataset"))
    }

    private func writeTimelineEntry(_ entry: LogEntry, to w: inout JSONWriter) {
        w.beginObject()
        w.member("SyncCount", int: entry.offset)
        w.member("Sequence", int: entry.sequence)
        w.member("Time", int: entry.time.milliseconds)
        w.member("Author", entry.author)
        w.member("Device", entry.device)
        w.key("Changes"); w.beginArray()
        for event in entry.events.prefix(Self.uiKeysPerEntry) {
            w.beginObject()
            w.member("Op", Self.opName(event))
            w.member("Key", event.key)
            w.endObject()
        }
        w.endArray()
        w.member("MoreChanges", int: max(0, entry.events.count - Self.uiKeysPerEntry))
        w.endObject()
    }

    private func writeKeyChange(_ change: KeyChange, to w: inout JSONWriter) {
        w.beginObject()
        w.member("SyncCount", int: change.offset)
        w.member("Sequence", int: change.sequence)
        w.member("Time", int: change.time.milliseconds)
        w.member("Author", change.author)
        w.member("Device", change.device)
        w.member("Op", Self.opName(change.event))
        if case .put(_, let value, _) = change.event { writeValue("Value", value, to: &w) }
        if case .erased = change.event { w.member("Erased", bool: true) }
        w.endObject()
    }

    static func opName(_ event: Event) -> String {
        switch event {
        case .put: "put"
        case .remove: "remove"
        case .erased: "erased"
        case .deleteDataset: "deleteDataset"
        }
    }

    /// `name` with the value cut to ``valueLimit`` characters (and `"<name>Truncated": true`).
    func writeValue(_ name: String, _ value: String, to w: inout JSONWriter) {
        if value.utf8.count <= Self.valueLimit {
            w.member(name, value)
        } else {
            w.member(name, String(value.prefix(Self.valueLimit)))
            w.member(name + "Truncated", bool: true)
        }
    }
}
