import Foundation
import SyncLedger

/// The leader's side of replication, for admin credentials only (the caller checked):
///
/// - `GET /segments/feed?after=SEQ&maxBytes=N` — the change feed after a commit sequence. 200
///   with a segment, or 204 when there is nothing after `after`. The header
///   `x-syncledger-last-sequence` gives the ledger's latest sequence either way, and
///   `x-syncledger-ledger-id` the ledger's id.
/// - `GET /segments/digest` — `{"Digest", "Sequence"}` of this ledger.
extension CognitoAPI {
    func handleReplication(_ what: String, query: [(String, String)], request: WireRequest) async throws -> (WireResponse, String, String?) {
        func number(_ name: String, default value: UInt64) throws -> UInt64 {
            guard let text = query.first(where: { $0.0 == name })?.1 else { return value }
            guard let n = UInt64(text) else { throw WireError.invalidParameter("\(name) must be a non-negative integer, not \"\(text.prefix(40))\"") }
            return n
        }
        let last = try ledger.lastSequence
        switch what {
        case "feed":
            let maxBytes = Int(min(try number("maxBytes", default: 1 << 20), 64 << 20))
            let headers = [("x-syncledger-last-sequence", "\(last)"), ("x-syncledger-ledger-id", ledger.id)]
            guard let segment = try ledger.feedSegment(after: try number("after", default: 0), maxBytes: maxBytes) else {
                return (WireResponse(status: 204, headers: headers, body: []), "GetFeedSegment", nil)
            }
            return (WireResponse(status: 200, headers: [("content-type", segmentContentType)] + headers, body: try segment.encoded()), "GetFeedSegment", nil)
        default:
            var w = JSONWriter()
            w.beginObject()
            w.member("Digest", try ledger.digest())
            w.member("Sequence", int: last)
            if let replication { replication.write(&w) }
            w.endObject()
            return (.json(w), "GetDigest", nil)
        }
    }
}
