import Foundation
import LedgerStorage

/// Where a SyncTrigger ARN's calls go: the webhook that stands in for the Lambda, and the secret
/// its requests are signed with (HMAC-SHA256). Kept in the secret store: never logged,
/// exported or replicated.
public struct SyncTriggerHook: Sendable, Hashable, Codable {
    /// The ARN a pool's `CognitoEvents` names for `SyncTrigger`.
    public var arn: String
    /// `https://…`, or `http://` to a loopback address.
    public var url: String
    /// The signing secret.
    public var secret: String
    /// When it was configured.
    public var configured: Timestamp

    /// A hook.
    public init(arn: String, url: String, secret: String, configured: Timestamp = .now) {
        self.arn = arn
        self.url = url
        self.secret = secret
        self.configured = configured
    }

    /// Checks the ARN, the URL (https, or http to 127.0.0.1, ::1 or localhost) and the secret
    /// (at least 16 bytes).
    /// - Throws: `.invalidParameter` naming the field.
    public func validate() throws(LedgerError) {
        guard (1...2048).contains(arn.utf8.count) else { throw LedgerError(.invalidParameter, "the SyncTrigger ARN must be 1-2048 characters") }
        guard let parts = URLComponents(string: url), let host = parts.host, !host.isEmpty, parts.user == nil, parts.password == nil else {
            throw LedgerError(.invalidParameter, "the hook URL must be https://HOST[:PORT]/PATH, not \(quoted(String(url.prefix(200))))")
        }
        let loopback = ["127.0.0.1", "::1", "localhost", "[::1]"].contains(host.lowercased())
        guard parts.scheme == "https" || (parts.scheme == "http" && loopback) else {
            throw LedgerError(.invalidParameter, "the hook URL must be https (plain http only to a loopback address), not \(quoted(String(url.prefix(200))))")
        }
        guard secret.utf8.count >= 16 else { throw LedgerError(.invalidParameter, "the hook's signing secret must be at least 16 bytes") }
    }
}

extension SecretStore {
    /// Stores (replacing) the hook of a SyncTrigger ARN.
    public func storeHook(_ hook: SyncTriggerHook) throws {
        try hook.validate()
        let bytes = Array(try JSONEncoder().encode(hook))
        try write { txn in try txn.put(hooks, key: Array(hook.arn.utf8), value: bytes) }
    }

    /// The hook of a SyncTrigger ARN, or nil.
    public func hook(arn: String) throws -> SyncTriggerHook? {
        guard (1...2048).contains(arn.utf8.count) else { return nil }
        return try read { txn in try txn.get(hooks, key: Array(arn.utf8)) }.map { bytes in
            do { return try JSONDecoder().decode(SyncTriggerHook.self, from: Data(bytes)) } catch {
                throw LedgerError(.corruptData, "the hook of \(arn) does not decode")
            }
        }
    }

    /// Every configured hook.
    public func hooksConfigured() throws -> [SyncTriggerHook] {
        try read { txn in
            try txn.withCursor(hooks) { cursor in
                var result: [SyncTriggerHook] = []
                var pair = try cursor.first()
                while let current = pair {
                    if let h = try? JSONDecoder().decode(SyncTriggerHook.self, from: Data(current.value)) { result.append(h) }
                    pair = try cursor.next()
                }
                return result
            }
        }
    }

    /// Removes the hook of a SyncTrigger ARN.
    /// - Throws: `.notFound` when none is configured.
    public func removeHook(arn: String) throws {
        guard try write({ txn in try txn.delete(hooks, key: Array(arn.utf8)) }) else {
            throw LedgerError(.notFound, "no hook is configured for \(arn)")
        }
    }
}
