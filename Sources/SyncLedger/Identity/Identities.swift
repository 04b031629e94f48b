import Foundation
import Crypto
import LedgerStorage
import Synchronization

/// A Cognito Identity identity of a pool: records `identity/<id>` of the pool's `identities`
/// system stream, so each one's creation and deletion is a log entry.
public struct IdentityRecord: Sendable, Hashable, Codable {
    /// The identity id, `<region>:<uuid>`.
    public var id: String
    /// The login providers linked to it (none for an unauthenticated identity).
    public var logins: [String]
    /// When it was created.
    public var created: Timestamp
    /// When it last changed.
    public var modified: Timestamp
    /// The identity it was merged into, when it was (it is disabled then).
    public var mergedInto: String?
    /// Why it is disabled (merged, or `syncledger identities disable`), nil while enabled.
    /// A disabled identity gets no credentials; its datasets and history stay in the log.
    public var disabled: String?

    /// Whether it may sign in.
    public var isEnabled: Bool { disabled == nil }

    /// A record.
    public init(id: String, logins: [String], created: Timestamp, modified: Timestamp, mergedInto: String? = nil, disabled: String? = nil) {
        self.id = id
        self.logins = logins
        self.created = created
        self.modified = modified
        self.mergedInto = mergedInto
        self.disabled = disabled
    }
}

/// Temporary credentials for one identity (GetCredentialsForIdentity).
public struct IdentityCredentials: Sendable, Hashable {
    /// `ASIA…`.
    public let accessKeyID: String
    /// The secret key.
    public let secretKey: String
    /// The session token requests must carry.
    public let sessionToken: String
    /// When they stop working.
    public let expiration: Timestamp
}

extension Ledger {
    static func identitiesStream(_ pool: IdentityPoolID) -> StreamName { systemStream(pool, "identities") }

    /// The installation-wide index identity id → pool (an identity id alone names no pool):
    /// records of the stream `_syncledger:0/_syncledger:0/identity-index`.
    static let identityIndexStream = StreamName(pool: try! IdentityPoolID("_syncledger:0"), identity: systemIdentity,
                                                dataset: try! DatasetName("identity-index"))

    /// The pool of identity `id`, nil when it is unknown (or deleted).
    public func poolOfIdentity(_ id: String) throws -> IdentityPoolID? {
        try recordValue(Self.identityIndexStream, key: id).map { try IdentityPoolID($0) }
    }

    /// The identity pool `id`, or `.notFound`.
    func requireIdentityPool(_ id: IdentityPoolID) throws -> IdentityPoolDefinition {
        guard let pool = try identityPool(id) else { throw LedgerError(.notFound, "identity pool \(id) does not exist") }
        return pool
    }

    /// GetId without logins: a new unauthenticated identity of the pool.
    /// - Throws: `.notFound` for an unknown pool; `.notAuthorized` when the pool does not allow
    ///   unauthenticated identities; `.limitExceeded` past ``Limits/maxIdentitiesPerPool``.
    public func newUnauthenticatedIdentity(pool: IdentityPoolID) async throws -> IdentityRecord {
        let definition = try requireIdentityPool(pool)
        guard definition.allowUnauthenticatedIdentities else {
            throw LedgerError(.notAuthorized, "identity pool \(pool) does not allow unauthenticated identities")
        }
        let region = pool.rawValue.split(separator: ":").first.map(String.init) ?? "us-east-1"
        let now = options.clock()
        let record = IdentityRecord(id: "\(region):\(UUID().uuidString.lowercased())", logins: [], created: now, modified: now)
        _ = try IdentityID(record.id)
        let limit = options.limits.maxIdentitiesPerPool
        let stream = Self.identitiesStream(pool)
        try await write(on: stream) { [self] txn in
            // The identity and its index entry in one transaction.
            var draft = try self.openEntry(txn, on: stream)
            let count = draft.view.dataset?.recordCount ?? 0
            guard count < UInt64(limit) else {
                throw LedgerError(.limitExceeded, "identity pool \(pool) has \(count) identities; the limit is \(limit)")
            }
            try self.append(txn, &draft, author: "cognito-identity", events: [.put(key: "identity/\(record.id)", value: Self.json(record), deviceModified: nil)])
            _ = try self.append(txn, to: Self.identityIndexStream, author: "cognito-identity", events: [.put(key: record.id, value: pool.rawValue, deviceModified: nil)])
        }
        return record
    }

    /// The identity `id` of `pool`, nil when there is none (or it was deleted).
    public func identity(pool: IdentityPoolID, id: String) throws -> IdentityRecord? {
        let stream = Self.identitiesStream(pool)
        return try recordValue(stream, key: "identity/\(id)").map { try Self.decode(IdentityRecord.self, $0, stream: stream) }
    }

    /// The most identity records one page of ``identities(pool:maxResults:nextToken:hideDisabled:)``
    /// reads: with `hideDisabled`, a run of disabled identities ends a page early (with a
    /// NextToken) rather than making one call read the whole pool.
    public static let identitiesPageScanLimit = 1000

    /// The identities of `pool` after `nextToken`, at most `maxResults` (1-60), in id order.
    /// With `hideDisabled`, disabled (merged) identities are left out.
    ///
    /// One seek to the key after the token's identity, then one page read: the cost follows
    /// the page, not the pool. A page may hold fewer than `maxResults` (with `hideDisabled`,
    /// after ``identitiesPageScanLimit`` records read); a NextToken means there may be more.
    /// - Throws: `.notFound` for an unknown pool; `.invalidParameter` for a NextToken this
    ///   server did not issue, that was altered, or that belongs to another pool.
    public func identities(pool: IdentityPoolID, maxResults: Int, nextToken: String?, hideDisabled: Bool = false) throws -> (identities: [IdentityRecord], nextToken: String?) {
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "MaxResults must be at least 1, not \(maxResults)") }
        _ = try requireIdentityPool(pool)
        var after: String?
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .identitiesPage, key: tokenKey) else {
                throw LedgerError(.invalidParameter, "NextToken is not one this server issued for ListIdentities (altered, or from another call)")
            }
            let text = String(decoding: payload, as: UTF8.self)
            guard text.hasPrefix(pool.rawValue + "\u{0}") else { throw LedgerError(.invalidParameter, "NextToken belongs to another identity pool, not \(pool)") }
            let id = String(text.dropFirst(pool.rawValue.utf8.count + 1))
            guard (try? IdentityID(id)) != nil else { throw LedgerError(.invalidParameter, "NextToken does not name an identity") }
            after = "identity/\(id)"
        }
        let stream = Self.identitiesStream(pool)
        return try read { [self] txn in
            guard let head = try head(txn, stream) else { return ([], nil) }
            let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id)
            var page: [IdentityRecord] = []
            var last: String?
            var more = false
            var scanned = 0
            try view.forEachStoredRecord(prefix: "identity/", after: after) { _, value in
                guard page.count < maxResults, scanned < Self.identitiesPageScanLimit else {
                    more = true
                    return false
                }
                scanned += 1
                let record = try Self.decode(IdentityRecord.self, value, stream: stream)
                last = record.id
                if !hideDisabled || record.isEnabled { page.append(record) }
                return true
            }
            let next = more ? last.map { SignedToken.sign(Array("\(pool)\u{0}\($0)".utf8), kind: .identitiesPage, key: tokenKey) } : nil
            return (page, next)
        }
    }

    /// How many records the pool's identities stream holds: what ``Limits/maxIdentitiesPerPool``
    /// bounds (0 for a pool without identities). One read.
    public func identityRecordCount(pool: IdentityPoolID) throws -> UInt64 {
        let stream = Self.identitiesStream(pool)
        return try read { txn in
            guard let head = try head(txn, stream) else { return 0 }
            return try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id).dataset?.recordCount ?? 0
        }
    }

    /// Deletes identities (DeleteIdentities): their temporary credentials stop working at
    /// once; their datasets and history stay in the log.
    /// - Returns: the ids that were not found.
    public func deleteIdentities(pool: IdentityPoolID, ids: [String], caller: String) async throws -> [String] {
        let stream = Self.identitiesStream(pool)
        return try await write(on: stream) { [self] txn in
            let view = try StoredDatasetView(txn: txn, schema: self.schema, stream: stream, streamID: try self.head(txn, stream)?.id ?? 0)
            var removed: [String] = []
            var gone: [String] = []
            for id in Set(ids).sorted() {
                if try view.record("identity/\(id)")?.value != nil { removed.append(id) } else { gone.append(id) }
            }
            guard !removed.isEmpty else { return gone }
            _ = try self.append(txn, to: stream, author: caller, events: removed.map { .remove(key: "identity/\($0)", deviceModified: nil) })
            _ = try self.append(txn, to: Self.identityIndexStream, author: caller, events: removed.map { .remove(key: $0, deviceModified: nil) })
            return gone
        }
    }

    // MARK: Temporary credentials

    /// Temporary credentials for an identity (GetCredentialsForIdentity), valid for
    /// `lifetime`: an unauthenticated one, one this server's OpenID token proves
    /// (`openIdToken`), or one ``signIn(pool:identity:proven:logins:caller:)`` came to
    /// (`signedIn`).
    ///
    /// Nothing is stored: the session token carries the access key id, pool, identity and
    /// expiry under the server's HMAC key, and the secret is an HMAC of the token. So a caller
    /// who needs no signature costs the server no write and no storage.
    /// - Throws: `.notFound` for an unknown pool or identity; `.notAuthorized` for an identity
    ///   with logins (they need their logins) or a pool that no longer allows unauthenticated
    ///   identities.
    public func credentialsForIdentity(pool: IdentityPoolID, id: String, lifetime: Duration = Credential.defaultTemporaryLifetime,
                                       openIdToken: String? = nil, signedIn: Bool = false) async throws -> IdentityCredentials {
        let definition = try requireIdentityPool(pool)
        guard let record = try identity(pool: pool, id: id) else {
            throw LedgerError(.notFound, "identity \(id) does not exist in identity pool \(pool)")
        }
        guard record.isEnabled else {
            throw LedgerError(.notAuthorized, "identity \(id) is disabled (\(record.disabled ?? "")); sign in with its logins to get the identity it was merged into")
        }
        if signedIn {
            // ``signIn(pool:identity:proven:logins:caller:)`` proved it with its logins.
        } else if let openIdToken {
            // An authenticated identity proves itself with a token this server signed for it.
            guard let vouched = try await verifyOpenIdToken(openIdToken), vouched.pool == pool, vouched.identity == id else {
                throw LedgerError(.notAuthorized, "the \(Self.openIdProvider) token is not valid for identity \(id): forged, expired, or for another identity")
            }
        } else {
            guard record.logins.isEmpty else { throw LedgerError(.notAuthorized, "identity \(id) is authenticated: send its Logins") }
            guard definition.allowUnauthenticatedIdentities else {
                throw LedgerError(.notAuthorized, "identity pool \(pool) does not allow unauthenticated access")
            }
        }
        let expiration = options.clock().adding(lifetime)
        let upper = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        var rng = SystemRandomNumberGenerator()
        let accessKeyID = "ASIA" + String((0..<16).map { _ in upper.randomElement(using: &rng)! })
        var payload = ByteWriter(capacity: 96)
        payload.byte(1)
        payload.string(accessKeyID)
        payload.signed(expiration.milliseconds)
        payload.string(pool.rawValue)
        payload.string(id)
        let token = SignedToken.sign(payload.bytes, kind: .identityCredential, key: tokenKey)
        return IdentityCredentials(accessKeyID: accessKeyID, secretKey: identitySecret(token: token), sessionToken: token, expiration: expiration)
    }

    /// The secret of a temporary credential: an HMAC of its session token.
    private func identitySecret(token: String) -> String {
        String(SignedToken.sign(Array(token.utf8), kind: .identitySecret, key: tokenKey).split(separator: ".").last ?? "")
    }

    /// The credential behind a temporary access key and its session token, when this server
    /// issued them, they have not expired, and the identity still exists and is enabled; nil
    /// otherwise (so a merge or `identities disable` ends them at once).
    public func temporaryCredential(accessKeyID: String, sessionToken: String?) throws -> Credential? {
        guard accessKeyID.hasPrefix("ASIA"), let sessionToken, sessionToken.utf8.count <= 2048,
              let payload = SignedToken.open(sessionToken, kind: .identityCredential, key: tokenKey) else { return nil }
        var r = ByteReader(payload[...])
        guard let version = try? r.byte(), version == 1, let key = try? r.string(), key == accessKeyID,
              let expires = try? r.signed(), let poolText = try? r.string(), let id = try? r.string(),
              (try? r.expectEnd()) != nil, let pool = try? IdentityPoolID(poolText) else { return nil }
        let expiration = Timestamp(milliseconds: expires)
        guard options.clock() < expiration, try identityPool(pool) != nil, try identity(pool: pool, id: id)?.isEnabled == true else { return nil }
        return Credential(accessKeyID: accessKeyID, secretAccessKey: identitySecret(token: sessionToken), sessionToken: sessionToken,
                          scope: .identity(pool: pool.rawValue, identity: id), expires: expiration)
    }
}
