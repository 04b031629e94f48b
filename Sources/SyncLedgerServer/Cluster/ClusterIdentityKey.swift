import Foundation
import Logging
import NATS
public import SyncLedger
import Synchronization

/// The generation of the cluster's OpenID signing key (``IdentityKeyring``), kept in the
/// settings bucket (`syncledger_cluster`, key `identity-key`) as a value sealed with the
/// cluster's key, together with the time of the rotation that made it (``RotatedGeneration``).
/// No entry: generation 1. `syncledger cluster rotate-identity-key` moves it; every node reads
/// it at start and every second after, and never moves backwards: not below the newest
/// generation it has seen (kept in its data directory, ``IdentityKeyFloor``, so a restarted
/// node does not take an older value put back for the current one), nor to a value whose
/// rotation is older than the one in force.
enum ClusterIdentityKey {
    static let key = "identity-key"

    /// The generation stored in `settings`: nil when there is none; `.forged` when the value
    /// is not authenticated.
    static func read(_ settings: KeyValue, sealing: ClusterSealing) async throws -> Stored? {
        guard let entry = try await settings.get(key) else { return nil }
        guard let rotated = open(entry.value, sealing: sealing) else { return .forged(revision: entry.revision) }
        return .generation(rotated, value: entry.value, revision: entry.revision)
    }

    /// A stored value's generation, when it is authenticated.
    static func open(_ value: [UInt8], sealing: ClusterSealing) -> RotatedGeneration? {
        sealing.open(RotatedGeneration.self, value, bucket: ClusterNames.settings, key: key)
    }

    enum Stored {
        case generation(RotatedGeneration, value: [UInt8], revision: UInt64)
        case forged(revision: UInt64)
    }

    /// Moves `keyring` to the stored generation when it is later than the one in force and
    /// the newest `floor` has seen.
    /// - Returns: whether it moved.
    static func follow(_ settings: KeyValue, sealing: ClusterSealing, keyring: IdentityKeyring, floor: IdentityKeyFloor,
                       counters: ShardCounters) async throws -> Bool {
        switch try await read(settings, sealing: sealing) {
        case .generation(let stored, let value, _):
            guard floor.admit(stored, value: value) else { return false }
            let now = keyring.generation
            guard stored.generation.current > now.current || (stored.generation.current == now.current && stored.generation != now) else { return false }
            keyring.set(stored.generation)
            return true
        case .forged:
            counters.noteForgedRecord()
            return false
        case nil:
            return false
        }
    }
}

/// A generation of the OpenID signing key as stored in the settings bucket: the generation and
/// when the rotation that made it ran (milliseconds since 1970), sealed together.
struct RotatedGeneration: Codable, Sendable, Equatable {
    var generation: IdentityKeyGeneration
    var rotatedAt: Int64
}

/// The newest generation of the OpenID signing key a node has taken, kept (as the sealed value
/// read from the cluster) in a file of its data directory: a node refuses any older one — a
/// lower generation, or the same one from an earlier rotation — even after a restart, so a value
/// put back from before a rotation never moves it backwards.
final class IdentityKeyFloor: Sendable {
    private let file: String?
    private let sealing: ClusterSealing
    private let newest: Mutex<RotatedGeneration?>

    /// The floor kept in `file` (nil: in memory only); a file that is missing, unreadable or not
    /// authenticated by `sealing` counts as nothing seen.
    init(file: String?, sealing: ClusterSealing) {
        self.file = file
        self.sealing = sealing
        let stored = file.flatMap { FileManager.default.contents(atPath: $0) }.flatMap { ClusterIdentityKey.open(Array($0), sealing: sealing) }
        self.newest = Mutex(stored)
    }

    /// The newest generation seen.
    var generation: RotatedGeneration? { newest.withLock { $0 } }

    /// Whether `rotated` (its sealed bytes `value`) is no older than the newest seen; when it is
    /// newer it becomes the newest, and is written to the file (atomically) before this returns.
    func admit(_ rotated: RotatedGeneration, value: [UInt8]) -> Bool {
        newest.withLock { newest in
            if let seen = newest {
                guard rotated.generation.current >= seen.generation.current, rotated.rotatedAt >= seen.rotatedAt else { return false }
                if rotated == seen { return true }
            }
            if let file {
                // Not kept: the node still follows the cluster, but a restart forgets this one.
                do { try Data(value).write(to: URL(fileURLWithPath: file), options: .atomic) } catch {}
            }
            newest = rotated
            return true
        }
    }
}

extension ClusterNode {
    /// Keeps the ledger's OpenID keyring at the cluster's generation, reading it every second
    /// until cancelled.
    func followIdentityKey(_ keyring: IdentityKeyring, floor: IdentityKeyFloor, settings: KeyValue, logger: Logger) async {
        while !Task.isCancelled {
            do {
                if try await ClusterIdentityKey.follow(settings, sealing: log.sealing, keyring: keyring, floor: floor, counters: counters) {
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
        case .generation(let stored, _, let r): (current, revision) = (stored.generation, r)
        case .forged:
            throw LedgerError(.invalidParameter, "the stored OpenID key generation is not authenticated by this cluster secret (a wrong secret, or a forged value); nothing was written")
        case nil: (current, revision) = (.first, 0)
        }
        let next = current.rotated(at: now, overlap: overlap)
        let value = try sealing.seal(RotatedGeneration(generation: next, rotatedAt: now.milliseconds), bucket: ClusterNames.settings, key: ClusterIdentityKey.key)
        do {
            _ = try await settings.update(ClusterIdentityKey.key, value, lastRevision: revision)
        } catch where error.isWrongLastSequence {
            throw LedgerError(.conflict, "another rotation of the OpenID signing key ran at the same time; nothing was written, look again")
        }
        return next
    }
}
