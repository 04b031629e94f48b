import Crypto
import Foundation
import LedgerStorage
import Synchronization

/// Records of system streams decoded once and reused while their stream is unchanged: an entry
/// is used only when the stream's sync count is the one it was read at, so a change by this
/// process or by a command beside it (another process on the same data directory) is seen at
/// once. Bounded: it starts over past ``limit`` entries.
final class SystemRecordCache<Value: Sendable>: Sendable {
    private let entries = Mutex<[String: (offset: UInt64, value: Value?)]>([:])
    static var limit: Int { 10_000 }

    /// Record `key` of `stream` (nil when absent), decoded with `decode` when not cached.
    func value(_ ledger: Ledger, _ stream: StreamName, key: String, decode: (String) throws -> Value) throws -> Value? {
        let cacheKey = String(decoding: stream.key, as: UTF8.self) + "\u{0}" + key
        return try ledger.read { txn -> Value? in
            guard let head = try ledger.head(txn, stream) else { return nil }
            if let hit = entries.withLock({ $0[cacheKey] }), hit.offset == head.offset { return hit.value }
            let view = try StoredDatasetView(txn: txn, schema: ledger.schema, stream: stream, streamID: head.id)
            let value = try view.storedRecord(key)?.value.map(decode)
            entries.withLock { cache in
                if cache.count >= Self.limit { cache.removeAll() }
                cache[cacheKey] = (head.offset, value)
            }
            return value
        }
    }
}

/// ID tokens of OpenID Connect providers that verified, by SHA-256 of the token, with the
/// provider's configuration time and the extra audiences they were checked with. A hit skips the
/// signature and claim checks but not the expiry: a cached token stops working at its `exp`,
/// and a provider configured again (new keys) makes every entry of it miss. Bounded: it starts
/// over past ``limit`` entries.
final class VerifiedTokenCache: Sendable {
    struct Entry: Sendable {
        let provider: String
        let configured: Timestamp
        let audiences: Set<String>
        let subject: String
        let expires: Timestamp
    }
    private let entries = Mutex<[[UInt8]: Entry]>([:])
    static let limit = 10_000

    static func digest(_ token: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: token)) }

    /// The subject of a token that verified for this provider configuration and audiences and
    /// has not expired at `now`.
    func subject(_ digest: [UInt8], provider: OpenIDProvider, audiences: Set<String>, now: Timestamp) -> String? {
        guard let hit = entries.withLock({ $0[digest] }), hit.provider == provider.name, hit.configured == provider.configured,
              hit.audiences == audiences, now < hit.expires else { return nil }
        return hit.subject
    }

    /// Remembers a token that verified.
    func insert(_ digest: [UInt8], _ entry: Entry) {
        entries.withLock { cache in
            if cache.count >= Self.limit { cache.removeAll() }
            cache[digest] = entry
        }
    }
}
