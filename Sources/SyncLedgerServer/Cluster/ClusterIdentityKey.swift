import Foundation
import Logging
import NATS
public import SyncLedger

/// The generation of the cluster's OpenID signing key (``IdentityKeyring``), kept in the
/// settings bucket (`syncledger_cluster`, key `identity-key`) as a value sealed with the
/// cluster's key. No entry: generation 1. `syncledger cluster rotate-identity-key` moves it;
/// every node reads it at start and every second after, and never moves backwards (a value put
/// back from before a rotation is ignored).
enum ClusterIdentityKey {
    static let key = "identity-key"

    /// The generation stored in `settings`: nil when there is none; `.forged` when the value
    /// is not authenticated.
    static func read(_ settings: KeyValue, sealing: ClusterSealing) async throws -> Stored? {
        guard let entry = try await settings.get(key) else { return nil }
        guard let generation = sealing.open(IdentityKeyGeneration.self, entry.value, bucket: ClusterNames.settings, key: key) else {
            return .forged(revision: entry.revision)
        }
        return .generation(generation, revision: entry.revision)
    }

    enum Stored {
        case generation(IdentityKeyGeneration, revision: UInt64)
        case forged(revision: UInt64)
    }

    /// Moves `keyring` to the stored generation when it is later than the one in force.
    /// - Returns: whether it moved.
    static func follow(_ settings: KeyValue, sealing: ClusterSealing, keyring: IdentityKeyring, counters: ShardCounters) async throws -> Bool {
        switch try await read(settings, sealing: sealing) {
        case .generation(let stored, _):
            let now = keyring.generation
            guard stored.current > now.current || (stored.current == now.current && stored != now) else { return false }
            keyring.set(stored)
            return true
        case .forged:
            counters.noteForgedRecord()
            return false
        case nil:
            return false
        }
    }
}

extension ClusterNode {
    /// Keeps the ledger's OpenID keyring at the cluster's generation, reading it every second
    /// until cancelled.
    func followIdentityKey(_ keyring: IdentityKeyring, settings: KeyValue, logger: Logger) async {
        while !Task.isCancelled {
            do {
                if try await ClusterIdentityKey.follow(settings, sealing: log.sealing, keyring: keyring, counters: counters) {
                    logger.info("the cluster's OpenID signing key moved to a new generation", metadata: ["generation": "\(keyring.generation.current)"])
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("could not read the OpenID signing key's generation", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

extension ClusterAdmin {
    /// Rotates the cluster's OpenID signing key: the next generation signs from now on (each
    /// node within a second or two), and the current one stays in the JWKS and is accepted for
    /// `overlap` more (tokens live up to 24 h). Returns the new generation.
    /// - Throws: `.invalidParameter` without the cluster secret, or when the stored value is not
    ///   authenticated (then nothing is written); `.notFound` when there is no cluster.
    public func rotateIdentityKey(overlap: Duration) async throws -> IdentityKeyGeneration {
        guard let sealing else {
            throw LedgerError(.invalidParameter, "rotate-identity-key needs the cluster secret: set SYNCLEDGER_CLUSTER_SECRET (or --cluster-secret-file), or SYNCLEDGER_SECRET_ACCESS_KEY when the nodes derive it from the admin secret")
        }
        guard let settings = try await jetStream.keyValue(bucket: ClusterNames.settings) else {
            throw LedgerError(.notFound, "no SyncLedger cluster on these servers yet (a node or `cluster import` creates it)")
        }
        let now = Timestamp(milliseconds: Int64(Date().timeIntervalSince1970 * 1000))
        let (current, revision): (IdentityKeyGeneration, UInt64)
        switch try await ClusterIdentityKey.read(settings, sealing: sealing) {
        case .generation(let stored, let r): (current, revision) = (stored, r)
        case .forged:
            throw LedgerError(.invalidParameter, "the stored OpenID key generation is not authenticated by this cluster secret (a wrong secret, or a forged value); nothing was written")
        case nil: (current, revision) = (.first, 0)
        }
        let next = current.rotated(at: now, overlap: overlap)
        let value = sealing.seal(next, bucket: ClusterNames.settings, key: ClusterIdentityKey.key)
        do {
            _ = try await settings.update(ClusterIdentityKey.key, value, lastRevision: revision)
        } catch where error.isWrongLastSequence {
            throw LedgerError(.conflict, "another rotation of the OpenID signing key ran at the same time; nothing was written, look again")
        }
        return next
    }
}
