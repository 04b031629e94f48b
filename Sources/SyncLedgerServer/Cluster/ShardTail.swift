import Foundation
import Logging
import NATS
import SyncLedger

/// Keeps this node's LMDB a replica of every shard: one ordered consumer per shard stream from
/// the message after the shard's checkpoint, each message applied by the ledger (entries
/// chain-checked and applied by the same `apply`, fences recorded) in one transaction with the
/// checkpoint, so a restart resumes exactly after the last message applied.
final class ShardTail: Sendable {
    let shards: ShardMap
    let nodeID: String
    let ledger: Ledger
    let jetStream: JetStreamContext
    let ownership: ShardOwnership
    let counters: ShardCounters
    let sealing: ClusterSealing
    let logger: Logger

    init(shards: ShardMap, nodeID: String, ledger: Ledger, jetStream: JetStreamContext, ownership: ShardOwnership, counters: ShardCounters,
         sealing: ClusterSealing, logger: Logger) {
        self.shards = shards
        self.sealing = sealing
        self.nodeID = nodeID
        self.ledger = ledger
        self.jetStream = jetStream
        self.ownership = ownership
        self.counters = counters
        self.logger = logger
    }

    /// Tails every shard until cancelled.
    func run() async {
        await withTaskGroup(of: Void.self) { group in
            for shard in 0..<shards.count {
                group.addTask { await self.tail(shard) }
            }
        }
    }

    private func tail(_ shard: Int) async {
        var backoff = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                let start = try ledger.shardCheckpoint(shard) + 1
                for try await message in jetStream.orderedMessages(stream: ClusterNames.stream(shard), startSequence: start) {
                    try await apply(message, shard: shard)
                    backoff = .milliseconds(100)
                }
            } catch let error as LedgerError where error.code == .invalidParameter || error.code == .corruptData {
                // The stream does not chain to this replica: never skip past it.
                counters.update(shard) { $0.failure = error.message }
                logger.error("a shard's log does not apply to this replica; its tail stopped", metadata: ["shard": "\(shard)", "error": "\(error)"])
                return
            } catch {
                if Task.isCancelled { return }
                counters.update(shard) { $0.failure = "\(error)" }
                logger.debug("a shard's tail restarts", metadata: ["shard": "\(shard)", "error": "\(error)"])
            }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(2))
        }
    }

    /// Applies one message of the shard's stream: entries through the ledger (chain-checked),
    /// a fence as a fence. A message that is not authenticated by the cluster's key (published
    /// by anyone else on the bus: garbage, a forged write or fence) is skipped — the checkpoint
    /// passes it, nothing of it is applied — and counted; it never stops the shard.
    private func apply(_ message: StoredMessage, shard: Int) async throws {
        // The owner's own batches reach its tail after the owner applied them: a read of the
        // checkpoint passes them without opening, decoding or a turn on the writer. (The
        // writer checks the checkpoint again in its transaction; this only saves the work.)
        if message.sequence <= (try ledger.shardCheckpoint(shard)) {
            counters.update(shard) { $0.applied += 1 }
            return
        }
        let opened: ShardMessage
        do {
            opened = try sealing.open(message, shard: shard)
        } catch let refused as UnauthenticatedShardMessage {
            try await ledger.skipShardMessage(shard: shard, sequence: message.sequence)
            counters.update(shard) {
                $0.rejected += 1
                $0.lastRejected = refused.description
                $0.failure = nil
            }
            logger.warning("skipped a shard message that is not authenticated", metadata: ["shard": "\(shard)", "sequence": "\(message.sequence)", "reason": "\(refused.reason)"])
            return
        }
        switch opened {
        case .fence(let note):
            try await ledger.applyShardFence(message.payload, shard: shard, sequence: message.sequence)
            if note.node != nodeID, let owned = ownership.get(shard) {
                if note.revision > owned.revision {
                    ownership.set(shard, nil)
                    logger.warning("fenced: another node took a shard this node held", metadata: ["shard": "\(shard)", "owner": "\(note.node)"])
                } else {
                    // Older than this node's own lease: a fence re-published after the fact.
                    counters.update(shard) { $0.staleFences += 1 }
                    logger.warning("ignored a fence older than this node's lease (a replay)", metadata: ["shard": "\(shard)", "sequence": "\(message.sequence)"])
                }
            }
        case .entries(let bytes):
            try await ledger.applyShardMessage(bytes: bytes, shard: shard, of: shards, sequence: message.sequence)
        }
        counters.update(shard) {
            $0.applied += 1
            $0.failure = nil
        }
    }
}
