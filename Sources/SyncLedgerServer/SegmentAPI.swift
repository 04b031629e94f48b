import Foundation
import SyncLedger

/// The content type of segment bytes on the wire.
public let segmentContentType = "application/vnd.syncledger.segment"

/// The segment exchange, beside the Cognito API and under the same SigV4 credentials:
///
/// - `GET /segments/feed?after=SEQ&maxBytes=N` — the change feed after a commit sequence
///   (admin only). 200 with a segment, or 204 when there is nothing after `after`. The header
///   `x-syncledger-last-sequence` gives the ledger's latest sequence either way.
/// - `GET /segments/streams/{pool}/{identity}/{dataset}?after=OFFSET&maxBytes=N` — one stream
///   after an offset (its identity or admin).
/// - `POST /segments` — merge the posted segment (feed segments: admin; stream segments: that
///   stream's identity or admin). Answers `{"Applied": n, "Skipped": m}`.
/// - `POST /segments?mode=offline[&partial=true][&deviceId=ID]` — merge a device's offline
///   changes (a stream segment built on its last synced state) with the Cognito rule per
///   record: 409 ResourceConflictException when a key moved on (all or nothing), or with
///   `partial=true` the other keys are written and the conflicts listed. Answers
///   `{"FastForward", "DatasetSyncCount", "Records": [...], "Conflicts": [{"Key",
///   "BaseSyncCount", "SyncCount"}]}`.
/// - `GET /segments/digest` — `{"Digest", "Sequence"}` of this ledger (admin only).
extension CognitoAPI {
    func handleSegments(_ segments: [String], query: [(String, String)], request: WireRequest, credential: Credential) async throws -> (WireResponse, String, String?) {
        func requireAdmin(_ what: String) throws {
            guard case .admin = credential.scope else { throw WireError.notAuthorized("\(what) needs the admin credential") }
        }
        func requireStream(_ stream: StreamName) throws {
            if case .identity(let pool, let identity) = credential.scope, pool != stream.pool.rawValue || identity != stream.identity.rawValue {
                throw WireError.notAuthorized("access key \(credential.accessKeyID) may reach only identity \(identity) in pool \(pool)")
            }
        }
        func number(_ name: String, default value: UInt64) throws -> UInt64 {
            guard let text = query.first(where: { $0.0 == name })?.1 else { return value }
            guard let n = UInt64(text) else { throw WireError.invalidParameter("\(name) must be a non-negative integer, not \"\(text.prefix(40))\"") }
            return n
        }
        let maxBytes = Int(min(try number("maxBytes", default: 1 << 20), 64 << 20))
        let last = try ledger.lastSequence
        let sourceHeaders = [("x-syncledger-last-sequence", "\(last)"), ("x-syncledger-ledger-id", ledger.id)]
        func segmentResponse(_ segment: Segment?) throws -> WireResponse {
            guard let segment else { return WireResponse(status: 204, headers: sourceHeaders, body: []) }
            return WireResponse(status: 200, headers: [("content-type", segmentContentType)] + sourceHeaders, body: try segment.encoded())
        }
        switch (request.method, segments.count) {
        case ("GET", 2) where segments[1] == "feed" || segments[1] == "digest":
            try requireAdmin(segments[1] == "feed" ? "reading the change feed" : "the digest")
            return try await handleReplication(segments[1], query: query, request: request)
        case ("GET", 5) where segments[1] == "streams":
            let stream = try StreamName(pool: segments[2], identity: segments[3], dataset: segments[4])
            try requireStream(stream)
            let segment = try ledger.streamSegment(stream, after: try number("after", default: 0), maxBytes: maxBytes)
            return (try segmentResponse(segment), "GetStreamSegment", stream.identity.rawValue)
        case ("POST", 1):
            if let leader = followedLeader {
                throw WireError.notAuthorized("this server is a read-only follower of \(leader); post segments to the leader")
            }
            let segment = try ledger.decodeSegment(request.body)
            if query.first(where: { $0.0 == "mode" })?.1 == "offline" {
                guard case .stream(let stream) = segment.scope else { throw WireError.invalidParameter("offline changes come as a stream segment") }
                try requireStream(stream)
                let partial = query.first(where: { $0.0 == "partial" })?.1 == "true"
                let device = query.first(where: { $0.0 == "deviceId" })?.1 ?? {
                    if case .identity(_, let identity) = credential.scope { return identity }
                    return "admin:\(credential.accessKeyID)"
                }()
                let report = try await ledger.mergeOffline(segment, deviceID: device, caller: caller(credential), partial: partial)
                var w = JSONWriter()
                w.beginObject()
                w.member("FastForward", bool: report.fastForward)
                w.member("DatasetSyncCount", int: report.syncCount)
                w.key("Records"); w.beginArray()
                for record in report.applied {
                    w.beginObject()
                    w.member("Key", record.key)
                    w.member("Value", record.value)
                    w.member("SyncCount", int: record.syncCount)
                    w.endObject()
                }
                w.endArray()
                w.key("Conflicts"); w.beginArray()
                for c in report.conflicts {
                    w.beginObject(); w.member("Key", c.key); w.member("BaseSyncCount", int: c.expected); w.member("SyncCount", int: c.actual); w.endObject()
                }
                w.endArray()
                w.endObject()
                return (.json(w), "MergeOfflineSegment", stream.identity.rawValue)
            }
            switch segment.scope {
            case .feed: try requireAdmin("merging a feed segment")
            case .stream(let stream): try requireStream(stream)
            }
            let report = try await ledger.merge(segment)
            var w = JSONWriter()
            w.beginObject(); w.member("Applied", int: report.applied); w.member("Skipped", int: report.skipped); w.endObject()
            return (.json(w), "MergeSegment", nil)
        default:
            throw WireError.unknownOperation("no segment operation is \(request.method) \(request.rawPath)")
        }
    }
}
