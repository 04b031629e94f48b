import Foundation
import NIOPosix
import Logging
import SyncLedger
import Synchronization

/// Why a pull from the leader merged nothing.
struct ReplicationFailure: Error, CustomStringConvertible {
    /// The kind of failure: the label of `syncledger_replication_errors_total`.
    enum Reason: String, CaseIterable, Sendable {
        /// The leader could not be reached or the connection broke (retried).
        case transport
        /// The leader answered with an error status (retried).
        case leaderError = "leader_error"
        /// The answer's signature is missing or wrong: it may not come from the leader.
        case badSignature = "bad_signature"
        /// Another ledger answers at the leader's address.
        case wrongLedger = "wrong_ledger"
        /// The leader's latest sequence is below this follower's checkpoint: it is not the
        /// ledger this follower replicated (or it was restored from an older copy).
        case sequenceRegressed = "sequence_regressed"
        /// The segment was refused by the merge (gap, broken chain, divergence, damage).
        case merge

        /// Failures that will not go away by retrying: the follower keeps checking, slowly,
        /// and merges nothing until an operator points it at the right leader.
        var halts: Bool { self == .wrongLedger || self == .sequenceRegressed }
    }

    let reason: Reason
    let message: String

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    var description: String { message }

    /// Up to `limit` bytes of text the leader sent before anything authenticated it (an error
    /// body), fit to log and to show: decoded as UTF-8 (a broken sequence becomes U+FFFD), and
    /// every control or format character — newlines, escapes, bidirectional overrides, line
    /// and paragraph separators — replaced by a space, so that it cannot forge log lines or
    /// restyle a terminal.
    static func printable(_ bytes: some Collection<UInt8>, limit: Int = 300) -> String {
        var out = String.UnicodeScalarView()
        for scalar in String(decoding: bytes.prefix(limit), as: UTF8.self).unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse, .unassigned:
                out.append(" ")
            default:
                out.append(scalar)
            }
        }
        return String(out)
    }
}

/// What a follower knows about its replication: shown in `/metrics` and the digest answer.
final class ReplicationStatus: Sendable {
    struct State {
        var leaderSequence: UInt64 = 0
        var checkpoint: UInt64 = 0
        var caughtUpAt = Date()
        var lastError: String?
        var lastErrorReason: ReplicationFailure.Reason?
        var errors: [ReplicationFailure.Reason: UInt64] = [:]
        /// Feed answers received, by HTTP status (200: a segment, 204: nothing new).
        var pulls: [Int: UInt64] = [:]
    }

    let leader: String
    let state = Mutex(State())
    /// Checks of the leader's signed digests (``Follower/checkLeaderDigest()``).
    let digest = LeaderDigestStatus()

    init(leader: String) { self.leader = leader }

    var lagEntries: UInt64 { state.withLock { $0.leaderSequence > $0.checkpoint ? $0.leaderSequence - $0.checkpoint : 0 } }
    var lagSeconds: Double {
        state.withLock { $0.leaderSequence > $0.checkpoint ? Date().timeIntervalSince($0.caughtUpAt) : 0 }
    }

    func recordFailure(_ failure: ReplicationFailure) {
        state.withLock { s in
            s.lastError = failure.message
            s.lastErrorReason = failure.reason
            s.errors[failure.reason, default: 0] += 1
        }
    }

    func write(_ w: inout JSONWriter) {
        let s = state.withLock { $0 }
        w.member("Leader", leader)
        w.member("LeaderSequence", int: s.leaderSequence)
        w.member("Checkpoint", int: s.checkpoint)
        w.member("LastError", s.lastError)
        w.member("LastErrorReason", s.lastErrorReason?.rawValue)
        digest.write(&w)
    }

    /// Sets the replication series at scrape time: the lag, the errors by reason, whether it
    /// halted, the pulls by status, and the leader digest checks.
    func refresh(into scrape: inout MetricsScrape) {
        let s = state.withLock { $0 }
        scrape.gauge("syncledger_replication_lag_entries", help: "Leader entries not yet applied by this follower.", lagEntries)
        scrape.gauge("syncledger_replication_lag_seconds", help: "Seconds since this follower was last caught up (0 when it is).", lagSeconds)
        for reason in ReplicationFailure.Reason.allCases {
            scrape.counter("syncledger_replication_errors_total", help: "Pulls from the leader that merged nothing, by reason.",
                           labels: [("reason", reason.rawValue)], total: s.errors[reason] ?? 0)
        }
        scrape.gauge("syncledger_replication_halted",
                     help: "1 while the leader's address answers with another ledger (or an older one): nothing is merged.",
                     s.lastErrorReason?.halts == true ? 1 : 0)
        for status in [200, 204] {
            scrape.counter("syncledger_replication_pulls_total", help: "Authenticated feed answers from the leader, by HTTP status.",
                           labels: [("status", String(status))], total: s.pulls[status] ?? 0)
        }
        digest.refresh(into: &scrape)
    }
}

/// Pulls the leader's change feed as segments, authenticates every answer, verifies and merges
/// the segments, and keeps the checkpoint in the ledger, so a restart or a cut connection
/// resumes where it stopped.
///
/// Each pull long-polls: the leader holds it until it has entries after the checkpoint or
/// ``wait`` passes, so an idle follower sends one request per ``wait`` and a write reaches it
/// as soon as it is committed.
struct Follower: Sendable {
    let ledger: Ledger
    let client: LeaderClient
    /// The secret of the shared admin credential: it signs the requests and keys the answers'
    /// signatures.
    let secret: String
    let status: ReplicationStatus
    let logger: Logger
    /// How long the leader may hold a pull that finds nothing new.
    var wait: Duration = .seconds(20)
    /// The most segment bytes asked for per pull.
    var maxBytes = 1 << 20

    /// The shortest time between two pulls that found nothing new: the pace when the leader
    /// does not hold pulls (``wait`` 0, or a leader that ignores it).
    var minimumEmptyPullInterval: Duration = .milliseconds(500)
    /// The leader's digest key: when set, the leader's signed digests are checked against this
    /// replica when it is caught up (``checkLeaderDigest()``).
    var digestKey: DigestPublicKey?
    /// The least time between two such checks.
    var digestInterval: Duration = .seconds(60)

    /// Runs until the task is cancelled. Failures are logged, counted and retried with
    /// backoff; nothing that fails a check is ever merged.
    func run() async {
        var backoff = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                let started = ContinuousClock.now
                let merged = try await pullOnce()
                backoff = .milliseconds(100)
                let elapsed = ContinuousClock.now - started
                if !merged, elapsed < minimumEmptyPullInterval {
                    try await Task.sleep(for: minimumEmptyPullInterval - elapsed)
                }
            } catch {
                if Task.isCancelled || error is CancellationError { return }
                let failure = error as? ReplicationFailure ?? ReplicationFailure(.transport, "cannot reach the leader \(client.url): \(error)")
                status.recordFailure(failure)
                let pause = failure.reason.halts ? max(backoff, .seconds(1)) : backoff
                logger.warning("replication pull merged nothing; retrying", metadata: [
                    "reason": "\(failure.reason.rawValue)", "error": "\(failure.message)",
                    "retry_ms": "\(pause.milliseconds)",
                ])
                do { try await Task.sleep(for: pause) } catch { return }
                backoff = min(backoff * 2, failure.reason.halts ? .seconds(30) : .seconds(5))
            }
        }
    }

    /// One long-polled GET of the feed after the checkpoint; merges what it brings and
    /// returns whether it brought a segment.
    @discardableResult
    func pullOnce() async throws -> Bool {
        let checkpoint = try ledger.replicationCheckpoint
        let nonce = FeedAuthentication.makeNonce()
        let waitSeconds = max(0, wait.components.seconds)
        let query = "after=\(checkpoint)&maxBytes=\(maxBytes)&wait=\(waitSeconds)"
        let answer = try await client.get(path: "/segments/feed", query: query, signedHeaders: [(FeedAuthentication.nonceHeader, nonce)],
                                          deadline: wait + .seconds(60))
        guard answer.status == 200 || answer.status == 204 else {
            throw ReplicationFailure(.leaderError, "the leader \(client.url) answered \(answer.status): \(ReplicationFailure.printable(answer.body))")
        }
        let (ledgerID, leaderSequence) = try authenticate(answer, nonce: nonce, after: checkpoint)
        // From here on the answer is the leader's own, for this request.
        status.state.withLock { $0.pulls[answer.status, default: 0] += 1 }
        if let known = try ledger.replicationLeaderID, known != ledgerID {
            throw ReplicationFailure(.wrongLedger, "the leader's address \(client.url) now answers with ledger \(ledgerID), but this follower replicates ledger \(known); nothing was merged — point --follow at the right leader, or start this follower on a new data directory")
        }
        guard leaderSequence >= checkpoint else {
            throw ReplicationFailure(.sequenceRegressed, "the leader \(client.url) (ledger \(ledgerID)) is at sequence \(leaderSequence), below this follower's checkpoint \(checkpoint): it is not the history this follower replicated (restored from an older copy?); nothing was merged")
        }
        status.state.withLock { $0.leaderSequence = leaderSequence; $0.checkpoint = checkpoint }
        guard answer.status == 200 else {
            status.state.withLock { $0.caughtUpAt = Date(); $0.lastError = nil; $0.lastErrorReason = nil }
            await checkLeaderDigest()
            return false
        }
        let report: MergeReport
        do {
            // Checking a segment (SHA-256, zstd, every hash) is CPU work: off the cooperative pool.
            let (ledger, body) = (self.ledger, answer.body)
            let segment = try await NIOThreadPool.singleton.runIfActive { try ledger.decodeSegment(body) }
            report = try await ledger.mergeFromLeader(segment, leaderID: ledgerID)
        } catch let error as LedgerError where error.code == .wrongLedger {
            throw ReplicationFailure(.wrongLedger, "\(error.message) (leader address \(client.url))")
        } catch let error as LedgerError where error.code != .closed && error.code != .diskFull && error.code != .storage {
            throw ReplicationFailure(.merge, "the leader's segment after sequence \(checkpoint) was refused: \(error.message)")
        }
        status.state.withLock { state in
            state.checkpoint = report.lastSourceSequence
            state.lastError = nil
            state.lastErrorReason = nil
            if state.checkpoint >= state.leaderSequence { state.caughtUpAt = Date() }
        }
        logger.debug("replicated", metadata: ["applied": "\(report.applied)", "skipped": "\(report.skipped)", "checkpoint": "\(report.lastSourceSequence)"])
        if report.lastSourceSequence >= leaderSequence { await checkLeaderDigest() }
        return true
    }

    /// Checks the answer's signature (docs/replication.md); returns the leader's ledger id and
    /// latest sequence, which the signature covers.
    private func authenticate(_ answer: LeaderClient.Answer, nonce: String, after: UInt64) throws -> (String, UInt64) {
        guard let signature = answer.header(FeedAuthentication.signatureHeader) else {
            throw ReplicationFailure(.badSignature, "the answer from \(client.url) is not signed (no \(FeedAuthentication.signatureHeader)): it is not from a SyncLedger leader of this version, or something between rewrote it; nothing was merged")
        }
        guard let ledgerID = answer.header(FeedAuthentication.ledgerIDHeader), !ledgerID.isEmpty,
              let sequenceText = answer.header(FeedAuthentication.lastSequenceHeader), let sequence = UInt64(sequenceText) else {
            throw ReplicationFailure(.badSignature, "the answer from \(client.url) lacks \(FeedAuthentication.ledgerIDHeader) or \(FeedAuthentication.lastSequenceHeader); nothing was merged")
        }
        let fields = FeedAuthentication.Answer(nonce: nonce, status: answer.status, after: after, ledgerID: ledgerID, lastSequence: sequence, body: answer.body)
        guard FeedAuthentication.verify(signature, fields, secret: secret) else {
            throw ReplicationFailure(.badSignature, "the signature of the answer from \(client.url) does not match (a different admin secret, or the answer was altered on the way); nothing was merged")
        }
        return (ledgerID, sequence)
    }
}
