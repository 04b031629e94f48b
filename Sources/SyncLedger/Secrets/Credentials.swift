import Foundation
import LedgerStorage

/// An access key the server accepts (AWS Signature Version 4), kept in the data directory.
/// Credentials are not log entries: they are secrets, not user data, and are never replicated.
public struct Credential: Sendable, Hashable, Codable {
    /// What a credential may reach.
    public enum Scope: Sendable, Hashable, Codable {
        /// Every operation for every identity (Cognito's developer credentials).
        case admin
        /// Only this identity's datasets and devices.
        case identity(pool: String, identity: String)
    }

    /// The access key id (`AKIA…`, or `ASIA…` when it has a session token).
    public let accessKeyID: String
    /// The secret access key.
    public let secretAccessKey: String
    /// A session token that requests must carry (`x-amz-security-token`), if any.
    public let sessionToken: String?
    /// What it may reach.
    public let scope: Scope
    /// When it was made.
    public let created: Timestamp

    /// A credential.
    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, scope: Scope, created: Timestamp = .now) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.scope = scope
        self.created = created
    }

    /// A fresh random credential.
    public static func generate(scope: Scope, withSessionToken: Bool = false) -> Credential {
        let upper = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        let secretAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        var rng = SystemRandomNumberGenerator()
        let id = (withSessionToken ? "ASIA" : "AKIA") + String((0..<16).map { _ in upper.randomElement(using: &rng)! })
        let secret = String((0..<40).map { _ in secretAlphabet.randomElement(using: &rng)! })
        let token = withSessionToken ? String((0..<64).map { _ in secretAlphabet.randomElement(using: &rng)! }) : nil
        return Credential(accessKeyID: id, secretAccessKey: secret, sessionToken: token, scope: scope)
    }
}

extension Ledger {
    /// Stores `credential` (replacing one with the same access key id).
    public func storeCredential(_ credential: Credential) async throws {
        guard !credential.accessKeyID.isEmpty, credential.accessKeyID.utf8.count <= 128 else {
            throw LedgerError(.invalidParameter, "an access key id must be 1-128 bytes")
        }
        let schema = self.schema
        let value = Array(Self.json(credential).utf8)
        try await write { txn in
            try txn.put(schema.credentials, key: Array(credential.accessKeyID.utf8), value: value)
        }
    }

    /// The credential with this access key id, or nil. Sees credentials that another process
    /// (e.g. `syncledger credentials create`) stored after this ledger was opened.
    public func credential(accessKeyID: String) throws -> Credential? {
        guard !accessKeyID.isEmpty, accessKeyID.utf8.count <= 128 else { return nil }
        return try read { txn in
            try txn.get(schema.credentials, key: Array(accessKeyID.utf8)).map { bytes in
                do { return try JSONDecoder().decode(Credential.self, from: Data(bytes)) } catch {
                    throw LedgerError(.corruptData, "the credential \(accessKeyID) does not decode: \(error)")
                }
            }
        }
    }

    /// The stored admin credential; creates one when there is none. `created` says whether
    /// this call made it (so the caller prints it once).
    public func adminCredential() async throws -> (credential: Credential, created: Bool) {
        let schema = self.schema
        let fresh = Credential.generate(scope: .admin)
        let marker = Array("admin-access-key".utf8)
        return try await write { txn in
            if let id = try txn.get(schema.meta, key: marker),
               let bytes = try txn.get(schema.credentials, key: id),
               let stored = try? JSONDecoder().decode(Credential.self, from: Data(bytes)) {
                return (stored, false)
            }
            try txn.put(schema.credentials, key: Array(fresh.accessKeyID.utf8), value: Array(Self.json(fresh).utf8))
            try txn.put(schema.meta, key: marker, value: Array(fresh.accessKeyID.utf8))
            return (fresh, true)
        }
    }
}
