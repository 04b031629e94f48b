import Crypto
import Foundation
import Synchronization

/// Which generation of a cluster's OpenID signing key is current, and which earlier one still
/// verifies until when (the overlap after a rotation: tokens it signed live up to 24 h).
public struct IdentityKeyGeneration: Codable, Sendable, Equatable {
    /// The generation that signs new tokens (from 1).
    public var current: UInt64
    /// The generation before it, listed in the JWKS and accepted until ``previousUntil``.
    public var previous: UInt64?
    /// Until when the previous generation is served and accepted.
    public var previousUntil: Timestamp?

    /// Generation `current`, with `previous` accepted until `previousUntil`.
    public init(current: UInt64, previous: UInt64? = nil, previousUntil: Timestamp? = nil) {
        self.current = current
        self.previous = previous
        self.previousUntil = previousUntil
    }

    /// The first generation, before any rotation.
    public static let first = IdentityKeyGeneration(current: 1)

    /// The generation after a rotation at `now`: the current one becomes the previous one,
    /// accepted for `overlap` more.
    public func rotated(at now: Timestamp, overlap: Duration) -> IdentityKeyGeneration {
        IdentityKeyGeneration(current: current + 1, previous: current, previousUntil: now.adding(overlap))
    }
}

/// The OpenID signing keys of a cluster: every node derives the same ES256 key of each
/// generation from a seed of the cluster secret (``ClusterKeys/identitySeed``), so every node
/// serves the same JWKS and verifies every other node's tokens, and a token outlives the
/// registry shard's moving between nodes. A rotation (`syncledger cluster rotate-identity-key`)
/// moves the generation; the previous key is listed and accepted during the overlap.
///
/// Each key's id (`kid`) is `g<generation>-` and 16 hex digits of SHA-256 of its public key.
public final class IdentityKeyring: Sendable {
    private let seed: [UInt8]
    private let state: Mutex<IdentityKeyGeneration>
    private let cache = Mutex<[UInt64: P256.Signing.PrivateKey]>([:])

    /// A keyring of `seed` (32 bytes or more) at `generation`.
    public init(seed: [UInt8], generation: IdentityKeyGeneration = .first) {
        self.seed = seed
        self.state = Mutex(generation)
    }

    /// The generation in force.
    public var generation: IdentityKeyGeneration {
        get { state.withLock { $0 } }
    }

    /// Moves to `generation` (read from the cluster).
    public func set(_ generation: IdentityKeyGeneration) { state.withLock { $0 = generation } }

    /// The key of generation `n`: HKDF-SHA256 of the seed with info `openid-signing-key/<n>`
    /// (and a counter, in the vanishingly rare case that 32 bytes are not a valid P-256 scalar).
    func key(_ generation: UInt64) -> P256.Signing.PrivateKey {
        if let known = cache.withLock({ $0[generation] }) { return known }
        var attempt = 0
        while true {
            let info = Array("openid-signing-key/\(generation)".utf8) + (attempt == 0 ? [] : Array("/\(attempt)".utf8))
            let raw = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: seed), salt: ClusterKeys.salt, info: info, outputByteCount: 32)
                .withUnsafeBytes { Array($0) }
            if let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) {
                cache.withLock { $0[generation] = key }
                return key
            }
            attempt += 1
        }
    }

    /// The key id of generation `n`'s key.
    func keyID(_ generation: UInt64) -> String {
        "g\(generation)-" + Hex.encode(SHA256.hash(data: key(generation).publicKey.rawRepresentation).prefix(8))
    }

    /// The key that signs new tokens, and its id.
    var signing: (kid: String, key: P256.Signing.PrivateKey) {
        let current = generation.current
        return (keyID(current), key(current))
    }

    /// The generations whose keys the JWKS lists at `now`: the current one, and the previous
    /// one while its overlap lasts.
    func listed(at now: Timestamp) -> [UInt64] {
        let g = generation
        guard let previous = g.previous, let until = g.previousUntil, now < until else { return [g.current] }
        return [g.current, previous]
    }

    /// The key verifying a token whose header names `kid`, at `now`: a listed generation's, or
    /// the next generation's (a node that has already seen a rotation this node will see at its
    /// next read signs with it). Nil for any other kid.
    func verifying(kid: String, at now: Timestamp) -> P256.Signing.PublicKey? {
        guard kid.hasPrefix("g"), let dash = kid.firstIndex(of: "-"), let n = UInt64(kid[kid.index(after: kid.startIndex)..<dash]) else { return nil }
        guard listed(at: now).contains(n) || n == generation.current + 1, keyID(n) == kid else { return nil }
        return key(n).publicKey
    }
}
