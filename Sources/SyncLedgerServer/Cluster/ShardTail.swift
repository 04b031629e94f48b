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
    let logger: Logger

    init(shards: ShardMap, nodeID: String, ledger: Ledger, jetStream: JetStreamContext, ownership: ShardOwnership, counters: ShardCounters, logger: Logger) {
        self.shards = shards
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

    private func apply(_ message: StoredMessage, shard: Int) async throws {
        if message.headers?[ClusterNames.kindHeader] == ClusterNames.fenceKind {
            try await ledger.applyShardFence(message.payload, shard: shard, sequence: message.sequence)
            if let holder = try? JSONDecoder().decode(LeaseHolder.self, from: Data(message.payload)), holder.node != nodeID,
               ownership.get(shard) != nil {
                ownership.set(shard, nil)
                logger.warning("fenced: another node took a shard this node held", metadata: ["shard": "\(shard)", "owner": "\(holder.node)"])
            }
        } else {
            try await ledger.applyShardMessage(bytes: message.payload, shard: shard, of: shards, sequence: message.sequence)
        }
        counters.update(shard) {
            $0.applied += 1
            $0.failure = nil
        }
    }
}
