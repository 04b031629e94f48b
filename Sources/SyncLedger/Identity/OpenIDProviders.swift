import Foundation
import LedgerStorage
import Synchronization

/// An OpenID Connect login provider an operator configured: the server cannot fetch an
/// issuer's discovery document or keys, so the issuer, its JWKS and the client ids it accepts
/// are given. Kept as the record `provider/<name>` of the installation-wide system stream
/// `_syncledger:0/_syncledger:0/openid-providers`, so every change is a log entry.
public struct OpenIDProvider: Sendable, Hashable, Codable {
    /// The `Logins` key, as Cognito uses it: the issuer URL without `https://`
    /// (`login.example.com`, `login.example.com/realms/x`). 1-128 characters of
    /// `A-Z a-z 0-9 . - _ ~ : /`.
    public var name: String
    /// The issuer URL (`https://…`); a token's `iss` must equal it exactly.
    public var issuer: String
    /// The client ids (audiences) accepted in a token's `aud`: 1-100, each 1-255 bytes.
    public var clientIDs: [String]
    /// The JWKS document (JSON text, as given): the keys that sign the provider's tokens.
    public var jwks: String
    /// When this configuration was stored (set by ``Ledger/configureOpenIDProvider(_:caller:)``).
    public var configured: Timestamp

    /// A provider. `name` defaults to ``defaultName(issuer:)``.
    public init(name: String? = nil, issuer: String, clientIDs: [String], jwks: String, configured: Timestamp = Timestamp(milliseconds: 0)) {
        self.name = name ?? Self.defaultName(issuer: issuer)
        self.issuer = issuer
        self.clientIDs = clientIDs
        self.jwks = jwks
        self.configured = configured
    }

    /// The `Logins` key of an issuer: the URL without `https://` and without a trailing `/`.
    public static func defaultName(issuer: String) -> String {
        var name = Substring(issuer)
        if name.lowercased().hasPrefix("https://") { name = name.dropFirst("https://".count) }
        while name.hasSuffix("/") { name = name.dropLast() }
        return String(name)
    }

    /// The most bytes of a JWKS document (256 KiB).
    public static let maxJWKSBytes = 256 * 1024
    /// The most keys of a JWKS document.
    public static let maxKeys = 100
    /// The most client ids of a provider.
    public static let maxClientIDs = 100

    /// Checks the name, the issuer, the client ids and the JWKS (parsing every key).
    /// - Throws: `.invalidParameter` saying what is wrong.
    public func validate() throws(LedgerError) {
        try Self.validateName(name)
        guard issuer.utf8.count <= 2048, issuer.hasPrefix("https://"), issuer.count > "https://".count,
              !issuer.unicodeScalars.contains(where: { CharacterSet.whitespacesAndNewlines.contains($0) || CharacterSet.controlCharacters.contains($0) }),
              let url = URL(string: issuer), url.scheme == "https", !(url.host ?? "").isEmpty else {
            throw LedgerError(.invalidParameter, "the issuer must be an https URL (https://host[/path]) of at most 2048 bytes, not \(quoted(issuer))")
        }
        guard (1...Self.maxClientIDs).contains(clientIDs.count) else {
            throw LedgerError(.invalidParameter, "an OpenID Connect provider needs 1-\(Self.maxClientIDs) client ids, not \(clientIDs.count)")
        }
        for id in clientIDs where !(1...255).contains(id.utf8.count) {
            throw LedgerError(.invalidParameter, "a client id must be 1-255 bytes, not \(id.utf8.count) (\(quoted(id)))")
        }
        _ = try OpenIDKeys(jwks: jwks)
    }

    /// Checks a provider name (a `Logins` key).
    /// - Throws: `.invalidParameter` saying what is wrong.
    public static func validateName(_ name: String) throws(LedgerError) {
        let allowed = name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)
                || b == 0x2e || b == 0x2d || b == 0x5f || b == 0x7e || b == 0x3a || b == 0x2f
        }
        guard (1...128).contains(name.utf8.count), allowed else {
            throw LedgerError(.invalidParameter, "an OpenID Connect provider name must be 1-128 characters of A-Z a-z 0-9 . - _ ~ : /, not \(quoted(name))")
        }
        guard name != Ledger.openIdProvider else {
            throw LedgerError(.invalidParameter, "the provider name \(name) is this server's own (developer-authenticated identities)")
        }
    }
}

/// Parsed JWKS keys by provider, so that a sign-in does not parse the JWKS each time. Keyed by
/// ledger, provider name and configuration time; an entry is used only if its JWKS text is the
/// stored one. Bounded: it starts over past ``limit`` entries.
final class OpenIDKeyCache: Sendable {
    private struct Entry { let jwks: String; let keys: OpenIDKeys }
    private let entries = Mutex<[String: Entry]>([:])
    static let limit = 256

    /// The keys of `provider`, parsed once.
    func keys(ledger: String, _ provider: OpenIDProvider) throws(LedgerError) -> OpenIDKeys {
        let key = "\(ledger)\u{0}\(provider.name)\u{0}\(provider.configured.milliseconds)"
        if let hit = entries.withLock({ $0[key] }), hit.jwks == provider.jwks { return hit.keys }
        let parsed = try OpenIDKeys(jwks: provider.jwks)
        entries.withLock { cache in
            if cache.count >= Self.limit { cache.removeAll() }
            cache[key] = Entry(jwks: provider.jwks, keys: parsed)
        }
        return parsed
    }

    var count: Int { entries.withLock { $0.count } }
}

extension Ledger {
    /// The installation-wide stream of OpenID Connect providers:
    /// `_syncledger:0/_syncledger:0/openid-providers`, records `provider/<name>`.
    static let openIDProvidersStream = StreamName(pool: try! IdentityPoolID("_syncledger:0"), identity: systemIdentity,
                                                  dataset: try! DatasetName("openid-providers"))
    static let openIDProviderPrefix = "provider/"
    /// Parsed JWKS keys, shared by the ledgers of this process (keyed by ledger id).
    static let openIDKeyCache = OpenIDKeyCache()

    /// Adds or replaces the OpenID Connect provider `p.name`. Its `configured` time is set
    /// here (the ledger's clock; later than the replaced configuration's).
    /// - Returns: the provider as stored.
    /// - Throws: `.invalidParameter` for a bad name, issuer, client id or JWKS.
    @discardableResult
    public func configureOpenIDProvider(_ p: OpenIDProvider, caller: String) async throws -> OpenIDProvider {
        try p.validate()
        let stream = Self.openIDProvidersStream
        let key = Self.openIDProviderPrefix + p.name
        let now = options.clock()
        return try await appendSystem(stream, author: caller) { view in
            var next = p
            next.configured = now
            if let text = try view.record(key)?.value {
                let old = try Self.decode(OpenIDProvider.self, text, stream: stream)
                // Strictly later, so that the key cache never serves a replaced JWKS.
                if next.configured <= old.configured { next.configured = Timestamp(milliseconds: old.configured.milliseconds + 1) }
            }
            return ([.put(key: key, value: Self.json(next), deviceModified: nil)], next)
        }
    }

    /// Every configured OpenID Connect provider, by name.
    public func openIDProviders() throws -> [OpenIDProvider] {
        try records(Self.openIDProvidersStream, prefix: Self.openIDProviderPrefix).map {
            try Self.decode(OpenIDProvider.self, $0.1, stream: Self.openIDProvidersStream)
        }
    }

    /// The OpenID Connect provider `name`, or nil when none is configured.
    public func openIDProvider(named name: String) throws -> OpenIDProvider? {
        guard (1...128).contains(name.utf8.count) else { return nil }
        return try openIDProviderCache.value(self, Self.openIDProvidersStream, key: Self.openIDProviderPrefix + name) {
            try Self.decode(OpenIDProvider.self, $0, stream: Self.openIDProvidersStream)
        }
    }

    /// Removes the OpenID Connect provider `name`: its tokens stop signing anyone in.
    /// - Throws: `.notFound` when none is configured.
    public func removeOpenIDProvider(named name: String, caller: String) async throws {
        let key = Self.openIDProviderPrefix + name
        guard (1...128).contains(name.utf8.count) else {
            throw LedgerError(.notFound, "no OpenID Connect provider named \(quoted(name)) is configured")
        }
        try await appendSystem(Self.openIDProvidersStream, author: caller) { view in
            guard try view.record(key)?.value != nil else {
                throw LedgerError(.notFound, "no OpenID Connect provider named \(quoted(name)) is configured")
            }
            return [.remove(key: key, deviceModified: nil)]
        }
    }
}
