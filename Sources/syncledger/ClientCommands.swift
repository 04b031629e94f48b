import ArgumentParser
import Foundation
import SyncLedger
import SyncLedgerClient

/// `syncledger client`: the client library from a shell — a local store, and a server reached
/// with the Cognito Sync API.
struct ClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract: "The SyncLedger client: a local store synced with a server (put, get, remove, sync, status, datasets, syncs).",
        discussion: """
            Credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, with \
            --identity naming the identity they reach; or from Cognito Identity on the same server with \
            --identity-pool-signin (GetId once, kept in the store, then GetCredentialsForIdentity). Local \
            commands (put, get, remove, status, datasets) work offline. docs/client.md has the details.
            """,
        subcommands: [Put.self, Get.self, Remove.self, Sync.self, Status.self, Datasets.self, ClientSyncsCommand.self])

    /// Where the store is and how the server is reached.
    struct Connection: ParsableArguments {
        @Option(help: "The local store's directory (made if missing).") var store: String
        @Option(help: "The server, e.g. http://127.0.0.1:8080.") var endpoint: String = "http://127.0.0.1:8080"
        @Option(help: "The identity pool id.") var pool: String
        @Option(help: "The identity the credentials reach (with AWS_* credentials).") var identity: String?
        @Flag(help: "Sign in with Cognito Identity on the same server (an unauthenticated identity) instead of AWS_* credentials.")
        var identityPoolSignin = false
        @Option(help: "The region of the signatures.") var region = "us-east-1"

        func open() throws -> SyncClient {
            guard let url = URL(string: endpoint), ["http", "https"].contains(url.scheme ?? "") else {
                throw CLIError("--endpoint must be an http:// or https:// URL, not \(endpoint)", exitCode: 64)
            }
            let store = try ClientStore(directory: self.store)
            let credentials: any CredentialsProvider
            if identityPoolSignin {
                let key = "signin-identity/\(pool)"
                let cached = try store.metaValue(key)
                credentials = CognitoIdentityCredentials(endpoint: url, pool: pool, identityID: cached, onIdentityChange: { _, new in
                    try? store.setMeta(key, new)
                })
                return try SyncClient(store: store, transport: CognitoSyncTransport(endpoint: url, region: region, pool: pool, credentials: SavingIdentity(inner: credentials, store: store, key: key)), pool: pool)
            }
            guard let identity else { throw CLIError("give --identity (the identity AWS_ACCESS_KEY_ID reaches) or --identity-pool-signin", exitCode: 64) }
            credentials = try EnvironmentCredentials.fromEnvironment(identityID: identity)
            return try SyncClient(store: store, transport: CognitoSyncTransport(endpoint: url, region: region, pool: pool, credentials: credentials), pool: pool)
        }
    }

    /// Keeps the identity Cognito Identity gave in the store, so the next run signs in as it.
    struct SavingIdentity: CredentialsProvider {
        let inner: any CredentialsProvider
        let store: ClientStore
        let key: String
        func credentials() async throws -> AWSCredentials { try await inner.credentials() }
        func identityID() async throws -> String {
            let id = try await inner.identityID()
            if try store.metaValue(key) != id { try store.setMeta(key, id) }
            return id
        }
    }

    static func run<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as SyncClientError {
            throw CLIError(error.description, exitCode: { if case .unresolvedConflicts = error { 2 } else { 1 } }())
        }
    }

    struct Put: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set records locally, all in one transaction (synced by the next sync).")
        @OptionGroup var connection: Connection
        @Argument var dataset: String
        @Argument(help: "KEY VALUE, and more pairs.") var pairs: [String]
        @Flag(help: "One JSON object.") var json = false

        func validate() throws {
            guard !pairs.isEmpty, pairs.count % 2 == 0 else { throw ValidationError("give KEY VALUE pairs (\(pairs.count) arguments after the dataset)") }
        }

        func run() async throws {
            var values: [String: String?] = [:]
            for i in stride(from: 0, to: pairs.count, by: 2) { values[pairs[i]] = pairs[i + 1] }
            let changed = try await ClientCommand.run { try await connection.open().put(dataset, values) }
            if json { printLine(.object([("dataset", .string(dataset)), ("changed", .int(Int64(changed)))])) }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a record's value from the local store (exit 1 when there is none).")
        @OptionGroup var connection: Connection
        @Argument var dataset: String
        @Argument var key: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let client = try connection.open()
            let record = try await ClientCommand.run { try client.store.record(identity: try await client.identity(), dataset: dataset, key: key) }
            if json {
                printLine(.object([("dataset", .string(dataset)), ("key", .string(key)), ("value", .string(record?.value)),
                                   ("syncCount", .uint(record?.syncCount)), ("dirty", .bool(record?.isDirty ?? false))]))
                return
            }
            guard let value = record?.value else { throw CLIError("no record \(key) in dataset \(dataset)") }
            print(value)
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a record locally (the removal is synced).")
        @OptionGroup var connection: Connection
        @Argument var dataset: String
        @Argument var key: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let changed = try await ClientCommand.run { try await connection.open().remove(dataset, key) }
            if json { printLine(.object([("dataset", .string(dataset)), ("key", .string(key)), ("changed", .bool(changed))])) }
        }
    }

    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Synchronize a dataset: exit 0 when it is in sync, 2 on unresolved conflicts, 1 on another failure.")
        @OptionGroup var connection: Connection
        @Argument var dataset: String
        @Option(help: "Resolve every conflict with the remote or the local record (default: leave them, exit 2).") var resolve: ConflictChoice?
        @Flag(help: "Delete the local copy when the dataset was deleted on the server (default: keep it and fail).") var acceptDeletes = false
        @Flag(help: "One JSON object.") var json = false

        enum ConflictChoice: String, ExpressibleByArgument { case remote, local }

        struct Handler: SyncHandler {
            let resolution: Resolution?
            let acceptDeletes: Bool
            func resolve(conflicts: [Conflict], dataset: String) async -> [String: Resolution]? {
                guard let resolution else { return nil }
                return Dictionary(conflicts.map { ($0.key, resolution) }, uniquingKeysWith: { a, _ in a })
            }
            func datasetDeleted(_ dataset: String) async -> Bool { acceptDeletes }
            func datasetsMerged(_ dataset: String, merged: [String]) async -> Bool { true }
        }

        func run() async throws {
            let client = try connection.open()
            let handler = Handler(resolution: resolve.map { $0 == .remote ? Resolution.remote : .local }, acceptDeletes: acceptDeletes)
            let report = try await ClientCommand.run { try await client.synchronize(dataset, handler: handler) }
            if json {
                printLine(.object([("dataset", .string(report.dataset)), ("pulled", .int(Int64(report.pulled))), ("pushed", .int(Int64(report.pushed))),
                                   ("conflicts", .int(Int64(report.conflicts))), ("merged", .array(report.merged.map { .string($0) })),
                                   ("deleted", .bool(report.deleted)), ("attempts", .int(Int64(report.attempts))), ("syncCount", .int(report.lastSyncCount))]))
                return
            }
            var line = "\(report.dataset): in sync at sync count \(report.lastSyncCount) (pulled \(report.pulled), pushed \(report.pushed)"
            if report.conflicts > 0 { line += ", \(report.conflicts) conflict(s) resolved" }
            if report.deleted { line += ", deleted" }
            if !report.merged.isEmpty { line += ", merged datasets: \(report.merged.joined(separator: ", "))" }
            print(line + ")")
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The local datasets: sync count, unsynced changes, last sync; and queued syncs.")
        @OptionGroup var connection: Connection
        @Flag(help: "One JSON object per dataset.") var json = false

        func run() async throws {
            let client = try connection.open()
            try await ClientCommand.run {
                let identity = try await client.identity()
                let queued = Set(try client.store.pendingSyncs(identity: identity).map(\.dataset))
                for (name, d) in try client.store.datasets(identity: identity) {
                    let dirty = try client.store.dirtyRecords(identity: identity, dataset: name).count
                    if json {
                        printLine(.object([("dataset", .string(name)), ("syncCount", .int(d.lastSyncCount)), ("records", .uint(d.recordCount)),
                                           ("bytes", .uint(d.bytes)), ("unsynced", .int(Int64(dirty))), ("deletedLocally", .bool(d.isDeletedLocally)),
                                           ("lastSync", .string(d.lastSyncOutcome.rawValue)), ("lastSyncError", .string(d.lastSyncError)),
                                           ("queued", .bool(queued.contains(name)))]))
                    } else {
                        var line = "\(name)  sync count \(d.lastSyncCount)  \(d.recordCount) records  \(dirty) unsynced  last sync \(d.lastSyncOutcome.rawValue)"
                        if let error = d.lastSyncError { line += " (\(error))" }
                        if d.isDeletedLocally { line += "  deleted locally" }
                        if queued.contains(name) { line += "  queued" }
                        print(line)
                    }
                }
            }
        }
    }

    struct Datasets: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The datasets: local ones, or with --remote the server's (ListDatasets).")
        @OptionGroup var connection: Connection
        @Flag(help: "Ask the server.") var remote = false
        @Flag(help: "One JSON object per dataset.") var json = false

        func run() async throws {
            let client = try connection.open()
            try await ClientCommand.run {
                if remote {
                    for d in try await client.refreshDatasetMetadata() {
                        if json { printLine(.object([("dataset", .string(d.name)), ("records", .uint(d.records)), ("bytes", .uint(d.bytes)), ("lastModifiedBy", .string(d.lastModifiedBy))])) }
                        else { print("\(d.name)  \(d.records) records  \(d.bytes) bytes") }
                    }
                } else {
                    for (name, d) in try await client.listDatasets() {
                        if json { printLine(.object([("dataset", .string(name)), ("records", .uint(d.recordCount)), ("bytes", .uint(d.bytes)), ("syncCount", .int(d.lastSyncCount))])) }
                        else { print("\(name)  \(d.recordCount) records  \(d.bytes) bytes  sync count \(d.lastSyncCount)") }
                    }
                }
            }
        }
    }
}
