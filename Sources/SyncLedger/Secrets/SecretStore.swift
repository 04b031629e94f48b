import Foundation
import Crypto
import LedgerStorage

/// Where a ledger keeps its secrets: access keys and the key that signs sync session and
/// paging tokens. It is its own LMDB environment — by default the folder `secrets` inside the
/// data directory, or any folder given in ``LedgerOptions/secretsDirectory`` — so the ledger's
/// own file (`data.mdb`), its exports and its followers never carry a secret. The folder is
/// created 0700 and its files 0600. Several processes may use it at once (the server, and
/// `syncledger credentials` beside it).
public final class SecretStore: Sendable {
    let environment: Environment
    let credentials: Database
    let keys: Database
    let push: Database
    let hooks: Database
    let streams: Database
    /// The store's folder.
    public var directory: String { environment.path }

    /// Opens (creating if needed) the secret store in `directory`.
    ///
    /// - Throws: ``LedgerError`` `.storage` when the folder cannot be made or opened.
    public init(directory: String) throws {
        try makePrivateDirectory(directory, what: "the secrets folder")
        var options = EnvironmentOptions()
        options.initialMapSize = 8 << 20
        options.maxDatabases = 8
        do {
            environment = try Environment(path: directory, options: options)
            credentials = try environment.openDatabase("credentials")
            keys = try environment.openDatabase("keys")
            push = try environment.openDatabase("push")
            hooks = try environment.openDatabase("hooks")
            streams = try environment.openDatabase("streams")
        } catch {
            throw LedgerError(.storage, "cannot open the secrets in \(directory): \(error)", underlying: error)
        }
    }

    func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        do { return try environment.read(body) } catch let error as LedgerError { throw error } catch {
            throw LedgerError(.storage, "cannot read the secrets in \(directory): \(error)", underlying: error)
        }
    }

    func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        do { return try environment.write(body) } catch let error as LedgerError { throw error } catch {
            throw LedgerError(.storage, "cannot write the secrets in \(directory): \(error)", underlying: error)
        }
    }

    private static func decode(_ bytes: [UInt8], id: String) throws -> Credential {
        do { return try JSONDecoder().decode(Credential.self, from: Data(bytes)) } catch {
            throw LedgerError(.corruptData, "the stored credential \(id) does not decode")
        }
    }

    private static func encode(_ credential: Credential) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try! encoder.encode(credential))
    }

    // MARK: Token key

    /// The 32-byte key that signs sync session and paging tokens; made on first use.
    func tokenKey() throws -> SymmetricKey {
        let name = Array("session-token-key".utf8)
        if let stored = try read({ try $0.get(keys, key: name) }), stored.count == 32 { return SymmetricKey(data: stored) }
        return SymmetricKey(data: try write { txn -> [UInt8] in
            if let stored = try txn.get(keys, key: name), stored.count == 32 { return stored }
            let fresh = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
            try txn.put(keys, key: name, value: fresh)
            return fresh
        })
    }

    /// The P-256 key (raw 32 bytes) that signs Cognito Identity's OpenID tokens, made on first
    /// use. Its public half is served as a JWKS; the private half never leaves this store.
    func identitySigningKey() throws -> [UInt8] {
        let name = Array("identity-signing-key".utf8)
        if let stored = try read({ try $0.get(keys, key: name) }), stored.count == 32 { return stored }
        return try write { txn -> [UInt8] in
            if let stored = try txn.get(keys, key: name), stored.count == 32 { return stored }
            let fresh = Array(P256.Signing.PrivateKey().rawRepresentation)
            try txn.put(keys, key: name, value: fresh)
            return fresh
        }
    }

    /// Adopts a token key from a format-1 data directory unless this store has one.
    func adoptTokenKey(_ key: [UInt8]) throws {
        let name = Array("session-token-key".utf8)
        try write { txn in
            if try txn.get(keys, key: name) == nil { try txn.put(keys, key: name, value: key) }
        }
    }

    // MARK: Credentials

    /// Stores `credential` (replacing one with the same access key id).
    /// - Throws: `.invalidParameter` for an access key id that is not 16-128 word characters.
    public func store(_ credential: Credential) throws {
        guard Credential.isValidAccessKeyID(credential.accessKeyID) else {
            throw LedgerError(.invalidParameter, "an access key id must be 16-128 characters of A-Z a-z 0-9 _")
        }
        try write { txn in try txn.put(credentials, key: Array(credential.accessKeyID.utf8), value: Self.encode(credential)) }
    }

    /// The credential with this access key id, or nil (expired ones included: the caller
    /// decides). Sees credentials that another process stored after this store was opened.
    public func credential(accessKeyID: String) throws -> Credential? {
        guard Credential.isValidAccessKeyID(accessKeyID) else { return nil }
        return try read { txn in
            try txn.get(credentials, key: Array(accessKeyID.utf8)).map { try Self.decode($0, id: accessKeyID) }
        }
    }

    /// Every stored credential, by access key id.
    public func list() throws -> [Credential] {
        try read { txn in
            try txn.withCursor(credentials) { cursor in
                var result: [Credential] = []
                var pair = try cursor.first()
                while let current = pair {
                    result.append(try Self.decode(current.value, id: String(decoding: current.key, as: UTF8.self)))
                    pair = try cursor.next()
                }
                return result
            }
        }
    }

    /// Deletes a credential; requests signed with it fail from now on.
    /// - Throws: `.notFound` when there is no such access key.
    public func revoke(accessKeyID: String) throws {
        let removed = try write { txn in try txn.delete(credentials, key: Array(accessKeyID.utf8)) }
        guard removed else { throw LedgerError(.notFound, "no credential has access key id \(accessKeyID)") }
    }

    /// Replaces a credential by a new one with the same scope (and, for a temporary one, the
    /// same lifetime from now). The old key stops working at once, or after `grace`.
    /// - Throws: `.notFound` when there is no such access key.
    public func rotate(accessKeyID: String, grace: Duration = .zero, now: Timestamp = .now) throws -> Credential {
        try write { txn in
            guard let bytes = try txn.get(credentials, key: Array(accessKeyID.utf8)) else {
                throw LedgerError(.notFound, "no credential has access key id \(accessKeyID)")
            }
            let old = try Self.decode(bytes, id: accessKeyID)
            let lifetime = old.expires.map { Duration.milliseconds($0.milliseconds - old.created.milliseconds) }
            let fresh = Credential.generate(scope: old.scope, withSessionToken: old.sessionToken != nil, lifetime: lifetime, now: now)
            try txn.put(credentials, key: Array(fresh.accessKeyID.utf8), value: Self.encode(fresh))
            if grace > .zero {
                let until = now.adding(grace)
                try txn.put(credentials, key: Array(accessKeyID.utf8), value: Self.encode(old.expiring(at: min(until, old.expires ?? until))))
            } else {
                try txn.delete(credentials, key: Array(accessKeyID.utf8))
            }
            if try txn.get(keys, key: Self.generatedAdminMarker) == Array(accessKeyID.utf8) {
                try txn.put(keys, key: Self.generatedAdminMarker, value: Array(fresh.accessKeyID.utf8))
            }
            return fresh
        }
    }

    private static let generatedAdminMarker = Array("generated-admin-access-key".utf8)

    /// The admin credential this store generated; creates one when there is none. `created`
    /// says whether this call made it (so the caller shows it once).
    public func generatedAdminCredential() throws -> (credential: Credential, created: Bool) {
        let fresh = Credential.generate(scope: .admin)
        return try write { txn in
            if let id = try txn.get(keys, key: Self.generatedAdminMarker), let bytes = try txn.get(credentials, key: id) {
                return (try Self.decode(bytes, id: String(decoding: id, as: UTF8.self)), false)
            }
            try txn.put(credentials, key: Array(fresh.accessKeyID.utf8), value: Self.encode(fresh))
            try txn.put(keys, key: Self.generatedAdminMarker, value: Array(fresh.accessKeyID.utf8))
            return (fresh, true)
        }
    }

    /// The access key id of the admin credential this store generated, if it has one.
    public func generatedAdminAccessKeyID() throws -> String? {
        try read { txn in try txn.get(keys, key: Self.generatedAdminMarker).map { String(decoding: $0, as: UTF8.self) } }
    }

    /// Takes over the credentials of a format-1 data directory (those it does not have yet).
    func adopt(_ legacy: [(key: [UInt8], value: [UInt8])], generatedAdmin: [UInt8]?) throws {
        try write { txn in
            for (key, value) in legacy where try txn.get(credentials, key: key) == nil {
                try txn.put(credentials, key: key, value: value)
            }
            if let generatedAdmin, try txn.get(keys, key: Self.generatedAdminMarker) == nil {
                try txn.put(keys, key: Self.generatedAdminMarker, value: generatedAdmin)
            }
        }
    }
}

/// Creates `path` (and its parents) if missing, and makes it private to the owner (0700).
/// - Throws: ``LedgerError`` `.storage` saying what could not be made, where and why.
func makePrivateDirectory(_ path: String, what: String) throws {
    do { try PrivateFiles.makeDirectories(path) } catch {
        throw LedgerError(.storage, "cannot create \(what) \(path): \(error.description)", underlying: error)
    }
    // Tighten a folder made by an older version (or by hand); not an error when it is not ours.
    try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: path)
}

/// A file error as one line a person can act on (Foundation's own descriptions name internal
/// domains and codes).
public func describeFileError(_ error: any Error) -> String {
    let ns = error as NSError
    if let posix = ns.userInfo[NSUnderlyingErrorKey] as? NSError, posix.domain == NSPOSIXErrorDomain {
        return String(cString: strerror(Int32(posix.code)))
    }
    switch (ns.domain, ns.code) {
    case (NSCocoaErrorDomain, NSFileNoSuchFileError), (NSCocoaErrorDomain, NSFileReadNoSuchFileError): return "no such file or directory"
    case (NSCocoaErrorDomain, NSFileWriteNoPermissionError), (NSCocoaErrorDomain, NSFileReadNoPermissionError): return "permission denied"
    case (NSCocoaErrorDomain, NSFileWriteFileExistsError): return "a file is in the way"
    case (NSCocoaErrorDomain, NSFileWriteOutOfSpaceError): return "no space left on the device"
    case (NSPOSIXErrorDomain, let code): return String(cString: strerror(Int32(code)))
    default: return ns.localizedFailureReason ?? ns.localizedDescription
    }
}
