import Foundation
import SyncLedger

/// Admin operations beside the Cognito API, under the same SigV4 credentials — the admin
/// credential only, checked before the body is read:
///
/// - `POST /admin/redactions` `{"IdentityPoolId", "IdentityId", "DatasetName"?, "Key"?, "Reason"}`
///   — erase an identity's, a dataset's or one key's values across the history
///   (``Ledger/redact(pool:identity:dataset:key:reason:author:)``); the leader only (on a
///   cluster, the owner of the identity's shard: other nodes forward it). Answers
///   `{"Sequence", "ErasedValues", "EntriesRewritten", "Removals": [...]}`.
/// - `GET /admin/redactions?IdentityPoolId=P` — the pool's redactions, oldest first.
extension CognitoAPI {
    /// `POST /admin/redactions` (`Redact`) and `GET /admin/redactions` (`ListRedactions`), the
    /// router matched and the signature checked. Returns the answer and the identity involved.
    func handleAdmin(redact: Bool, _ context: APIRequest) async throws -> (WireResponse, String?) {
        let (query, request, credential) = (context.query, context.wire, try context.signer())
        let name = redact ? "Redact" : "ListRedactions"
        guard credential.scope == .admin else { throw WireError.notAuthorized("\(name) needs the developer (admin) credential") }
        if redact {
            if let leader = followedLeader {
                throw WireError.notAuthorized("this server is a read-only follower of \(leader); send Redact to the leader (the follower erases when it replicates the redaction)")
            }
            let json = try body(request)
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            let identity = try IdentityID(try string(json["IdentityId"], "IdentityId", required: true)!)
            let dataset = try string(json["DatasetName"], "DatasetName").map { try DatasetName($0) }
            let key = try string(json["Key"], "Key")
            let reason = try string(json["Reason"], "Reason", required: true)!
            // On a cluster, a redaction (its removals and its record) is a write of the identity's shard.
            if let cluster { try await requireOwner(of: cluster.shards.shard(pool: pool.rawValue, identity: identity.rawValue)) }
            // Copies merges made into identities of other shards are written by their owners:
            // listed as Remaining, to be redacted there (never a half-done redaction answered 503).
            let cluster = self.cluster
            let report = try await ledger.redact(pool: pool, identity: identity, dataset: dataset, key: key, reason: reason, author: caller(credential)) { survivor in
                guard let cluster else { return true }
                return cluster.ownership.owns(cluster.shards.shard(pool: pool.rawValue, identity: survivor.rawValue))
            }
            var w = JSONWriter()
            w.beginObject()
            w.member("Sequence", int: report.sequence)
            w.member("ErasedValues", int: report.erasedValues)
            w.member("EntriesRewritten", int: report.entriesRewritten)
            w.key("Removals"); w.beginArray()
            for sequence in report.redaction.removals { w.int(sequence) }
            w.endArray()
            // The copies identity merges made of the data, redacted with it (docs/redaction.md).
            w.key("Copies"); w.beginArray()
            for copy in report.copies {
                w.beginObject()
                w.member("Sequence", int: copy.sequence)
                w.member("IdentityId", copy.redaction.identity)
                w.member("DatasetName", copy.redaction.dataset)
                w.key("Removals"); w.beginArray()
                for sequence in copy.redaction.removals { w.int(sequence) }
                w.endArray()
                w.endObject()
            }
            w.endArray()
            // On a cluster: copies in identities another node writes. Each is redacted by the same
            // request naming the survivor as IdentityId and the copy as DatasetName (any node
            // forwards it to the owner).
            w.key("Remaining"); w.beginArray()
            for copy in report.remaining {
                w.beginObject()
                w.member("IdentityId", copy.identity.rawValue)
                w.member("DatasetName", copy.dataset.rawValue)
                w.endObject()
            }
            w.endArray()
            w.endObject()
            return (.json(w), identity.rawValue)
        } else {
            guard let text = query.first(where: { $0.0 == "IdentityPoolId" })?.1 else { throw WireError.invalidParameter("IdentityPoolId is required") }
            let pool = try IdentityPoolID(text)
            let ledger = self.ledger
            let list = try await offPool { try ledger.redactions(pool: pool) }
            var w = JSONWriter(capacity: 64 + list.count * 256)
            w.beginObject()
            w.key("Redactions"); w.beginArray()
            for (sequence, r) in list {
                w.beginObject()
                w.member("Sequence", int: sequence)
                w.member("IdentityId", r.identity)
                w.member("DatasetName", r.dataset)
                w.member("Key", r.key)
                w.member("MergedFrom", r.mergedFrom)
                w.member("Reason", r.reason)
                w.member("By", r.by)
                w.member("At", date: r.at.milliseconds)
                w.endObject()
            }
            w.endArray()
            w.endObject()
            return (.json(w), nil)
        }
    }
}
