import Foundation
import LedgerStorage
import Synchronization

/// The identity a sign-in came to.
public struct SignInResult: Sendable, Hashable {
    /// The identity to use from now on (it can differ from the one asked for after a merge:
    /// "you must update your local cache if this value differs").
    public var identity: String
    /// Whether it was made by this sign-in.
    public var created: Bool
    /// What was merged into it.
    public var merge: MergeSummary?
}

extension Ledger {
    /// Signs in with verified logins (GetId, GetCredentialsForIdentity and GetOpenIdToken
    /// with `Logins`), linking and merging the way Cognito does, in one write transaction:
    ///
    /// - Logins linked to nobody are linked to the identity signed in (a new one when neither
    ///   an identity nor a linked login names one).
    /// - Logins linked to other identities than the one asked for merge them: the identity a
    ///   login is linked to survives (the oldest, when several are), the others are merged into it
    ///   (``mergeIdentity(_:_:pool:source:into:developerProvider:author:now:)``), and its id is
    ///   returned.
    ///
    /// - Parameters:
    ///   - identity: the identity the caller names (`IdentityId`), if any.
    ///   - proven: the identity an OpenID token of this server proved, if one was sent.
    ///   - logins: the logins the caller's tokens proved (already verified).
    /// - Throws: `.notFound` for an unknown pool or identity; `.notAuthorized` when the named
    ///   identity is authenticated and no login proves it, or is disabled; `.conflict` when an
    ///   identity would get a second user of one provider; `.limitExceeded` past the pool's
    ///   identities or an identity's logins. Nothing is written then.
    public func signIn(pool: IdentityPoolID, identity requested: String?, proven: String?, logins: [Login], caller: String) async throws -> SignInResult {
        let definition = try requireIdentityPool(pool)
        if let requested, let proven, requested != proven {
            throw LedgerError(.notAuthorized, "the \(Self.openIdProvider) token is for identity \(proven), not \(requested)")
        }
        let named = requested ?? proven
        // A returning user — every login linked to one enabled identity (the one named, if
        // any) — changes nothing: answered from a read, no write. Else the identities involved.
        let (unchanged, involved) = try read { [self] txn -> (SignInResult?, Set<String>) in
            let edit = try IdentityEdit(txn, ledger: self, pool: pool)
            let owners = Set(try logins.map { try edit.owner($0) })
            if !logins.isEmpty, owners.count == 1, let owner = owners.first, let id = owner, named == nil || named == id,
               try edit.identity(id)?.isEnabled == true {
                return (SignInResult(identity: id, created: false, merge: nil), [])
            }
            return (nil, Set(owners.compactMap { $0 } + (named.map { [$0] } ?? [])))
        }
        if let unchanged { return unchanged }
        // A merge reads the identities' datasets from this replica: on a cluster, let it catch
        // up with their shards first (a sign-in that merges nothing skips this).
        if involved.count > 1 { try await catchUp(pool: pool, identities: involved.sorted(), timeout: .seconds(5)) }
        let now = options.clock()
        let limit = options.limits.maxIdentitiesPerPool
        let region = pool.rawValue.split(separator: ":").first.map(String.init) ?? "us-east-1"
        let result = try await write(on: Self.identitiesStream(pool)) { [self] txn -> SignInResult in
            var edit = try IdentityEdit(txn, ledger: self, pool: pool)
            var owners: [String] = []
            for login in logins {
                if let owner = try edit.owner(login), !owners.contains(owner) { owners.append(owner) }
            }
            var candidates: [IdentityRecord] = []
            for id in owners {
                guard let record = try edit.identity(id) else { throw LedgerError(.corruptData, "login index names identity \(id), which does not exist", stream: edit.stream) }
                guard record.isEnabled else { throw LedgerError(.notAuthorized, "the login's identity \(id) is disabled (\(record.disabled ?? ""))") }
                candidates.append(record)
            }
            if let named {
                guard let record = try edit.identity(named) else {
                    throw LedgerError(.notFound, "identity \(named) does not exist in identity pool \(pool)")
                }
                if !owners.contains(named) {
                    guard record.isEnabled else {
                        throw LedgerError(.notAuthorized, "identity \(named) is disabled (\(record.disabled ?? "")); sign in with its logins to get the identity it was merged into")
                    }
                    let linked = try edit.logins(of: named)
                    if !linked.isEmpty, proven != named {
                        throw LedgerError(.notAuthorized, "identity \(named) is authenticated: Logins must hold a login linked to it (or this server's OpenID token for it)")
                    }
                    candidates.append(record)
                }
            }
            var created = false
            let survivor: IdentityRecord
            // An identity a login is linked to survives (the oldest, when several are); an
            // unauthenticated identity is merged into it, as in Cognito.
            let authenticated = candidates.filter { owners.contains($0.id) }
            if let oldest = (authenticated.isEmpty ? candidates : authenticated).min(by: { ($0.created, $0.id) < ($1.created, $1.id) }) {
                survivor = oldest
            } else {
                let count = edit.view.dataset?.recordCount ?? 0
                guard count < UInt64(limit) else {
                    throw LedgerError(.limitExceeded, "identity pool \(pool) has reached its limit of \(limit) records of identities")
                }
                let record = IdentityRecord(id: "\(region):\(UUID().uuidString.lowercased())", logins: [], created: now, modified: now)
                _ = try IdentityID(record.id)
                edit.put(record)
                _ = try self.append(txn, to: Self.identityIndexStream, author: "cognito-identity", events: [.put(key: record.id, value: pool.rawValue, deviceModified: nil)])
                survivor = record
                created = true
            }
            var merged: [String] = []
            var copies: [MergedDataset] = []
            for other in candidates where other.id != survivor.id {
                copies += try mergeIdentity(txn, &edit, pool: pool, source: other.id, into: survivor.id,
                                            developerProvider: definition.developerProviderName, author: caller, now: now)
                merged.append(other.id)
            }
            // Link the logins that are not linked to the survivor yet.
            var record = try edit.identity(survivor.id)!
            var linked = try edit.logins(of: survivor.id)
            for login in logins where !linked.contains(login) {
                if let other = linked.first(where: { $0.provider == login.provider }) {
                    throw LedgerError(.conflict, "identity \(survivor.id) is already linked to another user of \(login.provider) (\(quoted(other.subject)))")
                }
                try edit.link(login, to: survivor.id)
                linked.append(login)
            }
            guard linked.count <= Self.maxLoginsPerIdentity else {
                throw LedgerError(.limitExceeded, "identity \(survivor.id) would have \(linked.count) logins; the limit is \(Self.maxLoginsPerIdentity)")
            }
            let providers = IdentityEdit.providers(record.logins.map { Login(provider: $0, subject: "") } + linked.sorted())
            if providers != record.logins || created {
                record.logins = providers
                record.modified = now
                edit.put(record)
            }
            let events = edit.events()
            if !events.isEmpty { _ = try self.append(txn, to: edit.stream, author: caller, events: events) }
            return SignInResult(identity: survivor.id, created: created,
                                merge: merged.isEmpty ? nil : MergeSummary(survivor: survivor.id, merged: merged, datasets: copies))
        }
        // On a cluster, a merge's copies are made by the survivor's shard owner: answer once they are here.
        try await waitForMergeCopies(result.merge, pool: pool, timeout: options.mergeCopyWait)
        return result
    }

    /// Merges identity `source` into `destination` (MergeDeveloperIdentities, `syncledger
    /// identities merge`) in one write transaction; see
    /// ``mergeIdentity(_:_:pool:source:into:developerProvider:author:now:)``.
    public func mergeIdentities(pool: IdentityPoolID, source: String, into destination: String, caller: String) async throws -> MergeSummary {
        let definition = try requireIdentityPool(pool)
        try await catchUp(pool: pool, identities: [source, destination], timeout: .seconds(5))
        let now = options.clock()
        let summary = try await write { [self] txn -> MergeSummary in
            var edit = try IdentityEdit(txn, ledger: self, pool: pool)
            let copies = try mergeIdentity(txn, &edit, pool: pool, source: source, into: destination,
                                           developerProvider: definition.developerProviderName, author: caller, now: now)
            _ = try self.append(txn, to: edit.stream, author: caller, events: edit.events())
            return MergeSummary(survivor: destination, merged: [source], datasets: copies)
        }
        // On a cluster, the copies are made by the survivor's shard owner: answer once they are here.
        try await waitForMergeCopies(summary, pool: pool, timeout: options.mergeCopyWait)
        return summary
    }

    /// MergeDeveloperIdentities: the identity of developer user `source` is merged into the
    /// identity of developer user `destination`; returns the destination identity.
    /// - Throws: `.invalidParameter` when `provider` is not the pool's developer provider;
    ///   `.notFound` when either user is not linked; what ``mergeIdentities(pool:source:into:caller:)`` throws.
    public func mergeDeveloperIdentities(pool: IdentityPoolID, provider: String, source: String, destination: String, caller: String) async throws -> String {
        let definition = try requireIdentityPool(pool)
        guard definition.developerProviderName == provider else {
            throw LedgerError(.invalidParameter, "\(quoted(provider)) is not the developer provider of identity pool \(pool) (\(definition.developerProviderName ?? "none set"))")
        }
        let stream = Self.identitiesStream(pool)
        guard let from = try recordValue(stream, key: Self.loginKey(Login(provider: provider, subject: source))) else {
            throw LedgerError(.notFound, "developer user \(quoted(source)) is not linked in identity pool \(pool)")
        }
        guard let into = try recordValue(stream, key: Self.loginKey(Login(provider: provider, subject: destination))) else {
            throw LedgerError(.notFound, "developer user \(quoted(destination)) is not linked in identity pool \(pool)")
        }
        if from == into { return into }
        return try await mergeIdentities(pool: pool, source: from, into: into, caller: caller).survivor
    }

    /// UnlinkIdentity: removes the links of `providers` from `identity`, which the caller
    /// proved with `proof` (logins linked to it, or this server's token for it). Unlinked
    /// logins sign in as new identities next time; an identity left without logins can no
    /// longer sign in (as in Cognito).
    /// - Throws: `.notFound` for an unknown identity; `.notAuthorized` when nothing proves it;
    ///   `.invalidParameter` when a provider is not linked to it.
    public func unlinkLogins(pool: IdentityPoolID, identity: String, proof: [Login], proven: String?, providers: [String], caller: String) async throws {
        let now = options.clock()
        try await write(on: Self.identitiesStream(pool)) { [self] txn in
            var edit = try IdentityEdit(txn, ledger: self, pool: pool)
            guard var record = try edit.identity(identity) else { throw LedgerError(.notFound, "identity \(identity) does not exist in identity pool \(pool)") }
            guard record.isEnabled else { throw LedgerError(.notAuthorized, "identity \(identity) is disabled (\(record.disabled ?? ""))") }
            let linked = try edit.logins(of: identity)
            guard proven == identity || proof.contains(where: linked.contains) else {
                throw LedgerError(.notAuthorized, "Logins must prove identity \(identity): a login linked to it, or this server's OpenID token for it")
            }
            for provider in Set(providers).sorted() {
                let matching = linked.filter { $0.provider == provider }
                guard !matching.isEmpty else { throw LedgerError(.invalidParameter, "identity \(identity) has no login of \(provider) to unlink") }
                for login in matching { edit.unlink(login, from: identity) }
            }
            record.logins = IdentityEdit.providers(try edit.logins(of: identity))
            record.modified = now
            edit.put(record)
            _ = try self.append(txn, to: edit.stream, author: caller, events: edit.events())
        }
    }

    /// Disables an identity (`syncledger identities disable`): it gets no credentials, its
    /// temporary credentials stop working at once; its logins stay linked (signing in with
    /// them is refused), its datasets and history stay in the log.
    /// - Throws: `.notFound` for an unknown identity.
    public func disableIdentity(pool: IdentityPoolID, identity: String, reason: String, caller: String) async throws {
        let now = options.clock()
        try await write(on: Self.identitiesStream(pool)) { [self] txn in
            var edit = try IdentityEdit(txn, ledger: self, pool: pool)
            guard var record = try edit.identity(identity) else { throw LedgerError(.notFound, "identity \(identity) does not exist in identity pool \(pool)") }
            guard record.isEnabled else { return }
            record.disabled = reason.isEmpty ? "disabled by \(caller)" : reason
            record.modified = now
            edit.put(record)
            _ = try self.append(txn, to: edit.stream, author: caller, events: edit.events())
        }
    }
}
