import Foundation
import Synchronization
import Crypto
import LedgerStorage

/// Signed opaque tokens: sync session tokens and paging tokens. A token is
/// `base64url(payload) "." base64url(HMAC-SHA256(key, kind ‖ payload)[0..<16])`, with the key
/// kept in the ledger, so a token cannot be forged or altered without the data directory.
enum SignedToken {
    enum Kind: UInt8 {
        case session = 1
        case recordsPage = 2
        case datasetsPage = 3
        /// ListIdentityPoolUsage's NextToken.
        case poolsPage = 4
        case identityCredential = 5
        case identitySecret = 6
        case identitiesPage = 7
        case streamPayload = 8
        /// ListIdentityPools' NextToken (a kind of its own: a usage token never opens it).
        case identityPoolsPage = 9
    }

    static func sign(_ payload: [UInt8], kind: Kind, key: SymmetricKey) -> String {
        var text = Base64URL.encode(payload)
        text.append(UInt8(ascii: "."))
        text += Base64URL.encode(mac(payload, kind: kind, key: key))
        return String(decoding: text, as: UTF8.self)
    }

    /// The payload of a token this key signed for `kind`, or nil.
    static func open(_ token: String, kind: Kind, key: SymmetricKey) -> [UInt8]? {
        let bytes = Array(token.utf8)
        guard let dot = bytes.firstIndex(of: UInt8(ascii: ".")),
              let payload = Base64URL.decode(bytes[..<dot]),
              let tag = Base64URL.decode(bytes[(dot + 1)...]), tag.count == 16 else { return nil }
        let expected = mac(payload, kind: kind, key: key)
        // Constant-time comparison.
        var difference: UInt8 = 0
        for (a, b) in zip(expected, tag) { difference |= a ^ b }
        return difference == 0 ? payload : nil
    }

    private static func mac(_ payload: [UInt8], kind: Kind, key: SymmetricKey) -> [UInt8] {
        var hmac = HMAC<SHA256>(key: key)
        hmac.update(data: [kind.rawValue])
        hmac.update(data: payload)
        return Array(hmac.finalize().prefix(16))
    }
}

extension Ledger {
    /// Issues a sync session token for `stream`, valid for ``LedgerOptions/sessionLifetime``,
    /// and counts the session for its pool.
    func issueSessionToken(for stream: StreamName) -> String {
        let expires = options.clock().adding(options.sessionLifetime).milliseconds
        var w = ByteWriter(capacity: 96)
        w.byte(1)
        w.signed(expires)
        w.fixed64(UInt64.random(in: 0...UInt64.max))  // one getrandom call, not eight
        w.raw(stream.key)
        countSession(pool: stream.pool)
        return SignedToken.sign(w.bytes, kind: .session, key: tokenKey)
    }

    /// Checks that `token` is a live session token this ledger issued for `stream`.
    ///
    /// - Throws: ``LedgerError`` `.invalidSessionToken` saying whether it is missing, forged,
    ///   for another identity or dataset, or expired.
    func checkSessionToken(_ token: String?, for stream: StreamName) throws(LedgerError) {
        guard let token, !token.isEmpty else {
            throw LedgerError(.invalidSessionToken, "a sync session token is required; get one from listRecords", stream: stream)
        }
        guard let payload = SignedToken.open(token, kind: .session, key: tokenKey), payload.count > 17, payload[0] == 1 else {
            throw LedgerError(.invalidSessionToken, "the sync session token is not one this server issued", stream: stream)
        }
        var r = ByteReader(payload, position: 1)
        guard let expires = try? r.signed(), (try? r.raw(8)) != nil else {
            throw LedgerError(.invalidSessionToken, "the sync session token is malformed", stream: stream)
        }
        guard Array(payload[r.position...]) == stream.key else {
            throw LedgerError(.invalidSessionToken, "the sync session token belongs to another identity or dataset", stream: stream)
        }
        guard options.clock().milliseconds < expires else {
            throw LedgerError(.invalidSessionToken, "the sync session token expired at \(Timestamp(milliseconds: expires))", stream: stream)
        }
    }

    /// Counts one session in memory; the counts reach disk with every 64th session per pool and
    /// on ``close()``.
    func countSession(pool: IdentityPoolID) {
        let due = pendingSessions.withLock { pending -> Bool in
            pending[pool.rawValue, default: 0] += 1
            return pending[pool.rawValue]! >= 64
        }
        if due { flushSessionCounts(wait: false) }
    }

    /// Adds the pending session counts to the stored ones. The counts leave memory inside the
    /// writer's transaction, so a reader on the writer thread (``poolUsage(_:)``) sees each
    /// session exactly once. A group that is run again (a job beside it failed, the map grew)
    /// runs this job again: it writes the counts it took the first time, so none are lost or
    /// counted twice; if its group fails for good, they go back to the pending counts.
    func flushSessionCounts(wait: Bool) {
        let schema = self.schema
        let pendingSessions = self.pendingSessions
        let taken = Mutex<[String: UInt64]?>(nil)
        let job: @Sendable (LedgerStorage.Transaction) throws -> Void = { txn in
            let counts = taken.withLock { once -> [String: UInt64] in
                if let once { return once }
                let drained = pendingSessions.withLock { pending -> [String: UInt64] in
                    defer { pending.removeAll() }
                    return pending
                }
                once = drained
                return drained
            }
            for (pool, count) in counts {
                let key = Array(pool.utf8)
                let stored = try txn.get(schema.sessions, key: key)?.bigEndianUInt64() ?? 0
                try txn.put(schema.sessions, key: key, value: .bigEndian(stored + count))
            }
        }
        let restore: @Sendable ((any Error)?) -> Void = { error in
            guard error != nil, let counts = taken.withLock({ $0 }) else { return }
            pendingSessions.withLock { pending in
                for (pool, count) in counts { pending[pool, default: 0] += count }
            }
        }
        if wait, !writer.isWriterThread {
            let failure: (any Error)?
            do { try writer.performBlocking(job); failure = nil } catch { failure = error }
            restore(failure)
        } else {
            writer.submit(.init(run: job, finish: restore))
        }
    }

    /// Sessions counted for `pool`: stored plus pending, read on the writer thread.
    func sessionCount(pool: IdentityPoolID) async throws -> UInt64 {
        let schema = self.schema
        let pendingSessions = self.pendingSessions
        return try await write { txn in
            let stored = try txn.get(schema.sessions, key: Array(pool.rawValue.utf8))?.bigEndianUInt64() ?? 0
            return stored + pendingSessions.withLock { $0[pool.rawValue] ?? 0 }
        }
    }
}
