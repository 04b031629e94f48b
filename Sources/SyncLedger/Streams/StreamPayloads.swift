import Foundation
import LedgerStorage

/// How stream records too large to travel inline name their records instead — Cognito's
/// `payloadType` `S3Url`. SyncLedger has no S3: the URL is the server's own
/// (`GET /streams/payload/<token>`), signed and expiring like an S3 presigned URL, and answers
/// the `kinesisSyncRecords` array the record would have carried.
public struct StreamPayloadReference: Sendable {
    /// Records whose JSON is longer than this many bytes go by reference (Cognito: 1 MB).
    public var inlineLimit: Int
    /// The URL of a record's payload: pool, the record's `sequence`, whether it is a bulk record.
    public let url: @Sendable (IdentityPoolID, UInt64, Bool) -> String

    /// A reference making URLs with `url`.
    public init(inlineLimit: Int = 1_048_576, url: @escaping @Sendable (IdentityPoolID, UInt64, Bool) -> String) {
        self.inlineLimit = inlineLimit
        self.url = url
    }
}

extension Ledger {
    /// The longest payload token accepted (a real one is under 60 characters).
    public static let maxStreamPayloadTokenLength = 256

    /// A token naming the payload of the stream record at feed position `sequence` (a bulk
    /// record: the dataset's state as of that entry), valid until `expires`: HMAC-signed with the
    /// ledger's token key, so it cannot be forged or altered without the data directory.
    public func streamPayloadToken(sequence: UInt64, bulk: Bool, expires: Timestamp) -> String {
        var w = ByteWriter()
        w.byte(bulk ? 1 : 0)
        w.varint(sequence)
        w.signed(expires.milliseconds)
        return SignedToken.sign(w.bytes, kind: .streamPayload, key: tokenKey)
    }

    /// The `kinesisSyncRecords` JSON array a payload token names: the records of the entry at
    /// its sequence, or for a bulk record the live records of that entry's dataset as of it
    /// (rebuilt by replaying the dataset's stream up to it, so it costs the stream's length).
    ///
    /// - Throws: `.notAuthorized` for a token this ledger did not sign or one past its expiry;
    ///   `.notFound` when the ledger has no entry at the sequence.
    public func streamPayload(token: String) throws -> [UInt8] {
        guard token.utf8.count <= Self.maxStreamPayloadTokenLength,
              let payload = SignedToken.open(token, kind: .streamPayload, key: tokenKey) else {
            throw LedgerError(.notAuthorized, "the stream payload URL is not one this server signed")
        }
        var r = ByteReader(payload)
        guard let flag = try? r.byte(), flag <= 1, let sequence = try? r.varint(), let expires = try? r.signed(), r.remaining == 0 else {
            throw LedgerError(.notAuthorized, "the stream payload URL is not one this server signed")
        }
        guard options.clock().milliseconds <= expires else {
            throw LedgerError(.notAuthorized, "the stream payload URL expired at \(Timestamp(milliseconds: expires))")
        }
        var found: LogEntry?
        try forEachCommit(after: sequence &- 1) { entry in
            if entry.sequence == sequence { found = entry }
            return false
        }
        guard let entry = found, sequence > 0 else { throw LedgerError(.notFound, "the ledger has no entry at sequence \(sequence)") }
        if flag == 0 { return StreamRecord.serialize(StreamRecord.items(entry).items) }
        let view = try dataset(entry.stream, asOfSyncCount: entry.offset)
        let records = view.records.map { (key: $0.key.string, state: $0.value) }.sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
        return StreamRecord.serialize(StreamRecord.items(records))
    }
}
