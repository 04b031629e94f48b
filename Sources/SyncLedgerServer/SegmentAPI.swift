import Foundation
import SyncLedger

/// The content type of segment bytes on the wire.
public let segmentContentType = "application/vnd.syncledger.segment"

/// The segment exchange, beside the Cognito API and under the same SigV4 credentials:
///
/// - `GET /segments/feed`, `GET /segments/digest`, `GET /segments/signed-digest` — replication
///   and audit, admin only (ReplicationAPI).
/// - `GET /segments/streams/{pool}/{identity}/{dataset}?after=OFFSET&maxBytes=N` — one stream
///   after an offset (its identity, at most 1 MiB a pull; or admin, at most 64 MiB).
/// - `POST /segments` — merge the posted segment with its entries kept as sent: replication,
///   admin only. Answers `{"Applied": n, "Skipped": m}`.
/// - `POST /segments?mode=offline&syncSessionToken=T[&partial=true][&deviceId=ID]` — a device's
///   offline changes (a stream segment built on its last synced state, at most 1,024 entries),
///   from that stream's identity or admin, with a sync session token from ListRecords as
///   UpdateRecords needs.
///   Only the changes are taken: the server writes its own entries through the same rules as
///   UpdateRecords, with the Cognito rule per record: 409 ResourceConflictException when a key
///   moved on (all or nothing), or with `partial=true` the other keys are written and the
///   conflicts listed. Answers `{"FastForward", "DatasetSyncCount", "Records": [...],
///   "Conflicts": [{"Key", "BaseSyncCount", "SyncCount"}]}`.
///
/// A posted segment is judged by its header before anything else is done with it: the
/// caller's scope, and how large it declares its entries to be, are checked before the
/// checksum is computed or a byte is decompressed.
extension CognitoAPI {
    /// The most a posted segment may unpack to: an identity's offline changes, and an admin's.
    static let maxOfflineSegmentBytes: UInt64 = 8 << 20
    static let maxReplicationSegmentBytes: UInt64 = 64 << 20
    /// The most a stream pull may hold: an identity's, and an admin's.
    static let maxIdentityPullBytes: UInt64 = 1 << 20
    static let maxAdminPullBytes: UInt64 = 64 << 20

    /// `GET /segments/feed`, `/segments/digest`, `/segments/signed-digest`: admin only.
    func replicationRead(_ what: String, _ context: APIRequest) async throws -> (WireResponse, String, String?) {
        let credential = try context.signer()
        guard credential.scope == .admin else {
            throw WireError.notAuthorized("\(what == "feed" ? "reading the change feed" : "the digest") needs the admin credential")
        }
        return try await handleReplication(what, query: context.query, request: context.wire, credential: credential)
    }

    /// `GET /segments/streams/{pool}/{identity}/{dataset}`: one stream after an offset.
    func streamSegment(_ context: APIRequest) async throws -> (WireResponse, String?) {
        let credential = try context.signer()
        let stream = try StreamName(pool: context.parameter("pool") ?? "", identity: context.parameter("identity") ?? "", dataset: context.parameter("dataset") ?? "")
        try Self.requireStream(stream, credential)
        let cap = credential.scope == .admin ? Self.maxAdminPullBytes : Self.maxIdentityPullBytes
        let maxBytes = Int(min(try Self.number(context.query, "maxBytes", default: 1 << 20), cap))
        let after = try Self.number(context.query, "after", default: 0)
        let ledger = self.ledger
        let (segment, last) = try await offPool { (try ledger.streamSegment(stream, after: after, maxBytes: maxBytes), try ledger.lastSequence) }
        let headers = [("x-syncledger-last-sequence", "\(last)")]
        guard let segment else { return (WireResponse(status: 204, headers: headers, body: []), stream.identity.rawValue) }
        let body = try await offPool { try segment.encoded() }
        return (WireResponse(status: 200, headers: [("content-type", segmentContentType)] + headers, body: body), stream.identity.rawValue)
    }

    /// `POST /segments`: a segment merged as it is (replication, admin only), or a device's
    /// offline changes (`mode=offline`). Returns the answer, the operation's name
    /// (`MergeSegment`, `MergeOfflineSegment`) and the identity involved.
    func postSegment(_ context: APIRequest) async throws -> (WireResponse, String, String?) {
        let credential = try context.signer()
        let isAdmin = credential.scope == .admin
        func value(_ name: String) -> String? { context.query.first(where: { $0.0 == name })?.1 }
        if let leader = followedLeader {
            throw WireError.notAuthorized("this server is a read-only follower of \(leader); post segments to the leader")
        }
        let offline = value("mode") == "offline"
        if let mode = value("mode"), !offline { throw WireError.invalidParameter("mode must be offline (or absent), not \"\(mode.prefix(40))\"") }
        if !offline, !isAdmin { throw WireError.notAuthorized("merging a segment as it is (replication) needs the admin credential") }
        let cap = offline && !isAdmin ? Self.maxOfflineSegmentBytes : Self.maxReplicationSegmentBytes
        let ledger = self.ledger
        let body = context.wire.body
        let segment = try await offPool {
            try ledger.decodeSegment(body, maxUncompressedSize: cap) { header in
                if offline {
                    guard case .stream(let stream) = header.scope else { throw WireError.invalidParameter("offline changes come as a stream segment, not a feed segment") }
                    try Self.requireStream(stream, credential)
                    guard header.count <= UInt64(Ledger.maxOfflineEntries) else {
                        throw WireError(LedgerError(.limitExceeded, "offline changes come in at most \(Ledger.maxOfflineEntries) entries, not \(header.count)", stream: stream))
                    }
                }
            }
        }
        guard offline, case .stream(let stream) = segment.scope else {
            let report = try await ledger.merge(segment)
            var w = JSONWriter()
            w.beginObject(); w.member("Applied", int: report.applied); w.member("Skipped", int: report.skipped); w.endObject()
            return (.json(w), "MergeSegment", nil)
        }
        let report = try await ledger.mergeOffline(segment, deviceID: value("deviceId"), caller: caller(credential),
                                                   sessionToken: value("syncSessionToken"), partial: value("partial") == "true")
        return (try .json(offlineReport(report)), "MergeOfflineSegment", stream.identity.rawValue)
    }

    /// Refuses an identity's credential for another identity's stream.
    @Sendable static func requireStream(_ stream: StreamName, _ credential: Credential) throws {
        if case .identity(let pool, let identity) = credential.scope, pool != stream.pool.rawValue || identity != stream.identity.rawValue {
            throw WireError.notAuthorized("access key \(credential.accessKeyID) may reach only identity \(identity) in pool \(pool)")
        }
    }

    /// A whole-number query parameter, `fallback` when absent.
    static func number(_ query: [(String, String)], _ name: String, default fallback: UInt64) throws -> UInt64 {
        guard let text = query.first(where: { $0.0 == name })?.1 else { return fallback }
        guard let n = UInt64(text) else { throw WireError.invalidParameter("\(name) must be an integer from 0 to \(UInt64.max), not \"\(text.prefix(40))\"") }
        return n
    }

    /// The offline merge's answer, in the shape the client decodes.
    private func offlineReport(_ report: OfflineMergeReport) -> CognitoSync.OfflineMergeResponse {
        CognitoSync.OfflineMergeResponse(
            fastForward: report.fastForward, datasetSyncCount: report.syncCount,
            records: report.applied.map { CognitoSync.Record(key: $0.key, value: $0.value, syncCount: $0.syncCount) },
            conflicts: report.conflicts.map { CognitoSync.OfflineMergeResponse.Conflict(key: $0.key, baseSyncCount: $0.expected, syncCount: $0.actual) })
    }
}
