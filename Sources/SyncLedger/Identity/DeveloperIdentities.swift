import Foundation
import Crypto
import LedgerStorage
import Synchronization

/// Developer-authenticated identities: the app's backend vouches for a user
/// (GetOpenIdTokenForDeveloperIdentity, admin), the device trades the OpenID token this server
/// signs for credentials (GetCredentialsForIdentity with
/// `Logins["cognito-identity.amazonaws.com"]`).
///
/// The links are records of the pool's `identities` stream (see ``Login`` and Logins.swift).
extension Ledger {
    /// The login provider name of this server's own OpenID tokens, as in Cognito.
    public static let openIdProvider = "cognito-identity.amazonaws.com"

    /// The issuer (`iss`) of this server's OpenID tokens.
    public static let openIdIssuer = "https://cognito-identity.amazonaws.com"

    func identitySigningKey() throws -> P256.Signing.PrivateKey {
        try P256.Signing.PrivateKey(rawRepresentation: try secrets.identitySigningKey())
    }

    /// The key id (`kid`) of the signing key: 16 hex digits of SHA-256 of its public key.
    func identityKeyID(_ key: P256.Signing.PrivateKey) -> String {
        Hex.encode(SHA256.hash(data: key.publicKey.rawRepresentation).prefix(8))
    }

    /// The key that signs new OpenID tokens and its id: the cluster's current generation
    /// (``LedgerOptions/identityKeyring``), or this node's own key.
    func openIdSigningKey() throws -> (kid: String, key: P256.Signing.PrivateKey) {
        if let keyring = options.identityKeyring { return keyring.signing }
        let key = try identitySigningKey()
        return (identityKeyID(key), key)
    }

    /// The public keys that verify this server's OpenID tokens, as a JWKS document: on a
    /// cluster the current generation's and, during a rotation's overlap, the previous one's
    /// (the same document on every node).
    public func openIdKeys() throws -> [String: Any] {
        var keys: [(kid: String, key: P256.Signing.PublicKey)] = []
        if let keyring = options.identityKeyring {
            keys = keyring.listed(at: options.clock()).map { (keyring.keyID($0), keyring.key($0).publicKey) }
        } else {
            let key = try identitySigningKey()
            keys = [(identityKeyID(key), key.publicKey)]
        }
        return ["keys": keys.map { kid, key -> [String: Any] in
            let raw = Array(key.rawRepresentation)  // x ‖ y, 32 bytes each
            return ["kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
                    "x": Base64URL.string(raw[0..<32]), "y": Base64URL.string(raw[32..<64])]
        }]
    }

    /// GetOpenIdTokenForDeveloperIdentity: the identity of the pool's developer user `user`
    /// (linking it to `identity` when given, or making a new identity), and a token for it.
    ///
    /// - Throws: `.invalidParameter` when `provider` is not the pool's developer provider;
    ///   `.alreadyRegistered` when the user is linked to another identity than `identity`;
    ///   `.conflict` when `identity` already has another user of this provider; `.notFound` for
    ///   an unknown pool or identity; `.limitExceeded` past the pool's identities.
    public func developerIdentityToken(pool: IdentityPoolID, identity requested: String?, provider: String, user: String,
                                       duration: Duration) async throws -> (identity: String, token: String) {
        let definition = try requireIdentityPool(pool)
        guard definition.developerProviderName == provider else {
            throw LedgerError(.invalidParameter, "\(quoted(provider)) is not the developer provider of identity pool \(pool) (\(definition.developerProviderName ?? "none set"))")
        }
        guard (1...1024).contains(user.utf8.count) else { throw LedgerError(.invalidParameter, "a developer user identifier must be 1-1024 bytes") }
        let now = options.clock()
        let limit = options.limits.maxIdentitiesPerPool
        let region = pool.rawValue.split(separator: ":").first.map(String.init) ?? "us-east-1"
        let login = Login(provider: provider, subject: user)
        let id = try await write(on: Self.identitiesStream(pool)) { [self] txn -> String in
            var edit = try IdentityEdit(txn, ledger: self, pool: pool)
            if let linked = try edit.owner(login) {
                if let requested, requested != linked {
                    throw LedgerError(.alreadyRegistered, "developer user \(quoted(user)) is already linked to identity \(linked), not \(requested)")
                }
                guard let record = try edit.identity(linked), record.isEnabled else {
                    throw LedgerError(.notAuthorized, "the identity \(linked) of developer user \(quoted(user)) is disabled")
                }
                return linked
            }
            var record: IdentityRecord
            if let requested {
                guard let found = try edit.identity(requested) else {
                    throw LedgerError(.notFound, "identity \(requested) does not exist in identity pool \(pool)")
                }
                guard found.isEnabled else { throw LedgerError(.notAuthorized, "identity \(requested) is disabled (\(found.disabled ?? ""))") }
                if let other = try edit.logins(of: requested).first(where: { $0.provider == provider }) {
                    throw LedgerError(.conflict, "identity \(requested) is already linked to another user of \(provider) (\(quoted(other.subject)))")
                }
                guard try edit.logins(of: requested).count < Self.maxLoginsPerIdentity else {
                    throw LedgerError(.limitExceeded, "identity \(requested) has \(Self.maxLoginsPerIdentity) logins, the limit")
                }
                record = found
            } else {
                guard (edit.view.dataset?.recordCount ?? 0) < UInt64(limit) else {
                    throw LedgerError(.limitExceeded, "identity pool \(pool) has reached its limit of \(limit) records of identities")
                }
                record = IdentityRecord(id: "\(region):\(UUID().uuidString.lowercased())", logins: [], created: now, modified: now)
                _ = try IdentityID(record.id)
                _ = try self.append(txn, to: Self.identityIndexStream, author: "cognito-identity", events: [.put(key: record.id, value: pool.rawValue, deviceModified: nil)])
            }
            if !record.logins.contains(provider) { record.logins.append(provider) }
            record.modified = now
            edit.put(record)
            try edit.link(login, to: record.id)
            _ = try self.append(txn, to: edit.stream, author: "cognito-identity", events: edit.events())
            return record.id
        }
        let logins = try identity(pool: pool, id: id)?.logins ?? [provider]
        return (id, try await openIdToken(pool: pool, identity: id, logins: logins, duration: duration))
    }

    /// LookupDeveloperIdentity: the identity of a developer user, or the users of an identity
    /// (several after MergeDeveloperIdentities).
    /// - Throws: `.notFound` when neither is known; `.conflict` when both are given and differ.
    public func lookupDeveloperIdentity(pool: IdentityPoolID, identity: String?, user: String?) throws -> (identity: String, users: [String]) {
        let definition = try requireIdentityPool(pool)
        guard let provider = definition.developerProviderName else {
            throw LedgerError(.notFound, "identity pool \(pool) has no developer provider")
        }
        let stream = Self.identitiesStream(pool)
        var id = identity
        if let user {
            guard let linked = try recordValue(stream, key: Self.loginKey(Login(provider: provider, subject: user))) else {
                throw LedgerError(.notFound, "developer user \(quoted(user)) is not linked in \(pool)")
            }
            if let identity, identity != linked { throw LedgerError(.conflict, "developer user \(quoted(user)) belongs to identity \(linked), not \(identity)") }
            id = linked
        }
        guard let id, try self.identity(pool: pool, id: id) != nil else { throw LedgerError(.notFound, "no such identity in \(pool)") }
        let users = try records(stream, prefix: Self.userPrefix(id) + provider + "|").map(\.1)
        return (id, users)
    }

    /// UnlinkDeveloperIdentity: the user no longer signs in as the identity.
    /// - Throws: `.notFound` when the user is not linked to that identity.
    public func unlinkDeveloperIdentity(pool: IdentityPoolID, identity: String, provider: String, user: String, caller: String) async throws {
        let now = options.clock()
        let login = Login(provider: provider, subject: user)
        try await write(on: Self.identitiesStream(pool)) { [self] txn in
            var edit = try IdentityEdit(txn, ledger: self, pool: pool)
            guard try edit.owner(login) == identity, var record = try edit.identity(identity) else {
                throw LedgerError(.notFound, "developer user \(quoted(user)) of \(provider) is not linked to identity \(identity)")
            }
            edit.unlink(login, from: identity)
            record.logins = IdentityEdit.providers(try edit.logins(of: identity))
            record.modified = now
            edit.put(record)
            _ = try self.append(txn, to: edit.stream, author: caller, events: edit.events())
        }
    }
}
