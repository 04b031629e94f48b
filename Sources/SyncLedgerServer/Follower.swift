import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncLedger
import Synchronization

/// What a follower knows about its replication: shown in `/metrics` and the digest answer.
final class ReplicationStatus: Sendable {
    struct State {
        var leaderSequence: UInt64 = 0
        var checkpoint: UInt64 = 0
        var caughtUpAt = Date()
        var lastError: String?
    }

    let leader: String
    let state = Mutex(State())

    init(leader: String) { self.leader = leader }

    var lagEntries: UInt64 { state.withLock { $0.leaderSequence > $0.checkpoint ? $0.leaderSequence - $0.checkpoint : 0 } }
    var lagSeconds: Double {
        state.withLock { $0.leaderSequence > $0.checkpoint ? Date().timeIntervalSince($0.caughtUpAt) : 0 }
    }

    func write(_ w: inout JSONWriter) {
        let s = state.withLock { $0 }
        w.member("Leader", leader)
        w.member("LeaderSequence", int: s.leaderSequence)
        w.member("Checkpoint", int: s.checkpoint)
        w.member("LastError", s.lastError)
    }

    func metrics() -> String {
        """
        # HELP syncledger_replication_lag_entries Leader entries not yet applied by this follower.
        # TYPE syncledger_replication_lag_entries gauge
        syncledger_replication_lag_entries \(lagEntries)
        # HELP syncledger_replication_lag_seconds Seconds since this follower was last caught up (0 when it is).
        # TYPE syncledger_replication_lag_seconds gauge
        syncledger_replication_lag_seconds \(lagSeconds)

        """
    }
}

/// Pulls the leader's change feed as segments, verifies and merges them, and keeps the
/// checkpoint in the ledger, so a restart or a cut connection resumes where it stopped.
struct Follower: Sendable {
    let ledger: Ledger
    let leaderHost: String
    let leaderPort: Int
    let signer: SigV4Signer
    let status: ReplicationStatus
    let logger: Logger
    var pollInterval: Duration = .milliseconds(200)
    var maxBytes = 1 << 20

    init(ledger: Ledger, leader: String, accessKeyID: String, secretAccessKey: String, status: ReplicationStatus, logger: Logger) throws {
        guard let url = URL(string: leader), let host = url.host, url.scheme == "http" else {
            throw WireError.invalidParameter("--follow needs an http://HOST:PORT URL, not \(leader)")
        }
        self.ledger = ledger
        self.leaderHost = host
        self.leaderPort = url.port ?? 80
        self.signer = SigV4Signer(accessKeyID: accessKeyID, secretAccessKey: secretAccessKey)
        self.status = status
        self.logger = logger
    }

    /// Runs until the task is cancelled.
    func run() async {
        var backoff = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                let pulled = try await pullOnce()
                backoff = .milliseconds(100)
                if !pulled { try await Task.sleep(for: pollInterval) }
            } catch is CancellationError {
                return
            } catch {
                status.state.withLock { $0.lastError = "\(error)" }
                logger.warning("replication pull failed; retrying", metadata: ["error": "\(error)", "retry_ms": "\(backoff.components.seconds * 1000 + backoff.components.attoseconds / 1_000_000_000_000_000)"])
                try? await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(5))
            }
        }
    }

    /// One GET of the feed after the checkpoint; returns whether it applied a segment.
    func pullOnce() async throws -> Bool {
        let checkpoint = try ledger.replicationCheckpoint
        let query = "after=\(checkpoint)&maxBytes=\(maxBytes)"
        let (code, headers, body) = try await get(path: "/segments/feed", query: query)
        let leaderSequence = headers.first(name: "x-syncledger-last-sequence").flatMap { UInt64($0) }
        if let leaderSequence { status.state.withLock { $0.leaderSequence = leaderSequence; $0.checkpoint = checkpoint } }
        switch code {
        case 204:
            status.state.withLock { $0.caughtUpAt = Date(); $0.lastError = nil }
            return false
        case 200:
            guard let leaderID = headers.first(name: "x-syncledger-ledger-id"), !leaderID.isEmpty else {
                throw WireError(type: "ReplicationError", status: 502, message: "the leader's answer does not name its ledger (x-syncledger-ledger-id)")
            }
            let report = try await ledger.mergeFromLeader(try ledger.decodeSegment(body), leaderID: leaderID)
            status.state.withLock { state in
                state.checkpoint = report.lastSourceSequence
                state.lastError = nil
                if state.checkpoint >= state.leaderSequence { state.caughtUpAt = Date() }
            }
            logger.debug("replicated", metadata: ["applied": "\(report.applied)", "skipped": "\(report.skipped)", "checkpoint": "\(report.lastSourceSequence)"])
            return true
        default:
            throw WireError(type: "ReplicationError", status: code, message: "the leader answered \(code): \(String(decoding: body.prefix(300), as: UTF8.self))")
        }
    }

    private func get(path: String, query: String) async throws -> (Int, HTTPHeaders, [UInt8]) {
        let host = "\(leaderHost):\(leaderPort)"
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
            .connect(host: leaderHost, port: leaderPort) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var headers = HTTPHeaders()
            headers.add(name: "host", value: host)
            for (name, value) in signer.sign(method: "GET", host: host, rawPath: path, rawQuery: query, body: []) {
                headers.add(name: name, value: value)
            }
            try await outbound.write(contentsOf: [
                .head(HTTPRequestHead(version: .http1_1, method: .GET, uri: "\(path)?\(query)", headers: headers)),
                .end(nil),
            ])
            var status = 0
            var responseHeaders = HTTPHeaders()
            var body: [UInt8] = []
            for try await part in inbound {
                switch part {
                case .head(let head):
                    status = Int(head.status.code)
                    responseHeaders = head.headers
                case .body(let buffer):
                    body += buffer.readableBytesView
                    guard body.count <= 80 << 20 else { throw WireError.invalidParameter("the leader's segment exceeds 80 MiB") }
                case .end:
                    return (status, responseHeaders, body)
                }
            }
            throw WireError.internalError("the leader closed the connection mid-response")
        }
    }
}
