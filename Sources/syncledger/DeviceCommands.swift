import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger devices`: the device registry of a pool, on a data directory.
struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The device registry: list, show, unlink (log out), remove.",
        discussion: """
            Devices are records of each pool's `devices` system stream (docs/devices.md); these \
            commands read and change them beside a running server. Tokens are shown only as \
            whether a device has one.
            """,
        subcommands: [List.self, Show.self, Unlink.self, Remove.self])

    static func json(_ d: Device) -> JSON {
        .object([
            ("deviceCode", .string(d.id)), ("platform", .string(d.platform?.rawValue)), ("identityId", .string(d.identity)),
            ("loggedIn", .bool(d.isLoggedIn)), ("subscribeAll", .bool(d.subscribesAll ?? false)), ("owner", .string(d.owner)),
            ("osVersion", .string(d.osVersion)), ("appVersion", .string(d.appVersion)), ("model", .string(d.model)),
            ("locale", .string(d.locale)),
            ("settings", d.settings.map { s in .object(s.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) }) } ?? .null),
            ("hasToken", .bool(d.token != nil)), ("pushEnabled", .bool(d.isEnabled)), ("tokenDisabledReason", .string(d.disabledReason)),
            ("created", .time(d.created)), ("updated", .time(d.updated)), ("tokenRegistered", .time(d.registered)),
        ])
    }

    static func line(_ d: Device) -> String {
        let who = d.identity.map { "logged in as \($0)" } ?? "logged out"
        let push = d.token == nil ? "no token" : d.isEnabled ? "push on" : "token dead (\(d.disabledReason ?? ""))"
        let about = [d.model, d.osVersion.map { "OS \($0)" }, d.appVersion.map { "app \($0)" }, d.locale].compactMap { $0 }.joined(separator: ", ")
        return "\(d.id)  \(d.platform?.rawValue ?? "-")  \(who), \(push)" + (about.isEmpty ? "" : "  [\(about)]")
    }

    /// `syncledger devices list`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The devices of a pool, or those logged in as one identity.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Option(name: .customLong("identity-id"), help: "Only the devices logged in as this identity.") var identity: String?
        @Option(help: "Show at most this many.") var limit = 1000
        @Flag(help: "One JSON object per device.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let pool = try IdentityPoolID(self.pool)
            let devices = try identity.map { try ledger.devices(pool: pool, identity: try IdentityID($0)) } ?? ledger.allDevices(pool: pool, limit: limit)
            for device in devices.prefix(limit) {
                if json { printLine(Devices.json(device)) } else { print(Devices.line(device)) }
            }
            if !json, devices.isEmpty { print("no devices") }
        }
    }

    /// `syncledger devices show`.
    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One device, with its settings.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Argument(help: "The device code.") var code: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let pool = try IdentityPoolID(self.pool)
            guard let device = try ledger.device(pool: pool, id: code) else {
                throw LedgerError(.notFound, "identity pool \(pool) has no device \(code)")
            }
            if json { printLine(Devices.json(device)); return }
            print(Devices.line(device))
            if let owner = device.owner { print("  created by \(owner)" + (device.created.map { " at \(ISOTime.format($0))" } ?? "")) }
            if let updated = device.updated { print("  last changed \(ISOTime.format(updated))") }
            for (key, value) in (device.settings ?? [:]).sorted(by: { $0.key < $1.key }) { print("  setting \(key) = \(value)") }
        }
    }

    /// `syncledger devices unlink`.
    struct Unlink: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Log a device out: it keeps its code and token; its identity's changes stop reaching it.",
            discussion: "Recorded in the log with the author `admin:cli`.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Argument(help: "The device code.") var code: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let pool = try IdentityPoolID(self.pool)
            let before = try ledger.device(pool: pool, id: code)
            let device = try await ledger.logout(pool: pool, caller: .admin("cli"), code: code)
            if let identity = before?.identity {
                print("device \(device.id) logged out of \(identity)")
            } else {
                print("device \(device.id) was not logged in; nothing changed")
            }
        }
    }

    /// `syncledger devices remove`.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a device from the registry: logged out, token and subscriptions gone, its code unknown from then on.",
            discussion: "The log keeps its history; recorded with the author `admin:cli`.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Argument(help: "The device code.") var code: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let device = try await ledger.removeDevice(pool: try IdentityPoolID(pool), caller: .admin("cli"), code: code)
            print("device \(device.id) removed")
        }
    }
}
