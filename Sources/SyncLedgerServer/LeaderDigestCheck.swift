import Foundation
import NIOPosix
import Logging
import SyncLedger
import Synchronization

/// What a follower found checking its leader's signed digests against its own replica
/// (docs/proofs.md, "Followers"): shown in `/metrics` and the digest answer.
final class LeaderDigestStatus: Sendable {
    /// The outcome of one check: the label of `syncledger_replication_digest_checks_total`.
    enum Result: String, CaseIterable, Sendable {
        /// The replica's Merkle root at the digest's tree size is the leader's signed one.
        case match
        /// It is not: this replica does not hold the leader's history.
        case mismatch
        /// The digest is not signed by the configured key (or does not decode).
        case badSignature = "bad_signature"
        /// The leader could not give a digest (unreachable, an error answer).
        case unavailable
    }

    struct State {
        var checks: [Result: UInt64] = [:]
        /// The largest tree size verified to match.
        var verifiedSize: UInt64 = 0
        /// The latest problem (mismatch, bad signature); nil once a later digest matches.
        var problem: String?
        /// A signed digest waiting for this replica to reach its tree size.
        var pending: SignedDigest?
        var lastAttempt: ContinuousClock.Instant?
    }

    let state = Mutex(State())

    func record(_ result: Result, size: UInt64 = 0, problem: String? = nil) {
        state.withLock { s in
            s.checks[result, default: 0] += 1
            switch result {
            case .match: s.verifiedSize = max(s.verifiedSize, size); s.problem = nil
            case .mismatch, .badSignature: s.problem = problem
            case .unavailable: break
            }
        }
    }

    func write(_ w: inout JSONWriter) {
        let s = state.withLock { $0 }
        w.member("LeaderDigestVerifiedSize", int: s.verifiedSize)
        w.member("LeaderDigestProblem", s.problem)
    }

    /// Sets the digest-check series at scrape time.
    func refresh(into scrape: inout MetricsScrape) {
        let s = state.withLock { $0 }
        for result in Result.allCases {
            scrape.counter("syncledger_replication_digest_checks_total", help: "Checks of the leader's signed digest against this replica, by result.",
                           labels: [("result", result.rawValue)], total: s.checks[result] ?? 0)
        }
        scrape.gauge("syncledger_replication_digest_verified_size", help: "The largest leader tree size this replica proved it holds.", s.verifiedSize)
        scrape.gauge("syncledger_replication_digest_mismatch",
                     help: "1 while the latest signed digest of the leader does not match this replica (or is not signed by its key).",
                     s.problem == nil ? 0 : 1)
    }
}

extension Follower {
    /// When caught up, at most once per ``digestInterval``: fetches the leader's signed digest
    /// (`GET /segments/signed-digest`), checks its signature with ``digestKey`` and, once this
    /// replica holds that many entries, compares the replica's Merkle root at that tree size.
    /// A mismatch or a bad signature is logged as an error, counted, and shown until a later
    /// digest matches. Never throws: replication goes on either way (what it merges is checked
    /// entry by entry already); this proves the whole history.
    func checkLeaderDigest() async {
        guard let key = digestKey else { return }
        let digests = status.digest
        let now = ContinuousClock.now
        let due = digests.state.withLock { s -> Bool in
            if let last = s.lastAttempt, now - last < digestInterval { return false }
            s.lastAttempt = now
            return true
        }
        guard due else { return }
        let ledger = self.ledger
        // Fetch a new digest only when none waits for this replica to catch up.
        if digests.state.withLock({ $0.pending == nil }) {
            do {
                let answer = try await client.get(path: "/segments/signed-digest", query: "", signedHeaders: [], deadline: .seconds(60))
                guard answer.status == 200 else {
                    digests.record(.unavailable)
                    logger.warning("the leader gave no signed digest", metadata: ["status": "\(answer.status)", "body": "\(ReplicationFailure.printable(answer.body))"])
                    return
                }
                let digest: SignedDigest
                do { digest = try SignedDigest(json: answer.body, what: "the leader's signed digest") } catch {
                    return fail(.badSignature, "the leader's signed digest does not decode: \(error.message)")
                }
                guard digest.isSigned(by: key) else {
                    return fail(.badSignature, "the leader's digest of \(digest.treeSize) entries is not signed by the configured key \(key.keyID) (it names key \(ReplicationFailure.printable(Array(digest.keyID.utf8), limit: 64)))")
                }
                if let replicated = try ledger.replicationLeaderID, replicated != digest.ledgerID {
                    return fail(.mismatch, "the leader's signed digest is of ledger \(ReplicationFailure.printable(Array(digest.ledgerID.utf8), limit: 64)), but this follower replicates ledger \(replicated)")
                }
                digests.state.withLock { $0.pending = digest }
            } catch {
                digests.record(.unavailable)
                logger.warning("cannot fetch the leader's signed digest", metadata: ["error": "\(error)"])
                return
            }
        }
        guard let pending = digests.state.withLock({ $0.pending }) else { return }
        do {
            // Not merged that far yet: checked when caught up.
            guard try ledger.replicationCheckpoint >= pending.treeSize else { return }
            let held = try ledger.lastSequence
            let mismatch = held < pending.treeSize
                ? "it has merged the leader's feed past sequence \(pending.treeSize) but holds only \(held) entries (entries were skipped as already present: it is not a copy of the leader's log)"
                : try await NIOThreadPool.singleton.runIfActive { try ledger.mismatch(with: pending) }
            digests.state.withLock { $0.pending = nil }
            if let mismatch {
                fail(.mismatch, "this replica does not hold the leader's signed history: \(mismatch)")
            } else {
                digests.record(.match, size: pending.treeSize)
                logger.debug("the leader's signed digest matches this replica", metadata: ["tree_size": "\(pending.treeSize)"])
            }
        } catch {
            digests.record(.unavailable)
            logger.warning("cannot check the leader's signed digest against this replica", metadata: ["error": "\(error)"])
        }
    }

    private func fail(_ result: LeaderDigestStatus.Result, _ problem: String) {
        status.digest.record(result, problem: problem)
        logger.error("LEADER DIGEST CHECK FAILED: \(problem)", metadata: ["result": "\(result.rawValue)", "leader": "\(client.url)"])
    }
}
