import Foundation
import NATS
public import SyncLedger

/// Operations on a cluster from outside its nodes, straight on JetStream (`syncledger cluster
/// status|import|export`): they work whether or not any node runs.
public struct ClusterAdmin: Sendable {
    let client: NATSClient
    let jetStream: JetStreamContext
    /// The cluster's keys, from its secret: needed to import (every message is sealed), to export
    /// (only authenticated messages are written) and for status to tell forged leases and node
    /// records apart (without them, status shows them unverified).
    let sealing: ClusterSealing?

    /// Connects to the cluster's nats-servers with `connection`'s credentials and TLS; `keys`:
    /// the cluster's keys, when its secret is known.
    public static func connect(servers: [String], connection: ClusterConnection = ClusterConnection(), keys: ClusterKeys?) async throws -> ClusterAdmin {
        var options = NATSClientOptions(servers: servers)
        options.name = "syncledger-cluster-admin"
        try connection.apply(to: &options)
        options.maxReconnectAttempts = 3
        let client = try await NATSClient.connect(options)
        return ClusterAdmin(client: client, jetStream: JetStreamContext(client: client), sealing: keys.map(ClusterSealing.init))
    }

    private func requireSealing(_ what: String) throws -> ClusterSealing {
        guard let sealing else {
            throw LedgerError(.invalidParameter, "\(what) needs the cluster secret: set SYNCLEDGER_CLUSTER_SECRET (or --cluster-secret-file) as the nodes have it, or SYNCLEDGER_SECRET_ACCESS_KEY when they derive it from the admin secret")
        }
        return sealing
    }

    /// Disconnects.
    public func close() async { await client.close() }

    // MARK: Status

    /// One shard as `cluster status` shows it.
    public struct Shard: Sendable, Codable {
        public var shard: Int
        /// The node holding its lease (nil: none now).
        public var owner: String?
        /// The last sequence of its stream.
        public var lastSequence: UInt64
        /// The nats-server leading its stream, and its replicas' names with whether each is current.
        public var streamLeader: String?
        public var replicas: [String: Bool]
        /// Per live node: messages of this shard it has yet to apply.
        public var lag: [String: UInt64]
    }

    /// A device-message consumer as `cluster status` shows it.
    public struct Consumer: Sendable, Codable {
        public var name: String
        /// What it has settled, per shard (`c:<shard>=<sequence>[.<entries>],…`).
        public var positions: String
        public var acknowledged: UInt64
        public var expired: UInt64
        /// When it last acknowledged.
        public var updated: Timestamp
        /// Messages of the shards' logs it has not wholly passed (each one write, of one or more
        /// entries, of any kind — not only device messages; a message it has read part of counts).
        public var behind: UInt64
    }

    /// The cluster: its shard count, live nodes with their URLs, every shard, the Cognito
    /// stream targets' cursors (one per target and shard that has delivered, in shard sequences)
    /// and the device-message consumers.
    public struct Report: Sendable, Codable {
        public var shardCount: Int
        public var nodes: [String: String]
        /// Whether leases and node records were checked against the cluster's key (false: no
        /// secret was given, and a forged one would show as it is).
        public var verified: Bool
        /// Lease values and node records in the bucket whose MAC did not match (left out above).
        public var forgedRecords: Int
        /// Per live node: messages of the shards' streams it skipped as not authenticated.
        public var rejectedMessages: [String: UInt64]
        public var shards: [Shard]
        public var streamCursors: [StreamTarget]
        public var messageConsumers: [Consumer]
    }

    /// Reads the cluster's state.
    /// - Throws: `.notFound` when no cluster was created on these servers.
    public func status() async throws -> Report {
        guard let count = try await ClusterSetup.shardCount(jetStream) else {
            throw LedgerError(.notFound, "no SyncLedger cluster on these servers yet (a node or `cluster import` creates it)")
        }
        guard let bucket = try await jetStream.keyValue(bucket: ClusterNames.leases) else {
            throw LedgerError(.notFound, "the cluster has no lease bucket yet")
        }
        var nodes: [String: NodeRecord] = [:]
        var owners: [Int: String] = [:]
        var forged = 0
        /// A record's body: checked with the cluster's key when given; else as it is, skipping the MAC.
        func body(_ value: [UInt8], key: String) -> Data? {
            guard let sealing else { return value.count > 65 && value[64] == UInt8(ascii: ".") ? Data(value[65...]) : nil }
            guard let opened = sealing.keys.openRecord(value, bucket: ClusterNames.leases, key: key) else {
                forged += 1
                return nil
            }
            return Data(opened)
        }
        for key in try await bucket.keys() {
            guard let entry = try await bucket.get(key) else { continue }
            if key.hasPrefix("node.") {
                nodes[String(key.dropFirst(5))] = body(entry.value, key: key).flatMap { try? JSONDecoder().decode(NodeRecord.self, from: $0) }
            } else if key.hasPrefix("shard."), let shard = Int(key.dropFirst(6)),
                      let holder = body(entry.value, key: key).flatMap({ try? JSONDecoder().decode(LeaseHolder.self, from: $0) }) {
                owners[shard] = holder.node
            }
        }
        var infos: [String: StreamInfo] = [:]
        for info in try await jetStream.streams(subject: ClusterNames.everyShardSubject) { infos[info.config.name] = info }
        var shards: [Shard] = []
        for shard in 0..<count {
            var info = infos[ClusterNames.stream(shard)]
            if info == nil { info = try await jetStream.streamInfo(ClusterNames.stream(shard)) }
            let last = info?.state.lastSeq ?? 0
            var replicas: [String: Bool] = [:]
            for replica in info?.cluster?.replicas ?? [] { replicas[replica.name] = replica.current }
            if let leader = info?.cluster?.leader { replicas[leader] = true }
            var lag: [String: UInt64] = [:]
            for (name, record) in nodes where shard < record.applied.count {
                lag[name] = last > record.applied[shard] ? last - record.applied[shard] : 0
            }
            shards.append(Shard(shard: shard, owner: owners[shard], lastSequence: last, streamLeader: info?.cluster?.leader,
                                replicas: replicas, lag: lag))
        }
        var cursors: [StreamTarget] = []
        if let bucket = try await jetStream.keyValue(bucket: ClusterNames.streamCursors) { cursors = try await ClusterStreamCursors(bucket: bucket).all() }
        var consumers: [Consumer] = []
        if let bucket = try await jetStream.keyValue(bucket: ClusterNames.consumers) {
            let map = try ShardMap(count: count)
            for c in try await ClusterConsumers.all(in: bucket) {
                let positions = try c.settled(on: map)
                let behind = shards.reduce(UInt64(0)) { sum, shard in
                    let at = positions[shard.shard]
                    let passed = at.map { $0.entries == nil ? $0.sequence : $0.sequence - 1 } ?? 0
                    return sum + (shard.lastSequence > passed ? shard.lastSequence - passed : 0)
                }
                consumers.append(Consumer(name: c.name, positions: c.positions, acknowledged: c.acknowledged, expired: c.expired, updated: c.updated, behind: behind))
            }
        }
        return Report(shardCount: count, nodes: nodes.mapValues(\.url), verified: sealing != nil, forgedRecords: forged,
                      rejectedMessages: nodes.compactMapValues(\.rejected), shards: shards, streamCursors: cursors, messageConsumers: consumers)
    }

    // MARK: Import

    /// What an import wrote.
    public struct ImportReport: Sendable, Codable {
        public var entries: UInt64 = 0
        public var messages: UInt64 = 0
        public var streams: Int = 0
        /// Device-message consumers carried into the cluster's consumer bucket.
        public var consumers: Int = 0
    }

    /// Replays a single-node ledger's whole log into a new cluster's shard streams, in commit
    /// order: each stretch of the feed becomes, per shard, one message of that shard's entries
    /// (chained as stored; every node checks the chains again when it applies them). The
    /// ledger's device-message consumers go into the cluster's consumer bucket first, each
    /// cursor (a position in this ledger's feed) turned into the positions in the shards' logs
    /// that settle the same entries (``ClusterConsumers``): a first pass over the feed numbers
    /// the messages as the empty streams will (1, 2, …), so the consumers are in place before
    /// anything is published.
    ///
    /// Refuses — before writing anything — a ledger whose chains do not verify, a cluster whose
    /// shard streams already hold messages (import before the nodes first start), and one that
    /// already has a consumer of a name the ledger's consumers use.
    public func importLedger(_ ledger: Ledger, shards: ShardMap, replicas: Int, leaseTime: Duration,
                             progress: @Sendable (UInt64, UInt64) -> Void) async throws -> ImportReport {
        let sealing = try requireSealing("cluster import")
        let verification = try ledger.verify()
        if let problem = verification.problem {
            throw LedgerError(.corruptData, "the ledger does not verify, so it is not imported: \(problem)")
        }
        let buckets = try await ClusterSetup.prepare(jetStream, shards: shards, replicas: replicas, leaseTime: leaseTime, sealing: sealing) { _ in }
        for shard in 0..<shards.count {
            let last = try await jetStream.streamInfo(ClusterNames.stream(shard))?.state.lastSeq ?? 0
            guard last == 0 else {
                throw LedgerError(.invalidParameter, "shard \(shard)'s stream already holds \(last) messages: import into a new cluster, before its nodes first start; nothing was imported")
            }
        }
        var report = ImportReport(streams: verification.streams)
        report.consumers = try await carryConsumers(of: ledger, shards: shards, into: buckets.consumers)
        let total = try ledger.lastSequence
        var last = [UInt64](repeating: 0, count: shards.count)
        var position: UInt64 = 0
        while let segment = try ledger.feedSegment(after: position, maxBytes: Self.importSegmentBytes) {
            for (shard, entries) in Self.byShard(segment, shards) {
                let payload = try Segment(scope: .feed, entries: entries).encoded()
                let headers = sealing.headers(shard: shard, kind: ClusterNames.entriesKind, node: "import", payload: payload)
                let id = "i-" + Hex.encode(entries.last?.hash ?? [])
                let ack = try await jetStream.publish(ClusterNames.subject(shard), payload: payload, headers: headers, messageID: id,
                                                      expectedLastSequence: last[shard], expectedStream: ClusterNames.stream(shard), timeout: .seconds(10))
                last[shard] = ack.sequence
                report.messages += 1
            }
            report.entries += UInt64(segment.entries.count)
            position = segment.entries.last?.sequence ?? position
            progress(report.entries, total)
        }
        return report
    }

    /// How much of the feed one stretch of an import holds (before it is split by shard).
    static let importSegmentBytes = 1 << 20

    /// A feed segment's entries by shard, in shard order: the messages an import publishes for it.
    static func byShard(_ segment: Segment, _ shards: ShardMap) -> [(Int, [Segment.Entry])] {
        var groups: [Int: [Segment.Entry]] = [:]
        for entry in segment.entries { groups[shards.shard(of: entry.stream), default: []].append(entry) }
        return groups.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// Writes `ledger`'s device-message consumers into the cluster's consumer bucket, each
    /// cursor as the shard positions the import's messages will give it (numbered as the empty
    /// streams will number them). - Returns: how many. - Throws: `.invalidParameter`, writing
    /// nothing, when the bucket already has one of their names.
    private func carryConsumers(of ledger: Ledger, shards: ShardMap, into bucket: KeyValue) async throws -> Int {
        // Furthest cursor first: a message's entries settle the consumers whose cursor reached its first.
        let consumers = try ledger.consumers().sorted { $0.cursor > $1.cursor }
        guard !consumers.isEmpty else { return 0 }
        for consumer in consumers where try await bucket.get(ClusterConsumers.key(consumer.name)) != nil {
            throw LedgerError(.invalidParameter, "the cluster already has a device-message consumer named \(consumer.name): import into a new cluster; nothing was imported")
        }
        var settled = [ShardPositions](repeating: ShardPositions(), count: consumers.count)
        var numbered = [UInt64](repeating: 0, count: shards.count)
        var position: UInt64 = 0
        while let segment = try ledger.feedSegment(after: position, maxBytes: Self.importSegmentBytes), let end = segment.entries.last?.sequence {
            for (shard, entries) in Self.byShard(segment, shards) {
                numbered[shard] += 1
                for (i, consumer) in consumers.enumerated() {
                    guard let first = entries.first, consumer.cursor >= first.sequence else { break }
                    let reached = entries.count { $0.sequence <= consumer.cursor }
                    settled[i] = settled[i].joined(ShardPositions(positions: [shard: .init(sequence: numbered[shard], entries: reached == entries.count ? nil : reached)]))
                }
            }
            position = end
        }
        for (consumer, positions) in zip(consumers, settled) {
            let carried = ClusterConsumer(name: consumer.name, positions: positions.text, acknowledged: consumer.acknowledged,
                                          expired: consumer.expired, created: consumer.created, updated: consumer.updated)
            _ = try await bucket.create(ClusterConsumers.key(consumer.name), Array(try JSONEncoder().encode(carried)))
        }
        return consumers.count
    }

    // MARK: Export

    /// Writes the entries of shard `shard`'s stream as segment files in `directory`
    /// (`shard-S-SEQ.slseg`, one per message; fences are left out), which `syncledger import`
    /// merges into a single-node ledger; messages not authenticated by the cluster's key are
    /// left out too (and counted). Returns (files, entries, skipped).
    public func exportShard(_ shard: Int, to directory: String, progress: @Sendable (UInt64, UInt64) -> Void) async throws -> (files: Int, entries: Int, skipped: Int) {
        let sealing = try requireSealing("cluster export")
        guard let count = try await ClusterSetup.shardCount(jetStream) else {
            throw LedgerError(.notFound, "no SyncLedger cluster on these servers")
        }
        guard (0..<count).contains(shard) else { throw LedgerError(.invalidParameter, "the cluster has shards 0-\(count - 1), not \(shard)") }
        guard let info = try await jetStream.streamInfo(ClusterNames.stream(shard)) else {
            throw LedgerError(.notFound, "shard \(shard)'s stream does not exist")
        }
        let last = info.state.lastSeq
        var files = 0
        var entries = 0
        var skipped = 0
        var sequence: UInt64 = 1
        while sequence <= last {
            guard let message = try await jetStream.getMessage(stream: ClusterNames.stream(shard), sequence: sequence) else {
                throw LedgerError(.corruptData, "shard \(shard)'s stream lacks message \(sequence) of 1-\(last)")
            }
            let opened: ShardMessage
            do { opened = try sealing.open(message, shard: shard) } catch is UnauthenticatedShardMessage {
                (skipped, sequence) = (skipped + 1, sequence + 1)
                progress(sequence - 1, last)
                continue
            }
            if case .entries = opened {
                let segment = try Segment.decode(message.payload)
                let path = (directory as NSString).appendingPathComponent(String(format: "shard-%04d-%016llu.slseg", shard, sequence))
                guard FileManager.default.createFile(atPath: path, contents: Data(message.payload), attributes: [.posixPermissions: 0o600]) else {
                    throw LedgerError(.storage, "cannot write \(path)")
                }
                files += 1
                entries += segment.entries.count
            }
            progress(sequence, last)
            sequence += 1
        }
        return (files, entries, skipped)
    }
}
