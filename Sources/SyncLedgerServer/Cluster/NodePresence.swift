import Crypto
import Foundation
import Logging
import NATS
import SyncLedger
import Synchronization

/// Notices within about a second that another node's process is gone, well before its leases
/// run out. Each node answers requests on a subject of its own; a node whose subject has had
/// no subscriber for ``confirmation`` (NATS answers "no responders" at once when nobody
/// listens: a killed process's connection is closed by its kernel, and the servers drop its
/// interest) counts as gone, and the others take its shards without waiting for its leases.
///
/// Only a node that announced it answers (``NodeRecord/answersPresence``) is ever judged by
/// this; a node whose NATS user may not subscribe to `syncledger.alive.>` falls back to the
/// leases alone. Safety never rests on it: a node judged gone while alive (its connection
/// moving to another server for longer than the confirmation) loses its shards the way any
/// fenced owner does — its next write fails the stream's expected-sequence check.
final class NodePresence: Sendable {
    /// How long a node's subject must answer "no responders", probe after probe, before the
    /// node counts as gone.
    static let confirmation: Duration = .milliseconds(750)
    /// How often the others are probed.
    static let probeInterval: Duration = .milliseconds(150)

    private let client: NATSClient
    private let nodeID: String
    private let logger: Logger
    /// Since when each node's probes answer "no responders", whether it was reported gone, and
    /// the time its record said it announced itself when it was (none: it answered, or was not
    /// probed yet). A record announced later than that proves the node back (restarted, its
    /// subscription not yet made), whatever the probes say.
    private struct Silence {
        var since: ContinuousClock.Instant
        var reported = false
        var announcedAt: Int64?
    }
    private let silence = Mutex<[String: Silence]>([:])
    /// When each node last announced itself, by its record (``NodeRecord/at``).
    private let announced = Mutex<[String: Int64]>([:])

    /// Whether this node's own subject answers (it checked by probing itself).
    private let answering = Atomic<Bool>(false)

    init(client: NATSClient, nodeID: String, logger: Logger) {
        self.client = client
        self.nodeID = nodeID
        self.logger = logger
    }

    /// The subject node `id` answers on: a digest of the id, since ids may hold characters a
    /// subject may not.
    static func subject(_ id: String) -> String {
        "syncledger.alive." + Hex.encode(SHA256.hash(data: Array(id.utf8)).prefix(16))
    }

    /// Whether this node answers probes now (announced in its record).
    var answers: Bool { answering.load(ordering: .acquiring) }

    /// Answers probes on this node's subject until cancelled: subscribes again (after a short
    /// pause, growing to 2 s) whenever its subscription ends — the connection closed and opened
    /// again, or the servers refused it.
    func serve() async {
        var pause = Duration.milliseconds(100)
        while !Task.isCancelled {
            let started = ContinuousClock.now
            await serveOnce()
            if Task.isCancelled { return }
            // A subscription that lasted a while was healthy: start the pauses afresh.
            pause = ContinuousClock.now - started > .seconds(10) ? .milliseconds(100) : min(pause * 2, .seconds(2))
            try? await Task.sleep(for: pause)
        }
    }

    /// One subscription's life of ``serve()``. A subscription the servers refuse (the user may
    /// not subscribe there) is logged; the node then relies on leases alone until it answers.
    private func serveOnce() async {
        let subject = Self.subject(nodeID)
        do {
            let subscription = try await client.subscribe(subject)
            try await client.flush(timeout: .seconds(2))
            let check = Task { [self] in
                // The servers refuse a forbidden subscription asynchronously: a probe of this
                // node's own subject tells whether it answers.
                for _ in 0..<20 where !Task.isCancelled {
                    if (try? await client.request(subject, payload: [], timeout: .seconds(1))) != nil {
                        answering.store(true, ordering: .releasing)
                        return
                    }
                    try? await Task.sleep(for: .milliseconds(250))
                }
                logger.warning("this node's presence subject does not answer (the NATS user may not subscribe to syncledger.alive.>?); other nodes notice it gone only when its leases run out",
                               metadata: ["subject": "\(subject)"])
            }
            defer { check.cancel() }
            for try await message in subscription {
                guard let reply = message.replyTo else { continue }
                try? await client.publish(reply, payload: [])
            }
        } catch {
            if !Task.isCancelled {
                logger.warning("cannot answer presence probes; other nodes notice this one gone only when its leases run out",
                               metadata: ["error": "\(error)"])
            }
        }
    }

    /// Notes node `id`'s record as last read: announced at `at` (``NodeRecord/at``).
    func noteRecord(_ id: String, at: Int64) {
        announced.withLock { $0[id] = at }
    }

    /// Probes `nodes` once each. - Returns: the nodes that count as gone since this probe.
    func probe(_ nodes: [String]) async -> [String] {
        var newlyGone: [String] = []
        for node in nodes where node != nodeID {
            let now = ContinuousClock.now
            do {
                _ = try await client.request(Self.subject(node), payload: [], timeout: Self.probeInterval * 2)
                silence.withLock { $0[node] = nil }
            } catch NATSError.noResponders {
                let lastAnnounced = announced.withLock { $0[node] }
                let turnedGone = silence.withLock { all -> Bool in
                    var entry = all[node] ?? Silence(since: now)
                    if entry.reported, let then = entry.announcedAt, let latest = lastAnnounced, latest > then {
                        entry = Silence(since: now)  // back since (a newer record), silent again: count afresh
                    }
                    defer { all[node] = entry }
                    guard !entry.reported, now - entry.since >= Self.confirmation else { return false }
                    entry.reported = true
                    entry.announcedAt = lastAnnounced
                    return true
                }
                if turnedGone { newlyGone.append(node) }
            } catch {
                // A timeout or a lost connection says nothing about the other node. (A timeout
                // does not restart its silence either: on a loaded machine the "no responders"
                // answer itself can come late, and a dead node would then never be judged.)
            }
        }
        return newlyGone
    }

    /// Whether node `id`, whose record says it announced itself at `at`, counts as gone: its
    /// subject has answered "no responders" for at least ``confirmation``, it has not answered
    /// since, and it has not announced itself since it was judged gone.
    func isGone(_ id: String, announcedAt at: Int64) -> Bool {
        silence.withLock { all in
            guard let entry = all[id], entry.reported else { return false }
            return entry.announcedAt.map { at <= $0 } ?? true
        }
    }
}
