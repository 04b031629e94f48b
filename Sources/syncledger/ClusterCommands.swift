import ArgumentParser
import Foundation
import Synchronization
import SyncLedger
import SyncLedgerServer

/// `syncledger cluster status|import|export`: a cluster seen and moved straight on JetStream.
struct ClusterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster",
        abstract: "A cluster's nodes, shard owners and lag; a ledger moved into a new cluster, a shard exported out; the OpenID signing key rotated (docs/cluster.md).",
        subcommands: [ClusterStatus.self, ClusterImport.self, ClusterExport.self, ClusterRotateIdentityKey.self])
}

/// The JetStream cluster's servers.
struct ClusterServers: ParsableArguments {
    @Option(name: .customLong("cluster"), help: "The nats-servers of the cluster's JetStream, nats://HOST:PORT[,…] (tls://HOST:PORT: TLS required).")
    var cluster: String
    @OptionGroup(title: "NATS credentials and TLS") var nats: NATSFlags
    @Option(help: "A file holding the cluster secret the nodes share (not readable by others; or env SYNCLEDGER_CLUSTER_SECRET; default: the admin secret, env SYNCLEDGER_SECRET_ACCESS_KEY): import seals its messages with it, export and status check what they read.")
    var clusterSecretFile: String?

    /// The cluster's keys, when a secret is given.
    var keys: ClusterKeys? {
        get throws {
            if let clusterSecretFile { return ClusterKeys(secret: try NATSFlags.secret(file: clusterSecretFile, what: "--cluster-secret-file")) }
            let environment = ProcessInfo.processInfo.environment
            guard let secret = [environment["SYNCLEDGER_CLUSTER_SECRET"], environment["SYNCLEDGER_SECRET_ACCESS_KEY"]]
                .compactMap({ $0 }).first(where: { !$0.isEmpty }) else { return nil }
            return ClusterKeys(secret: secret)
        }
    }

    var servers: [String] {
        get throws {
            let list = cluster.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard !list.isEmpty, list.allSatisfy({ ($0.hasPrefix("nats://") || $0.hasPrefix("tls://")) && $0.count > 7 && !$0.contains("@") }) else {
                throw ValidationError("--cluster must be nats://HOST:PORT[,…] or tls://HOST:PORT[,…] (credentials go in --nats-user and the like), not \(cluster.prefix(200))")
            }
            return list
        }
    }

    /// Connects, runs `body` with a progress bar, then ends the bar and disconnects, whatever happened.
    func run<T: Sendable>(_ body: (ClusterAdmin, ProgressBox) async throws -> T) async throws -> T {
        let admin = try await connect()
        let bar = ProgressBox()
        defer { bar.finish() }
        do {
            let result = try await body(admin, bar)
            await admin.close()
            return result
        } catch {
            await admin.close()
            throw error
        }
    }

    func connect() async throws -> ClusterAdmin {
        let connection = try nats.connection()
        do { return try await ClusterAdmin.connect(servers: try servers, connection: connection, keys: try keys) } catch let error as ValidationError { throw error } catch {
            throw CLIError("cannot reach the cluster at \(cluster.prefix(200)): \(ClusterConnection.explain(error))")
        }
    }
}

struct ClusterStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Live nodes, each shard's owner, stream leader and replicas, and each node's lag per shard.")
    @OptionGroup var servers: ClusterServers
    @Flag(help: "Print one JSON object.") var json = false

    func run() async throws {
        let admin = try await servers.connect()
        defer { Task { await admin.close() } }
        let report = try await admin.status()
        await admin.close()
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
            return
        }
        print("\(report.shardCount) shards, \(report.nodes.count) live node(s)")
        if !report.verified {
            print("(leases and node records not verified: give the cluster secret to check them)")
        } else if report.forgedRecords > 0 {
            print("\(report.forgedRecords) lease value(s) or node record(s) without a valid MAC were left out (forged, or written by another cluster)")
        }
        let rejected = report.rejectedMessages.filter { $0.value > 0 }
        if !rejected.isEmpty {
            print("unauthenticated shard messages skipped: " + rejected.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(separator: " "))
        }
        for (node, url) in report.nodes.sorted(by: { $0.key < $1.key }) {
            print("  \(node)  \(url)  owns \(report.shards.filter { $0.owner == node }.count)")
        }
        print("shard  owner         last seq  stream leader  replicas current  lag by node")
        for shard in report.shards {
            let current = shard.replicas.values.filter { $0 }.count
            let lag = shard.lag.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            print(String(format: "%5d  %-12@  %8llu  %-13@  %d/%d               %@", shard.shard, (shard.owner ?? "-") as NSString, shard.lastSequence,
                         (shard.streamLeader ?? "-") as NSString, current, shard.replicas.count, lag as NSString))
        }
        if !report.streamCursors.isEmpty {
            print("Cognito stream cursors (shard sequence acknowledged by the sink)")
            print("pool / stream  shard  cursor  behind  delivered  failures  last error")
            for t in report.streamCursors {
                let last = t.shard.flatMap { s in report.shards.first { $0.shard == s }?.lastSequence } ?? 0
                print("\(t.pool) / \(t.streamName)  \(t.shard ?? 0)  \(t.cursor)  \(last > t.cursor ? last - t.cursor : 0)  \(t.delivered)  \(t.failures)  \(t.lastError ?? "-")")
            }
        }
        if !report.messageConsumers.isEmpty {
            print("Device-message consumers (behind: shard messages not wholly passed, of every kind)")
            print("name  acknowledged  expired  behind  positions")
            for c in report.messageConsumers {
                print("\(c.name)  \(c.acknowledged)  \(c.expired)  \(c.behind)  \(c.positions)")
            }
        }
    }
}

struct ClusterImport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Replay a single-node ledger's log into a new cluster's shard streams (chains checked first); run it before the nodes first start.")
    @OptionGroup var data: DataDirectory
    @OptionGroup var servers: ClusterServers
    @Option(help: "Shards of the new cluster (1-4096); the nodes are then started with the same --shards.") var shards = 64
    @Option(help: "Replicas of each shard's stream (1-5).") var clusterReplicas = 3
    @Option(help: "Seconds a shard's lease lasts, for the lease bucket made here (1-300; the nodes' --lease-seconds).") var leaseSeconds = 6.0

    func run() async throws {
        let map: ShardMap
        do { map = try ShardMap(count: shards) } catch { throw ValidationError(error.message) }
        guard (1...5).contains(clusterReplicas) else { throw ValidationError("--cluster-replicas must be 1 to 5") }
        guard leaseSeconds >= 1, leaseSeconds <= 300 else { throw ValidationError("--lease-seconds must be 1 to 300") }
        let ledger = try data.open()
        defer { ledger.close() }
        let report = try await servers.run { admin, bar in
            try await admin.importLedger(ledger, shards: map, replicas: clusterReplicas, leaseTime: .milliseconds(Int64(leaseSeconds * 1000))) { done, total in
                bar.update("importing", done: done, of: total, unit: "entries")
            }
        }
        print("imported \(report.entries) entries of \(report.streams) streams as \(report.messages) messages into \(map)"
              + (report.consumers > 0 ? ", and \(report.consumers) message consumer(s) with their cursors" : ""))
    }
}

struct ClusterExport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write one shard's entries as segment files (one per message), for `syncledger import` into a single-node ledger.")
    @OptionGroup var servers: ClusterServers
    @Option(help: "The shard to export.") var shard: Int
    @Option(help: "Directory to write the segment files to (made, private to you, when missing).") var out: String

    func run() async throws {
        try makeOutputDirectory(out)
        let result = try await servers.run { admin, bar in
            try await admin.exportShard(shard, to: out) { done, total in bar.update("exporting", done: done, of: total, unit: "messages") }
        }
        print("exported shard \(shard): \(result.entries) entries in \(result.files) segment files in \(out)"
              + (result.skipped > 0 ? " (\(result.skipped) unauthenticated message(s) left out)" : ""))
    }
}

struct ClusterRotateIdentityKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-identity-key",
        abstract: "Move the cluster's OpenID signing key to its next generation; the current key stays in the JWKS and is accepted for --overlap-hours more.",
        discussion: """
            Every node derives each generation's key from the cluster secret, so nothing secret is stored \
            in NATS: this moves the generation number, and each node signs with the new key within a \
            second or two. Tokens signed before stay valid while the overlap lasts (they live at most 24 h). \
            See docs/identity.md.
            """)
    @OptionGroup var servers: ClusterServers
    @Option(help: "Hours the previous key is still listed and accepted (1-720; tokens live up to 24 h).") var overlapHours = 24.0

    func run() async throws {
        guard overlapHours >= 1, overlapHours <= 720 else { throw ValidationError("--overlap-hours must be 1 to 720") }
        let generation = try await servers.run { admin, _ in
            try await admin.rotateIdentityKey(overlap: .seconds(Int64(overlapHours * 3600)))
        }
        print("the cluster's OpenID signing key is at generation \(generation.current); generation \(generation.previous ?? 0) is accepted until \(generation.previousUntil.map { "\($0)" } ?? "-")")
    }
}

/// A terminal progress bar shared with a `@Sendable` callback.
final class ProgressBox: Sendable {
    private let progress = Mutex(Progress(total: nil))
    func update(_ label: String, done: UInt64, of total: UInt64, unit: String) {
        progress.withLock { $0.update(label, done: done, of: total, unit: unit) }
    }
    func finish() { progress.withLock { $0.finish() } }
}
