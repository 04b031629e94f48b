import Foundation
import LedgerStorage

/// A Cognito Identity pool as CreateIdentityPool defines it. Kept as the record
/// `identity-pool` of the pool's `configuration` system stream, so every change is a log entry.
public struct IdentityPoolDefinition: Sendable, Hashable, Codable {
    /// The pool id, `<region>:<uuid>`.
    public var id: String
    /// Its name: 1-128 characters of `[\w ]`.
    public var name: String
    /// Whether GetId hands out identities without a login.
    public var allowUnauthenticatedIdentities: Bool
    /// The developer provider's name (`[\w._-]`, 1-128), fixed once set.
    public var developerProviderName: String?
    /// Login providers by name → app id. A name that is a configured OpenID Connect
    /// provider (``OpenIDProvider``) signs users in, with the app id as one more accepted
    /// audience; other names (graph.facebook.com, …) are kept but cannot be verified here.
    public var supportedLoginProviders: [String: String]
    /// The OpenID Connect providers whose tokens sign users in:
    /// `arn:aws:iam::<account>:oidc-provider/<name>`, `<name>` a provider configured with
    /// `syncledger identities providers add`.
    public var openIdConnectProviderARNs: [String]?
    /// When it was created.
    public var created: Timestamp

    /// A definition.
    public init(id: String, name: String, allowUnauthenticatedIdentities: Bool, developerProviderName: String? = nil,
                supportedLoginProviders: [String: String] = [:], openIdConnectProviderARNs: [String] = [], created: Timestamp) {
        self.id = id
        self.name = name
        self.allowUnauthenticatedIdentities = allowUnauthenticatedIdentities
        self.developerProviderName = developerProviderName
        self.supportedLoginProviders = supportedLoginProviders
        self.openIdConnectProviderARNs = openIdConnectProviderARNs.isEmpty ? nil : openIdConnectProviderARNs
        self.created = created
    }

    /// The names of the OpenID Connect providers of ``openIdConnectProviderARNs``.
    public var openIdConnectProviders: [String] {
        (openIdConnectProviderARNs ?? []).compactMap(Self.providerName(arn:))
    }

    /// The provider name of `arn:aws:iam::<12 digits>:oidc-provider/<name>`, nil for anything else.
    public static func providerName(arn: String) -> String? {
        let parts = arn.split(separator: ":", maxSplits: 5, omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "arn", parts[1] == "aws", parts[2] == "iam", parts[3].isEmpty,
              parts[4].count == 12, parts[4].allSatisfy({ $0.isASCII && $0.isNumber }), parts[5].hasPrefix("oidc-provider/") else { return nil }
        let name = parts[5].dropFirst("oidc-provider/".count)
        return name.isEmpty ? nil : String(name)
    }

    /// Whether `provider` (a `Logins` key) is one of this pool's login providers.
    public func allowsLogin(_ provider: String) -> Bool {
        supportedLoginProviders[provider] != nil || openIdConnectProviders.contains(provider)
    }

    /// Checks the name, the developer provider name and the login providers (at most 10).
    /// - Throws: `.invalidParameter` naming the field.
    public func validate() throws(LedgerError) {
        guard (1...128).contains(name.count), name.unicodeScalars.allSatisfy({ $0 == " " || $0 == "_" || CharacterSet.alphanumerics.contains($0) }) else {
            throw LedgerError(.invalidParameter, "IdentityPoolName must be 1-128 characters of letters, digits, _ and spaces, not \(quoted(name))")
        }
        if let provider = developerProviderName {
            guard (1...128).contains(provider.utf8.count), provider.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) || $0 == 0x5f || $0 == 0x2e || $0 == 0x2d }) else {
                throw LedgerError(.invalidParameter, "DeveloperProviderName must be 1-128 characters of A-Z a-z 0-9 _ . -, not \(quoted(provider))")
            }
        }
        guard supportedLoginProviders.count <= 10 else {
            throw LedgerError(.invalidParameter, "SupportedLoginProviders may hold at most 10 providers, not \(supportedLoginProviders.count)")
        }
        let arns = openIdConnectProviderARNs ?? []
        guard arns.count <= 10 else { throw LedgerError(.invalidParameter, "OpenIdConnectProviderARNs may hold at most 10 ARNs, not \(arns.count)") }
        for arn in arns where arn.utf8.count > 2048 || Self.providerName(arn: arn) == nil {
            throw LedgerError(.invalidParameter, "OpenIdConnectProviderARNs: \(quoted(String(arn.prefix(200)))) is not arn:aws:iam::ACCOUNT:oidc-provider/NAME")
        }
        for (domain, app) in supportedLoginProviders {
            guard (1...128).contains(domain.utf8.count), (1...128).contains(app.utf8.count) else {
                throw LedgerError(.invalidParameter, "SupportedLoginProviders entries must be 1-128 characters on both sides (\(quoted(domain)))")
            }
        }
    }
}

extension Ledger {
    static let identityPoolKey = "identity-pool"

    /// Creates an identity pool in `region` and returns it.
    /// - Throws: `.invalidParameter` for a bad definition.
    public func createIdentityPool(region: String, name: String, allowUnauthenticatedIdentities: Bool, developerProviderName: String?,
                                   supportedLoginProviders: [String: String], openIdConnectProviderARNs: [String] = [],
                                   caller: String) async throws -> IdentityPoolDefinition {
        let id = try IdentityPoolID("\(region):\(UUID().uuidString.lowercased())")
        let definition = IdentityPoolDefinition(id: id.rawValue, name: name, allowUnauthenticatedIdentities: allowUnauthenticatedIdentities,
                                                developerProviderName: developerProviderName, supportedLoginProviders: supportedLoginProviders,
                                                openIdConnectProviderARNs: openIdConnectProviderARNs, created: options.clock())
        try definition.validate()
        try requireOpenIDProviders(definition)
        try await appendSystem(Self.systemStream(id, "configuration"), author: caller) { _ in
            [.put(key: Self.identityPoolKey, value: Self.json(definition), deviceModified: nil)]
        }
        return definition
    }

    /// Refuses a pool whose `OpenIdConnectProviderARNs` name a provider not configured here.
    func requireOpenIDProviders(_ definition: IdentityPoolDefinition) throws {
        for name in definition.openIdConnectProviders where try openIDProvider(named: name) == nil {
            throw LedgerError(.invalidParameter, "OpenIdConnectProviderARNs: no OpenID Connect provider named \(quoted(name)) is configured (syncledger identities providers add)")
        }
    }

    /// The identity pool `id`, or nil when none was created here (or it was deleted).
    public func identityPool(_ id: IdentityPoolID) throws -> IdentityPoolDefinition? {
        let stream = Self.systemStream(id, "configuration")
        return try identityPoolCache.value(self, stream, key: Self.identityPoolKey) { try Self.decode(IdentityPoolDefinition.self, $0, stream: stream) }
    }

    /// Replaces a pool's settings (UpdateIdentityPool sends the whole pool). The developer
    /// provider name cannot change once set.
    /// - Throws: `.notFound` for an unknown pool; `.invalidParameter` for a bad definition or a
    ///   changed developer provider name.
    public func updateIdentityPool(_ updated: IdentityPoolDefinition, caller: String) async throws -> IdentityPoolDefinition {
        try updated.validate()
        try requireOpenIDProviders(updated)
        let id = try IdentityPoolID(updated.id)
        let stream = Self.systemStream(id, "configuration")
        return try await appendSystem(stream, author: caller) { view in
            guard let text = try view.record(Self.identityPoolKey)?.value else { throw LedgerError(.notFound, "identity pool \(id) does not exist") }
            let stored = try Self.decode(IdentityPoolDefinition.self, text, stream: stream)
            if let old = stored.developerProviderName, updated.developerProviderName != old {
                throw LedgerError(.invalidParameter, "DeveloperProviderName of identity pool \(id) is \(old) and cannot change")
            }
            var next = updated
            next.created = stored.created
            return (next == stored ? [] : [.put(key: Self.identityPoolKey, value: Self.json(next), deviceModified: nil)], next)
        }
    }

    /// Deletes a pool: GetId and its temporary credentials stop working. Its data and history
    /// stay in the log.
    /// - Throws: `.notFound` for an unknown pool.
    public func deleteIdentityPool(_ id: IdentityPoolID, caller: String) async throws {
        try await appendSystem(Self.systemStream(id, "configuration"), author: caller) { view in
            guard try view.record(Self.identityPoolKey)?.value != nil else { throw LedgerError(.notFound, "identity pool \(id) does not exist") }
            return [.remove(key: Self.identityPoolKey, deviceModified: nil)]
        }
    }

    /// Every identity pool created here, by id.
    public func identityPools() throws -> [IdentityPoolDefinition] {
        try poolsWithStreams().compactMap { try identityPool($0) }
    }

    /// The most pools with streams one page of ``identityPools(maxResults:nextToken:)`` looks
    /// at: a run of pools with sync data but no identity pool ends a page early (with a
    /// NextToken) rather than making one call read every pool.
    public static let identityPoolsPageScanLimit = 1000

    /// The identity pools after `nextToken`, at most `maxResults`, by id (ListIdentityPools).
    ///
    /// One seek per pool read, from the token's pool on: the cost follows the page, not the
    /// number of pools. A page may hold fewer than `maxResults`; a NextToken means there may be
    /// more.
    /// - Throws: `.invalidParameter` for a NextToken this server did not issue for this call,
    ///   or one that was altered.
    public func identityPools(maxResults: Int, nextToken: String?) throws -> (pools: [IdentityPoolDefinition], nextToken: String?) {
        guard maxResults >= 1 else { throw LedgerError(.invalidParameter, "MaxResults must be at least 1, not \(maxResults)") }
        var start: [UInt8] = []
        if let nextToken {
            guard let payload = SignedToken.open(nextToken, kind: .identityPoolsPage, key: tokenKey),
                  let after = try? IdentityPoolID(String(decoding: payload, as: UTF8.self)) else {
                throw LedgerError(.invalidParameter, "NextToken is not one this server issued for ListIdentityPools (altered, or from another call)")
            }
            // The stream keys of a pool share the prefix `pool ␀`, and no id holds a byte below ␁.
            start = Array(after.rawValue.utf8) + [1]
        }
        var pools: [IdentityPoolDefinition] = []
        var last: IdentityPoolID?
        var more = false
        try read { txn in
            var scanned = 0
            try forEachPoolWithStreams(txn, from: start) { id in
                guard pools.count < maxResults, scanned < Self.identityPoolsPageScanLimit else { more = true; return false }
                scanned += 1
                last = id
                let stream = Self.systemStream(id, "configuration")
                if let text = try recordValue(txn, stream, key: Self.identityPoolKey) {
                    pools.append(try Self.decode(IdentityPoolDefinition.self, text, stream: stream))
                }
                return true
            }
        }
        let next = more ? last.map { SignedToken.sign(Array($0.rawValue.utf8), kind: .identityPoolsPage, key: tokenKey) } : nil
        return (pools, next)
    }
}
