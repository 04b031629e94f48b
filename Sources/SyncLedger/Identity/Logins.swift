import Foundation
import LedgerStorage

/// A login a provider vouched for: a developer user (GetOpenIdTokenForDeveloperIdentity) or
/// the `sub` of an OpenID Connect token verified against its provider's keys.
public struct Login: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The provider's name as a `Logins` key: the pool's developer provider name, or an OpenID
    /// Connect provider's name (`login.example.com`).
    public let provider: String
    /// The user at that provider (the developer user identifier, or the token's `sub`).
    public let subject: String

    /// A login.
    public init(provider: String, subject: String) {
        self.provider = provider
        self.subject = subject
    }

    public var description: String { "\(provider) user \(quoted(subject))" }
    public static func < (a: Self, b: Self) -> Bool { (a.provider, a.subject) < (b.provider, b.subject) }
}

/// Records of a pool's `identities` stream that link logins to identities:
/// `login/<provider>|<subject>` → identity id, and `user/<identity>/<provider>|<subject>` →
/// subject (the logins of one identity, found by prefix). A provider name never holds `|`, so
/// neither key is ambiguous.
extension Ledger {
    static func loginKey(_ login: Login) -> String { "login/\(login.provider)|\(login.subject)" }
    static func userPrefix(_ identity: String) -> String { "user/\(identity)/" }
    static func userKey(_ identity: String, _ login: Login) -> String { "user/\(identity)/\(login.provider)|\(login.subject)" }

    /// The most logins one identity may have linked (Cognito's limit for merges).
    public static let maxLoginsPerIdentity = 20
}

/// The changes one transaction makes to a pool's `identities` stream, collected so that they
/// are written as one entry (each key once, its last value) after every check has passed.
/// Reads see the stored records with these changes over them.
struct IdentityEdit {
    let view: StoredDatasetView
    let stream: StreamName
    private(set) var changes: [String: String?] = [:]
    private var order: [String] = []

    init(_ txn: Transaction, ledger: Ledger, pool: IdentityPoolID) throws {
        stream = Ledger.identitiesStream(pool)
        view = try StoredDatasetView(txn: txn, schema: ledger.schema, stream: stream, streamID: try ledger.head(txn, stream)?.id ?? 0)
    }

    /// The value of `key` now (nil when absent or removed).
    func value(_ key: String) throws -> String? {
        if let changed = changes[key] { return changed }
        return try view.storedRecord(key)?.value
    }

    /// Sets (or with nil, removes) `key`.
    mutating func set(_ key: String, _ value: String?) {
        if changes.updateValue(value, forKey: key) == nil, !order.contains(key) { order.append(key) }
    }

    /// Identity `id`, nil when there is none.
    func identity(_ id: String) throws -> IdentityRecord? {
        try value("identity/\(id)").map { try Ledger.decode(IdentityRecord.self, $0, stream: stream) }
    }

    /// Stores `record`.
    mutating func put(_ record: IdentityRecord) {
        set("identity/\(record.id)", Ledger.json(record))
    }

    /// The identity a login is linked to.
    func owner(_ login: Login) throws -> String? { try value(Ledger.loginKey(login)) }

    /// The logins linked to identity `id`, sorted.
    func logins(of id: String) throws -> [Login] {
        let prefix = Ledger.userPrefix(id)
        var found: [String: String] = [:]
        for (key, subject) in try view.storedRecords(prefix: prefix) { found[key] = subject }
        for (key, value) in changes where key.hasPrefix(prefix) { found[key] = value }
        return found.compactMap { key, subject -> Login? in
            let rest = key.dropFirst(prefix.count)
            guard let bar = rest.firstIndex(of: "|") else { return nil }
            return Login(provider: String(rest[..<bar]), subject: subject)
        }.sorted()
    }

    /// Links `login` to identity `id` (moving it from any other identity).
    mutating func link(_ login: Login, to id: String) throws {
        if let old = try owner(login), old != id { set(Ledger.userKey(old, login), nil) }
        set(Ledger.loginKey(login), id)
        set(Ledger.userKey(id, login), login.subject)
    }

    /// Removes the link of `login` to identity `id`.
    mutating func unlink(_ login: Login, from id: String) {
        set(Ledger.loginKey(login), nil)
        set(Ledger.userKey(id, login), nil)
    }

    /// The collected changes as events, in the order first made.
    func events() -> [Event] {
        order.map { key in
            if let value = changes[key] ?? nil { return .put(key: key, value: value, deviceModified: nil) }
            return .remove(key: key, deviceModified: nil)
        }
    }

    /// The provider names of `logins`, each once, for ``IdentityRecord/logins``.
    static func providers(_ logins: [Login]) -> [String] {
        var seen = Set<String>()
        return logins.map(\.provider).filter { seen.insert($0).inserted }
    }
}
