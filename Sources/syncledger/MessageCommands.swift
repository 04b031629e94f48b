import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger messages`: device-to-server messages, on a data directory.
struct Messages: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Device-to-server messages: tail, consumers, purge of idempotency keys.",
        discussion: "Messages are entries of each identity's `_syncledger.messages` stream (docs/devices.md).",
        subcommands: [Tail.self, Consumers.self, Purge.self])

    static func json(_ m: ReceivedMessage) -> JSON {
        .object([
            ("sequence", .uint(m.sequence)), ("identityPoolId", .string(m.pool.rawValue)), ("identityId", .string(m.identity.rawValue)),
            ("deviceCode", .string(m.deviceCode)), ("messageId", .string(m.message.messageId)), ("timeToLive", .int(m.message.timeToLive)),
            ("sentAt", .time(m.message.sentAt)), ("receivedAt", .time(m.received)), ("expiresAt", .time(m.expires)),
            ("data", .object(m.message.data.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
        ])
    }

    /// On a cluster node's data directory, says (on standard error) that consumers live in the
    /// cluster, not in this directory's table.
    static func noteClusterConsumers(_ ledger: Ledger) throws {
        guard try ledger.isClusterReplica else { return }
        printError("note: this data directory is a cluster node's replica; its device-message consumers live in the cluster (`syncledger cluster status --cluster nats://…`, GET /messages/consumers), not in this directory's table")
    }

    /// `syncledger messages tail`.
    struct Tail: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the live (unexpired) messages after a position, or after a consumer's cursor; --follow waits for more.",
            discussion: "Reading acknowledges nothing: a consumer's cursor moves only with POST /messages/ack.")
        @OptionGroup var data: DataDirectory
        @Option(help: "Start after this change-feed position (default: the beginning).") var after: UInt64?
        @Option(help: "Start after this consumer's cursor.") var consumer: String?
        @Option(help: "Print at most this many (without --follow).") var limit = 100
        @Flag(help: "Keep printing new messages until interrupted.") var follow = false
        @Flag(help: "One JSON object per message.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            if consumer != nil { try Messages.noteClusterConsumers(ledger) }
            var position = try after ?? consumer.map { try ledger.consumer($0)?.cursor ?? 0 } ?? 0
            var printed = 0
            while true {
                let page = try ledger.messages(after: position, limit: follow ? 1000 : min(1000, limit - printed))
                for m in page.messages {
                    if json {
                        printLine(Messages.json(m))
                    } else {
                        let data = m.message.data.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
                        print("\(m.sequence)  \(ISOTime.format(m.received))  \(m.pool)/\(m.identity)  device \(m.deviceCode)  id \(m.message.messageId)  \(data)")
                    }
                }
                printed += page.messages.count
                let moved = page.last != position
                position = page.last
                if follow {
                    if !moved { try await Task.sleep(for: .milliseconds(500)) }
                } else if printed >= limit || !moved {
                    break
                }
            }
        }
    }

    /// `syncledger messages consumers`.
    struct Consumers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The consumers: cursor, acknowledged, expired, and how far behind.")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per consumer.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            try Messages.noteClusterConsumers(ledger)
            let consumers = try ledger.consumers()
            for c in consumers {
                let waiting = try ledger.messages(after: c.cursor, limit: 1000).messages.count
                if json {
                    printLine(.object([
                        ("name", .string(c.name)), ("cursor", .uint(c.cursor)), ("acknowledged", .uint(c.acknowledged)),
                        ("expired", .uint(c.expired)), ("waiting", .int(Int64(waiting))), ("created", .time(c.created)), ("updated", .time(c.updated)),
                    ]))
                } else {
                    print("\(c.name)  cursor \(c.cursor)  acknowledged \(c.acknowledged)  expired \(c.expired)  waiting \(waiting == 1000 ? "1000+" : String(waiting))  last ack \(ISOTime.format(c.updated))")
                }
            }
            if !json, consumers.isEmpty { print("no consumers (a consumer appears with its first acknowledgement)") }
        }
    }

    /// `syncledger messages purge`.
    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove idempotency keys older than the retention now (the server does this hourly).",
            discussion: "The messages stay in the log; their keys and their places for consumers go, except the key of a message sent without SentAt, which stays (messageKeysKept) so that a late resend is not taken again.")
        @OptionGroup var data: DataDirectory
        @Option(help: "Keep keys this many days (at least 28).") var retentionDays = 28
        @Flag(help: "One JSON object.") var json = false

        func validate() throws {
            guard retentionDays >= 28 else { throw ValidationError("--retention-days must be at least 28, not \(retentionDays)") }
        }

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let purged = try await ledger.purgeIdempotencyKeys(retention: .seconds(Int64(min(retentionDays, 100_000)) * 86_400))
            let footprint = try ledger.idempotencyFootprint()
            if json {
                printLine(.object([
                    ("messageKeys", .int(Int64(purged.messageKeys))), ("messageKeysKept", .int(Int64(purged.messageKeysKept))),
                    ("updateKeys", .int(Int64(purged.updateKeys))),
                    ("remaining", .object(footprint.map { ($0.name, .object([("entries", .int(Int64($0.entries))), ("pages", .int(Int64($0.pages)))])) })),
                ]))
                return
            }
            print("purged \(purged.messageKeys) message keys and \(purged.updateKeys) UpdateRecords keys; kept \(purged.messageKeysKept) keys of expired messages sent without SentAt")
            for f in footprint { print("  \(f.name): \(f.entries) keys in \(f.pages) pages") }
        }
    }
}
