import Crypto
import Foundation
import LedgerStorage

/// The keys a cluster's nodes share, each derived by HKDF-SHA256 from the cluster secret (the
/// shared admin secret, or `--cluster-secret-file`) with an info string of its own, so no key serves
/// two purposes and none reveals the secret:
///
/// - shard messages (entries and fences) are authenticated by an HMAC-SHA256 over their shard,
///   kind, publishing node and exact payload (``shardMessageMAC(shard:kind:node:payload:)``);
/// - values of the cluster's KV buckets (shard leases, node records, the identity key's
///   generation) by an HMAC-SHA256 over their bucket, key and exact bytes (``sealRecord(_:bucket:key:)``);
/// - the OpenID signing keys of every generation (``IdentityKeyring``) come from a seed of their own;
/// - a request one node forwards to its shard's owner by an HMAC-SHA256 over the forwarding node,
///   method, path and query, the body's SHA-256 and a timestamp (``forwardedRequestMAC(node:method:target:body:timestamp:)``):
///   the owner then knows the request was already counted by the node it arrived at.
///
/// Bound to its context, a valid MAC cannot be moved onto another shard, kind or key.
public struct ClusterKeys: Sendable {
    private let shardMessages: SymmetricKey
    private let records: SymmetricKey
    private let forwardedRequests: SymmetricKey
    /// The seed of the cluster's OpenID signing keys (see ``IdentityKeyring``).
    public let identitySeed: [UInt8]

    /// The salt of every derivation (the same as the session-token key's).
    static let salt = Array("syncledger-cluster".utf8)

    /// Derives the keys from the cluster secret.
    public init(secret: String) {
        func derive(_ info: String) -> SymmetricKey {
            HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Array(secret.utf8)), salt: Self.salt, info: Array(info.utf8), outputByteCount: 32)
        }
        shardMessages = derive("shard-messages/v1")
        records = derive("kv-records/v1")
        forwardedRequests = derive("forwarded-requests/v1")
        identitySeed = derive("openid-signing-key/v1").withUnsafeBytes { Array($0) }
    }

    // MARK: Shard messages

    /// The MAC of a shard message (64 hex digits): HMAC-SHA256 over a domain tag, the shard,
    /// the message's kind and publishing node (each length-prefixed) and the payload.
    public func shardMessageMAC(shard: Int, kind: String, node: String, payload: [UInt8]) -> String {
        var mac = HMAC<SHA256>(key: shardMessages)
        mac.update(data: Array("syncledger shard message v1".utf8))
        mac.update(data: [UInt8].bigEndian(UInt64(shard)))
        for part in [kind, node] {
            mac.update(data: [UInt8].bigEndian(UInt64(part.utf8.count)))
            mac.update(data: Array(part.utf8))
        }
        mac.update(data: [UInt8].bigEndian(UInt64(payload.count)))
        mac.update(data: payload)
        return Self.hex(Array(mac.finalize()))
    }

    /// Whether `mac` authenticates a message of `shard` with this kind, node and payload
    /// (compared in constant time).
    public func isAuthentic(shard: Int, kind: String, node: String, payload: [UInt8], mac: String) -> Bool {
        Self.constantTimeEqual(Array(shardMessageMAC(shard: shard, kind: kind, node: node, payload: payload).utf8), Array(mac.utf8))
    }

    // MARK: KV records

    /// `body` sealed for key `key` of bucket `bucket`: 64 hex digits of its MAC, `.`, then the
    /// body's exact bytes.
    public func sealRecord(_ body: [UInt8], bucket: String, key: String) -> [UInt8] {
        Array(recordMAC(body, bucket: bucket, key: key).utf8) + [UInt8(ascii: ".")] + body
    }

    /// The body of a value ``sealRecord(_:bucket:key:)`` made for this bucket and key; nil for
    /// anything else (no MAC, another key's or bucket's, a changed byte, a record of another
    /// cluster or of a version before records were sealed).
    public func openRecord(_ value: [UInt8], bucket: String, key: String) -> [UInt8]? {
        guard value.count > 65, value[64] == UInt8(ascii: ".") else { return nil }
        let body = Array(value[65...])
        guard Self.constantTimeEqual(Array(recordMAC(body, bucket: bucket, key: key).utf8), Array(value[0..<64])) else { return nil }
        return body
    }

    private func recordMAC(_ body: [UInt8], bucket: String, key: String) -> String {
        var mac = HMAC<SHA256>(key: records)
        mac.update(data: Array("syncledger kv record v1".utf8))
        for part in [bucket, key] {
            mac.update(data: [UInt8].bigEndian(UInt64(part.utf8.count)))
            mac.update(data: Array(part.utf8))
        }
        mac.update(data: [UInt8].bigEndian(UInt64(body.count)))
        mac.update(data: body)
        return Self.hex(Array(mac.finalize()))
    }

    // MARK: Forwarded requests

    /// The MAC of a request forwarded by `node` (64 hex digits): HMAC-SHA256 over a domain tag,
    /// the node, the method and the target (path and query; each length-prefixed), the SHA-256
    /// of the body and `timestamp` (seconds since 1970).
    public func forwardedRequestMAC(node: String, method: String, target: String, body: [UInt8], timestamp: Int64) -> String {
        var mac = HMAC<SHA256>(key: forwardedRequests)
        mac.update(data: Array("syncledger forwarded request v1".utf8))
        for part in [node, method, target] {
            mac.update(data: [UInt8].bigEndian(UInt64(part.utf8.count)))
            mac.update(data: Array(part.utf8))
        }
        mac.update(data: Array(SHA256.hash(data: body)))
        mac.update(data: [UInt8].bigEndian(UInt64(bitPattern: timestamp)))
        return Self.hex(Array(mac.finalize()))
    }

    /// Whether `mac` authenticates this forwarded request (compared in constant time).
    public func isAuthenticForward(node: String, method: String, target: String, body: [UInt8], timestamp: Int64, mac: String) -> Bool {
        Self.constantTimeEqual(Array(forwardedRequestMAC(node: node, method: method, target: target, body: body, timestamp: timestamp).utf8), Array(mac.utf8))
    }

    static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in a.indices { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}
