import ArgumentParser
import Foundation
import SyncLedger
import SyncLedgerClient

/// `syncledger client syncs`: named syncs (Salesforce Mobile Sync's model) from a JSON file.
struct ClientSyncsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncs",
        abstract: "Named syncs: load a JSON file of them, run or re-sync one by name, clean ghosts, show their status.",
        discussion: """
            The file: {"syncs":[{"syncName":"prefsDown","syncType":"syncDown","datasets":["prefs"],\
            "options":{"mergeMode":"LEAVE_IF_CHANGED"}}]}; syncType is syncDown, syncUp or sync, mergeMode \
            OVERWRITE (the default) or LEAVE_IF_CHANGED. A name already loaded keeps its state.
            """,
        subcommands: [Load.self, Run.self, Resync.self, Clean.self, Show.self])

    static func json(_ s: SyncState) -> JSON {
        .object([("name", .string(s.name)), ("type", .string(s.type.rawValue)), ("datasets", .array(s.datasets.map { .string($0) })),
                 ("mergeMode", .string(s.options.mergeMode.rawValue)), ("status", .string(s.status.rawValue)), ("progress", .int(Int64(s.progress))),
                 ("totalSize", .int(Int64(s.totalSize))), ("pulled", .int(Int64(s.pulled))), ("pushed", .int(Int64(s.pushed))),
                 ("skipped", .int(Int64(s.skipped))), ("cursors", .object(s.cursors.sorted { $0.key < $1.key }.map { ($0.key, .uint($0.value)) })),
                 ("error", .string(s.error))])
    }

    static func line(_ s: SyncState) -> String {
        var text = "\(s.name)  \(s.type.rawValue) \(s.options.mergeMode.rawValue)  \(s.status.rawValue) \(s.progress)%  pulled \(s.pulled), pushed \(s.pushed), skipped \(s.skipped)"
        if let error = s.error { text += "  (\(error))" }
        return text
    }

    static func manager(_ connection: ClientCommand.Connection) throws -> SyncManager { try SyncManager(client: try connection.open()) }

    static func finish(_ state: SyncState, json: Bool) throws {
        if json { printLine(Self.json(state)) } else { print(Self.line(state)) }
        if state.status != .done { throw CLIError("sync \(state.name) ended \(state.status.rawValue)" + (state.error.map { ": \($0)" } ?? "")) }
    }

    struct Load: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Load named syncs from a JSON file into the store.")
        @OptionGroup var connection: ClientCommand.Connection
        @Argument var file: String

        func run() async throws {
            let added = try await ClientCommand.run { try ClientSyncsCommand.manager(connection).load(configFile: file) }
            print(added.isEmpty ? "no new syncs" : "loaded \(added.joined(separator: ", "))")
        }
    }

    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Run a named sync from the start (every dataset from sync count 0); exit 0 when DONE.")
        @OptionGroup var connection: ClientCommand.Connection
        @Argument var name: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let state = try await ClientCommand.run { try await ClientSyncsCommand.manager(connection).run(name) }
            try ClientSyncsCommand.finish(state, json: json)
        }
    }

    struct Resync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "resync", abstract: "Run a named sync again from where it got to (incremental); exit 0 when DONE.")
        @OptionGroup var connection: ClientCommand.Connection
        @Argument var name: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let state = try await ClientCommand.run { try await ClientSyncsCommand.manager(connection).reSync(name) }
            try ClientSyncsCommand.finish(state, json: json)
        }
    }

    struct Clean: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove local clean records the server no longer has (a down sync's datasets).")
        @OptionGroup var connection: ClientCommand.Connection
        @Argument var name: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let removed = try await ClientCommand.run { try await ClientSyncsCommand.manager(connection).cleanResyncGhosts(name) }
            if json { printLine(.object([("name", .string(name)), ("removed", .int(Int64(removed)))])) } else { print("removed \(removed) record(s)") }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "status", abstract: "The named syncs and their status (a sync a restart interrupted shows STOPPED).")
        @OptionGroup var connection: ClientCommand.Connection
        @Flag(help: "One JSON object per sync.") var json = false

        func run() async throws {
            let states = try await ClientCommand.run { try ClientSyncsCommand.manager(connection).states() }
            for s in states { if json { printLine(ClientSyncsCommand.json(s)) } else { print(ClientSyncsCommand.line(s)) } }
            if !json, states.isEmpty { print("no named syncs") }
        }
    }
}
