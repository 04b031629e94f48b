import Foundation
import Logging
import NATS
import Synchronization
import SyncLedger

/// Who owns which shard. Each shard has a lease in the `syncledger_leases` KV bucket, whose
/// entries expire after ``ClusterOptions/leaseTime`` (the bucket's max age); the owner renews
/// its leases every third of that by compare-and-set on the entry's revision, and a node that
/// finds a shard's lease gone takes it by creating the entry.
///
/// A lease says who *should* write; what makes two writers impossible is the shard stream's
/// expected-last-sequence check. A new owner catches up with the stream and then publishes a
/// fence message after its last message; any write an old owner prepared before that fails the
/// check, and the old owner, applying the fence from the stream, learns it was fenced.
final class ShardLeases: Sendable {
    let options: ClusterOptions
    let shards: ShardMap
    let ledger: Ledger
    let jetStream: JetStreamContext
    let bucket: KeyValue
    let ownership: ShardOwnership
    let log: JetStreamShardLog
    let counters: ShardCounters
    let logger: Logger
    /// Notices a dead node before its leases run out.
    let presence: NodePresence
    /// Set when a node was just judged gone: the balance loop runs a round at once.
    private let balanceNow = Atomic<Bool>(false)
    /// This node's HTTP API, once known (the listening address may be learnt after start).
    let url: Mutex<String?>
    /// Called with each shard this node has just taken (push delivery derives its recent entries
    /// again; stream delivery reads the shard's cursors again).
    let takeoverHandlers = Mutex<[@Sendable (Int) -> Void]>([])

    init(options: ClusterOptions, shards: ShardMap, ledger: Ledger, jetStream: JetStreamContext, bucket: KeyValue,
         ownership: ShardOwnership, log: JetStreamShardLog, counters: ShardCounters, presence: NodePresence, logger: Logger) {
        self.options = options
        self.shards = shards
        self.ledger = ledger
        self.jetStream = jetStream
        self.bucket = bucket
        self.ownership = ownership
        self.log = log
        self.counters = counters
        self.logger = logger
        self.presence = presence
        self.url = Mutex(options.nodeURL)
    }

    private var holder: LeaseHolder { LeaseHolder(node: options.nodeID, url: url.withLock { $0 } ?? "") }

    /// This node's lease value for `shard`, sealed with the cluster's key for that shard's key.
    private func holderValue(_ shard: Int) throws -> [UInt8] { try log.sealing.sealLease(holder, shard: shard) }

    /// Renews, takes and hands back leases until cancelled. Renewals run in a loop of their
    /// own, so a takeover waiting for its replica to catch up never delays them. Presence
    /// probes run in a third: a node judged gone starts a balance round at once.
    func run() async {
        let period = options.leaseTime / 3
        await withDiscardingTaskGroup { group in
            group.addTask {
                while !Task.isCancelled {
                    await self.renew()
                    // Announced here too, so a long balance round (many takeovers) never lets
                    // this node's record run out and the others think it gone.
                    try? await self.announce()
                    try? await Task.sleep(for: period)
                }
            }
            group.addTask {
                var due = ContinuousClock.now
                while !Task.isCancelled {
                    // The request is taken whether or not the round was due anyway: one round
                    // answers it (left set, it would cost a second round right after).
                    let asked = self.balanceNow.exchange(false, ordering: .acquiringAndReleasing)
                    if ContinuousClock.now >= due || asked {
                        await self.balance()
                        due = ContinuousClock.now + period
                    }
                    try? await Task.sleep(for: NodePresence.probeInterval / 3)
                }
            }
            group.addTask { await self.presence.serve() }
            group.addTask {
                while !Task.isCancelled {
                    let others = self.probed.withLock { $0 }
                    let gone = await self.presence.probe(others)
                    if !gone.isEmpty {
                        self.logger.warning("nodes gone (their presence subjects have no responders); taking their shards",
                                            metadata: ["nodes": "\(gone.map { $0.prefix(64) })"])
                        self.balanceNow.store(true, ordering: .releasing)
                    }
                    try? await Task.sleep(for: NodePresence.probeInterval)
                }
            }
        }
    }

    /// Who owns each shard by the live nodes' records as last read (up to a lease round old):
    /// what answers name as a shard's owner (``ClusterNode/knownOwner(of:)``).
    let ownerDirectory = Mutex<[Int: String]>([:])

    /// The other nodes whose records say they answer presence probes, as last read.
    private let probed = Mutex<[String]>([])

    /// Renews every lease held; drops those that another node took or that ran out.
    func renew() async {
        for shard in ownership.shards {
            guard let owned = ownership.get(shard) else { continue }
            let sent = ContinuousClock.now
            do {
                let revision = try await bucket.update(ClusterNames.lease(shard), try holderValue(shard), lastRevision: owned.revision)
                // Only extend a lease that is still ours: a fence from another node may have
                // dropped it meanwhile.
                if ownership.get(shard) != nil {
                    ownership.set(shard, .init(revision: revision, validUntil: sent + validity))
                }
            } catch {
                if ContinuousClock.now < owned.validUntil, error.isWrongLastSequence, await restore(shard, sent: sent) { continue }
                if ContinuousClock.now >= owned.validUntil || error.isWrongLastSequence {
                    ownership.set(shard, nil)
                    logger.warning("lost a shard's lease", metadata: ["shard": "\(shard)", "error": "\(error)"])
                }
            }
        }
    }

    /// A lease this node holds, and that is still valid, was changed by someone else: while it
    /// is valid no node can have taken it (a node takes only a lease that is gone), so the
    /// change is forged — a value without the cluster's MAC, one of this node's own values or a
    /// dead node's put back — or a deletion. Puts this node's value back and keeps the shard. A
    /// value of another live node, authenticated, is left alone (the caller gives the shard up).
    /// - Returns: whether the lease is this node's again.
    private func restore(_ shard: Int, sent: ContinuousClock.Instant) async -> Bool {
        let key = ClusterNames.lease(shard)
        for _ in 0..<3 {  // the value may be changed again between the read and the write
            // Handed back meanwhile (the balance loop deleted it): nothing to put back.
            guard ownership.get(shard) != nil else { return false }
            guard let entry = try? await bucket.get(key) else {
                guard let revision = try? await bucket.create(key, try holderValue(shard)) else { continue }
                return keep(shard, revision: revision, sent: sent)
            }
            if let other = log.sealing.openLease(entry.value, shard: shard), other.node != options.nodeID, await isLive(other.node) { return false }
            counters.noteForgedRecord()
            guard let revision = try? await bucket.update(key, try holderValue(shard), lastRevision: entry.revision) else { continue }
            logger.warning("put back a shard's lease someone else had changed", metadata: ["shard": "\(shard)"])
            return keep(shard, revision: revision, sent: sent)
        }
        return false
    }

    private func keep(_ shard: Int, revision: UInt64, sent: ContinuousClock.Instant) -> Bool {
        guard ownership.get(shard) != nil else { return false }
        ownership.set(shard, .init(revision: revision, validUntil: sent + validity))
        return true
    }

    /// Gives up every lease held (a node stopping): each deleted by its revision, so a lease
    /// another node took meanwhile is left alone.
    ///
    /// Each lease is deleted by the revision it has now, when its value is still this node's: a
    /// renewal or a takeover cut off by the stop may have moved the revision (the update landed,
    /// its answer was cancelled) or made a lease this node does not know it holds yet.
    func handBackAll() async {
        let held = ownership.shards
        for shard in held { ownership.set(shard, nil) }
        let taking = takingShards.withLock { $0 }
        for shard in Set(held).union(taking).sorted() {
            let key = ClusterNames.lease(shard)
            guard let entry = try? await bucket.get(key), log.sealing.openLease(entry.value, shard: shard)?.node == options.nodeID else { continue }
            _ = try? await bucket.delete(key, lastRevision: entry.revision)
        }
        _ = try? await bucket.delete(ClusterNames.node(options.nodeID))
    }

    /// Shards whose lease this node is taking (made, not yet owned): handed back on a stop too.
    private let takingShards = Mutex<Set<Int>>([])

    /// How long a lease surely stays ours after the request that made or renewed it was sent:
    /// the bucket's max age, less a sixth for the servers' expiry timer.
    private var validity: Duration { options.leaseTime - options.leaseTime / 6 }

    /// How far behind this node a node below its share may be on a shard and still be handed
    /// it in bulk: it catches up with that many messages well within one takeover.
    static let readySlack: UInt64 = 1_000

    /// Takes free shards up to this node's share (shards ÷ live nodes, rounded up), and hands
    /// shards back while it holds more than its share (``shardsToHandBack(held:share:records:)``).
    func balance() async {
        // Another node forwards to the lease holder's URL: take nothing before it is known.
        guard url.withLock({ $0 }) != nil else { return }
        do {
            try await announce()
            let records = try await nodeRecords()
            let nodes = max(1, records.count)
            let share = (shards.count + nodes - 1) / nodes
            let held = ownership.shards
            if held.count > share {
                for shard in shardsToHandBack(held: held, share: share, records: records) {
                    guard let owned = ownership.get(shard) else { continue }
                    ownership.set(shard, nil)
                    _ = try? await bucket.delete(ClusterNames.lease(shard), lastRevision: owned.revision)
                    logger.info("handed back a shard", metadata: ["shard": "\(shard)", "share": "\(share)"])
                }
                return
            }
            var wanted = share - held.count
            guard wanted > 0 else { return }
            for shard in (0..<shards.count).shuffled() where ownership.get(shard) == nil {
                guard wanted > 0, !Task.isCancelled else { break }
                let sent = ContinuousClock.now
                takingShards.withLock { _ = $0.insert(shard) }
                defer { takingShards.withLock { _ = $0.remove(shard) } }
                guard let revision = try await takeLease(shard, records: records) else { continue }
                if try await takeOver(shard, revision: revision, sent: sent) { wanted -= 1 }
            }
        } catch {
            logger.warning("shard lease round failed", metadata: ["error": "\(error)"])
        }
    }

    /// Takes shard `shard`'s lease for this node, when it is free: gone (ran out, handed back),
    /// or — as good as gone — a value no live node holds: one that fails authentication (anyone
    /// on the bus could keep writing it, and each write would restart its expiry), or one naming
    /// a node without a live record (a dead node's sealed value put back), or this node's own
    /// while it does not hold the shard. Such a value is replaced by compare-and-set on its
    /// revision, and only while no live node's record says it owns the shard (its owner puts its
    /// own value back over a forged one: ``restore(_:sent:)``). An authenticated value of a live
    /// node is left alone: that node holds the shard or is taking it.
    /// - Returns: the revision of this node's new lease, or nil when the shard is not free.
    private func takeLease(_ shard: Int, records: [(key: String, record: NodeRecord, created: Date)]) async throws -> UInt64? {
        let key = ClusterNames.lease(shard)
        let value = try holderValue(shard)
        guard let entry = try await bucket.get(key) else { return try? await bucket.create(key, value) }
        let named = log.sealing.openLease(entry.value, shard: shard)
        if let named, named.node != options.nodeID, records.contains(where: { $0.key == ClusterNames.node(named.node) }) { return nil }
        guard !records.contains(where: { $0.key != ClusterNames.node(options.nodeID) && $0.record.owned.contains(shard) }) else { return nil }
        if named == nil { counters.noteForgedRecord() }
        guard let revision = try? await bucket.update(key, value, lastRevision: entry.revision) else { return nil }
        logger.warning("took a shard's lease whose value no live node holds", metadata: [
            "shard": "\(shard)", "value": "\(named.map { "of node \($0.node.prefix(64)), not live" } ?? "not authenticated")"])
        return revision
    }

    /// Puts this node's record (URL, what it applied, what it owns) in the lease bucket: the
    /// others count live nodes by these records, and read how far each has applied.
    func announce() async throws {
        guard let nodeURL = url.withLock({ $0 }) else { return }
        let record = NodeRecord(url: nodeURL, applied: (0..<shards.count).map { (try? ledger.shardCheckpoint($0)) ?? 0 }, owned: ownership.valid,
                                rejected: (0..<shards.count).reduce(0) { $0 + counters.get($1).rejected }, at: NodeRecord.now,
                                answersPresence: presence.answers)
        _ = try await bucket.put(ClusterNames.node(options.nodeID), try log.sealing.sealNode(record, node: options.nodeID))
    }

    /// The live nodes' records, by key: only those authenticated by the cluster's key for their
    /// own key and announced within ``NodeRecord/maxAge(leaseTime:)`` by the time sealed in
    /// them (a forged, copied or replayed record is counted and left out, so it neither counts
    /// as a node nor is handed shards), with when each was last put.
    func nodeRecords() async throws -> [(key: String, record: NodeRecord, created: Date)] {
        var records: [(key: String, record: NodeRecord, created: Date)] = []
        var answering: [String] = []
        for key in try await bucket.keys() where key.hasPrefix("node.") {
            guard let entry = try await bucket.get(key) else { continue }
            guard let record = liveRecord(entry.value, key: key) else { continue }
            let id = String(key.dropFirst("node.".count))
            if record.answersPresence == true, id != options.nodeID {
                answering.append(id)
                presence.noteRecord(id, at: record.at)
                // A node whose presence subject has gone silent is dead, though its record has
                // not run out yet (unless it announced itself since: it came back).
                if presence.isGone(id, announcedAt: record.at) { continue }
            }
            records.append((key, record, entry.created))
        }
        probed.withLock { $0 = answering }  // a node judged gone is still probed: it may come back
        var owners: [Int: String] = [:]
        for (key, record, _) in records {
            for shard in record.owned { owners[shard] = String(key.dropFirst("node.".count)) }
        }
        ownerDirectory.withLock { $0 = owners }
        return records
    }

    /// The record `value` of `key`, when authenticated and current; otherwise counted (forged,
    /// or replayed: announced too long ago by the time sealed in it) and nil.
    private func liveRecord(_ value: [UInt8], key: String) -> NodeRecord? {
        guard let record = log.sealing.openNode(value, key: key) else {
            counters.noteForgedRecord()
            return nil
        }
        guard record.isCurrent(now: NodeRecord.now, leaseTime: options.leaseTime) else {
            counters.noteForgedRecord()
            logger.warning("ignored a node record announced too long ago (replayed, or that node's clock is behind)",
                           metadata: ["key": "\(key.prefix(80))", "at": "\(record.at)"])
            return nil
        }
        return record
    }

    /// Whether node `id` has a live record (authenticated and current, in the bucket).
    private func isLive(_ id: String) async -> Bool {
        let key = ClusterNames.node(id)
        guard let entry = try? await bucket.get(key) else { return false }
        return liveRecord(entry.value, key: key) != nil
    }

    /// The shards to hand back this round, holding `held` (more than `share`). For each other
    /// node below its share whose record is fresh (announced within two lease rounds: a node
    /// that died is not handed anything), as many as it lacks among the shards its replica has
    /// already applied to within ``readySlack`` messages of this one — it takes them at its
    /// next round without a long catch-up — and no more than this node has beyond its share.
    /// At least one (the last held), so an excess always shrinks, if only a shard a round (a
    /// node just started, its replica still behind).
    private func shardsToHandBack(held: [Int], share: Int, records: [(key: String, record: NodeRecord, created: Date)]) -> [Int] {
        let fresh = options.leaseTime / 3 * 2
        var chosen: [Int] = []
        var remaining = held.count - share
        for (key, record, created) in records where key != ClusterNames.node(options.nodeID) && remaining > 0 {
            guard Duration.seconds(Date().timeIntervalSince(created)) < fresh, record.owned.count < share else { continue }
            var lacks = share - record.owned.count
            for shard in held.reversed() where lacks > 0 && remaining > 0 && !chosen.contains(shard) && shard < record.applied.count {
                let here = (try? ledger.shardCheckpoint(shard)) ?? 0
                guard record.applied[shard] + Self.readySlack >= here else { continue }
                chosen.append(shard)
                (lacks, remaining) = (lacks - 1, remaining - 1)
            }
        }
        return chosen.isEmpty ? Array(held.suffix(1)) : chosen
    }

    /// Catches up with shard `n`'s stream and fences it; returns whether this node now owns it.
    /// The lease is renewed while the replica catches up; a takeover that fails hands the lease
    /// back at once, so another node may try.
    private func takeOver(_ shard: Int, revision first: UInt64, sent start: ContinuousClock.Instant) async throws -> Bool {
        var revision = first
        var sent = start
        for attempt in 0..<5 {
            if attempt > 0 {
                let renewing = ContinuousClock.now
                guard let renewed = try? await bucket.update(ClusterNames.lease(shard), try holderValue(shard), lastRevision: revision) else { return false }
                (revision, sent) = (renewed, renewing)
            }
            guard ContinuousClock.now < sent + validity else { break }
            let last = try await log.lastSequence(shard)
            guard try await ledger.waitForShard(shard, atLeast: last, timeout: validity / 2) else { continue }
            do {
                // The fence names the lease revision it was taken with: a node holding a later
                // lease ignores it, so a replayed fence takes nothing.
                let note = FenceNote(node: options.nodeID, url: holder.url, revision: revision)
                let payload = Array(try JSONEncoder().encode(note))
                let fence = log.sealing.headers(shard: shard, kind: ClusterNames.fenceKind, node: options.nodeID, payload: payload)
                let ack = try await jetStream.publish(ClusterNames.subject(shard), payload: payload, headers: fence,
                                                      messageID: "f-\(options.nodeID)-\(shard)-\(revision)", expectedLastSequence: last,
                                                      expectedStream: ClusterNames.stream(shard), timeout: .seconds(2))
                guard try await ledger.waitForShard(shard, atLeast: ack.sequence, timeout: validity / 2) else { break }
                ownership.set(shard, .init(revision: revision, validUntil: sent + validity))
                logger.info("took a shard", metadata: ["shard": "\(shard)", "fence": "\(ack.sequence)"])
                for handler in takeoverHandlers.withLock({ $0 }) { handler(shard) }
                return true
            } catch let error as JetStreamAPIError where error.isWrongLastSequence {
                continue  // the old owner still wrote: catch up again
            }
        }
        _ = try? await bucket.delete(ClusterNames.lease(shard), lastRevision: revision)
        logger.warning("could not take a shard; handed its lease back", metadata: ["shard": "\(shard)"])
        return false
    }
}
