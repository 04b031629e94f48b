import ArgumentParser
import Crypto
import Foundation
import SyncLedger
import SyncLedgerServer

/// `syncledger push`: the push outbox and the transports, on a data directory.
struct Push: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Push notifications: status, dead letters, retry, transports, time-to-live.",
        discussion: """
            The outbox lives in DATA/push and the transports' secrets with the other secrets; \
            these commands work beside a running server, which sees a new transport or a retried \
            dead letter at its next attempt. See docs/push.md.
            """,
        subcommands: [Status.self, Pending.self, DeadLetters.self, Retry.self, Configure.self, Transports.self, RemoveTransport.self, TTL.self])

    static func openOutbox(_ data: DataDirectory) throws -> (Ledger, PushOutbox) {
        let ledger = try data.open()
        do { return (ledger, try PushOutbox(directory: ledger.directory + "/push")) } catch {
            ledger.close()
            throw error
        }
    }

    static func row(_ n: PushNotification) -> JSON {
        .object([
            ("identityPoolId", .string(n.pool)), ("identityId", .string(n.identity)), ("datasetName", .string(n.dataset)),
            ("deviceId", .string(n.deviceID)), ("platform", .string(n.platform.rawValue)), ("syncCount", .uint(n.syncCount)),
            ("sequence", .uint(n.sequence)), ("committed", .time(n.committed)), ("attempts", .int(Int64(n.attempts))),
            ("inFlight", .bool(n.inFlight)), ("nextAttempt", n.inFlight || n.deadSince != nil ? .null : .time(n.nextAttempt)),
            ("lastError", .string(n.lastError)), ("deadSince", .time(n.deadSince)),
        ])
    }

    /// `syncledger push status`.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Counts per transport: pending, in flight, delivered, expired, dead, and more.")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object: cursor, lag, and per transport every counter.") var json = false

        func run() async throws {
            let (ledger, outbox) = try Push.openOutbox(data)
            defer { ledger.close() }
            let (cursor, transports) = try outbox.status()
            let last = try ledger.lastSequence
            let lag = last > cursor ? last - cursor : 0
            if json {
                printLine(.object([
                    ("cursor", .uint(cursor)), ("lastSequence", .uint(last)), ("lag", .uint(lag)),
                    ("transports", .object(transports.map { t in
                        (t.transport.rawValue, .object(PushCounter.allCases.map { ($0.rawValue, .int(t.counts[$0.rawValue] ?? 0)) }))
                    })),
                ]))
                return
            }
            print("Outbox: derived up to commit \(cursor) of \(last) (\(lag) not yet derived).")
            let columns = PushCounter.allCases.map(\.rawValue)
            let width = max(10, columns.map(\.count).max() ?? 0)
            print("".padding(toLength: width, withPad: " ", startingAt: 0) + transports.map { $0.transport.rawValue.leftPadded(10) }.joined())
            for name in columns {
                print(name.padding(toLength: width, withPad: " ", startingAt: 0) + transports.map { String($0.counts[name] ?? 0).leftPadded(10) }.joined())
            }
        }
    }

    /// `syncledger push pending`.
    struct Pending: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The notifications waiting, soonest first.")
        @OptionGroup var data: DataDirectory
        @Option(help: "Show at most this many.") var limit = 100
        @Flag(help: "One JSON object per notification.") var json = false

        func run() async throws {
            let (ledger, outbox) = try Push.openOutbox(data)
            defer { ledger.close() }
            for n in try outbox.pendingRows(limit: max(0, limit)) {
                if json { printLine(Push.row(n)); continue }
                let when = n.inFlight ? "in flight" : "due \(ISOTime.format(n.nextAttempt))"
                print("\(n.pool) \(n.identity) \(n.dataset) → device \(n.deviceID) (\(n.platform.rawValue)) syncCount \(n.syncCount), attempts \(n.attempts), \(when)\(n.lastError.map { "; last: \($0)" } ?? "")")
            }
        }
    }

    /// `syncledger push dead-letters`.
    struct DeadLetters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "dead-letters", abstract: "Notifications that were given up on, and why.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "Only this pool's.") var pool: String?
        @Option(help: "Show at most this many.") var limit = 1000
        @Flag(help: "One JSON object per dead letter.") var json = false

        func run() async throws {
            let (ledger, outbox) = try Push.openOutbox(data)
            defer { ledger.close() }
            let letters = try outbox.deadLetters(pool: pool, limit: max(0, limit))
            for n in letters {
                if json { printLine(Push.row(n)); continue }
                print("\(n.pool) \(n.identity) \(n.dataset) → device \(n.deviceID) (\(n.platform.rawValue)) syncCount \(n.syncCount), dead since \(ISOTime.format(n.deadSince ?? n.committed)) after \(n.attempts) attempts: \(n.lastError ?? "")")
            }
            if !json, letters.isEmpty { print("No dead letters.") }
        }
    }

    /// `syncledger push retry`.
    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Take dead letters back into the outbox, due now with fresh attempts and time-to-live.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "Only this pool's.") var pool: String?
        @Option(name: .customLong("device-id"), help: "Only this device's.") var device: String?

        func run() async throws {
            let (ledger, outbox) = try Push.openOutbox(data)
            defer { ledger.close() }
            let count = try outbox.retryDeadLetters(pool: pool, deviceID: device, now: .now)
            print("Took \(count) dead letter\(count == 1 ? "" : "s") back into the outbox.")
        }
    }

    /// `syncledger push transports`.
    struct Transports: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The configured transports (never their keys or secrets).")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per transport.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            for t in try ledger.secrets.pushTransports() {
                let fields = t.redacted
                if json { printLine(.object(fields.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })) } else {
                    print("\(t.arn): \(t.kind.rawValue) " + fields.filter { !["arn", "kind"].contains($0.key) }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
                }
            }
        }
    }

    /// `syncledger push remove-transport`.
    struct RemoveTransport: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "remove-transport", abstract: "Remove the transport of an application ARN.")
        @OptionGroup var data: DataDirectory
        @Option(help: "The application ARN.") var arn: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            try ledger.secrets.removePushTransport(arn: arn)
            print("Removed the transport of \(arn).")
        }
    }

    /// `syncledger push ttl`.
    struct TTL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ttl", abstract: "Show or set a pool's notification time-to-live (default 24 h).")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The pool.") var pool: String
        @Argument(help: "Seconds, 1-2419200; omit to show it.") var seconds: Int?
        @Flag(help: "Go back to the default.") var clear = false

        func run() async throws {
            _ = try IdentityPoolID(pool)
            let (ledger, outbox) = try Push.openOutbox(data)
            defer { ledger.close() }
            if clear { try outbox.setTimeToLive(pool: pool, nil) } else if let seconds { try outbox.setTimeToLive(pool: pool, .seconds(seconds)) }
            let ttl = try outbox.timeToLive(pool: pool)
            print("\(pool): \((ttl ?? PushPolicy().defaultTimeToLive).components.seconds) seconds\(ttl == nil ? " (the default)" : "")")
        }
    }
}

extension String {
    func leftPadded(_ width: Int) -> String { count >= width ? " " + self : String(repeating: " ", count: width - count) + self }
}
