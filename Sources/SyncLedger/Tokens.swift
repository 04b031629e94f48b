import Foundation
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
        case poolsPage = 4
    }

    static func sign(_ payload: [UInt8], kind: Kind, key: SymmetricKey) -> String {
        "\(base64url(payload)).\(base64url(mac(payload, kind: kind, key: key)))"
    }

    /// The payload of a token this key signed for `kind`, or nil.
    static func open(_ token: String, kind: Kind, key: SymmetricKey) -> [UInt8]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let payload = unbase64url(parts[0]), let tag = unbase64url(parts[1]), tag.count == 16 else { return nil }
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

    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func unbase64url(_ text: Substring) -> [UInt8]? {
        guard text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) || $0 == 0x2d || $0 == 0x5f }) else { return nil }
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.utf8.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s).map { Array($0) }
    }
}

extension Ledger {
    /// Issues a sync session token for `stream`, valid for ``LedgerOptions/sessionLifetime``,
    /// and counts the session for its pool.
    func issueSessionToken(for stream: StreamName) -> String {
        let now = options.clock()
        let lifetime = options.sessionLifetime.components
        let expires = now.milliseconds + lifetime.seconds * 1000 + lifetime.attoseconds / 1_000_000_000_000_000
        var w = ByteWriter(capacity: 96)
        w.byte(1)
        w.signed(expires)
        w.raw((0..<8).map { _ in UInt8.random(in: 0...255) })
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
    /// session exactly once.
    func flushSessionCounts(wait: Bool) {
        let schema = self.schema
        let pendingSessions = self.pendingSessions
        let job: @Sendable (LedgerStorage.Transaction) throws -> Void = { txn in
            let counts = pendingSessions.withLock { pending -> [String: UInt64] in
                defer { pending.removeAll() }
                return pending
            }
            for (pool, count) in counts {
                let key = Array(pool.utf8)
                let stored = try txn.get(schema.sessions, key: key)?.bigEndianUInt64() ?? 0
                try txn.put(schema.sessions, key: key, value: .bigEndian(stored + count))
            }
        }
        if wait {
            _ = try? writer.performBlocking(job)
        } else {
            writer.submit(.init(run: job, finish: { _ in }))
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
