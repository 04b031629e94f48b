import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger streams …`: where Cognito Streams go, and how far delivery stands.
struct Streams: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Configure and inspect Cognito Streams delivery.",
        discussion: """
            A pool's SetIdentityPoolConfiguration CognitoStreams names a StreamName; when its \
            StreamingStatus is ENABLED the server delivers every sync of the pool, at least once and \
            in order per dataset, to the sink configured here for that name. Secrets are kept with \
            the other secrets: never in the log, exports, followers or logs.
            """,
        subcommands: [Configure.self, Status.self, Remove.self])

    /// `syncledger streams configure`.
    struct Configure: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set the sink of a StreamName: an HTTP endpoint, a directory of JSON lines, or Kinesis.",
            discussion: """
                --http POSTs {"Records":[…]} batches (up to 500 records or 1 MiB) signed with \
                X-SyncLedger-Signature: sha256=<hex HMAC-SHA256(secret, body)>. --directory appends \
                one record per line to stream-<sequence>.jsonl files, a new file once one reaches \
                --max-file-bytes. The server picks a change up within a second.
                """)
        @OptionGroup var data: DataDirectory
        @Option(help: "The StreamName of the pools' CognitoStreams.") var streamName: String
        @Option(help: "POST batches to this URL (https://…, or http:// on loopback).") var http: String?
        @Option(help: "A file holding the HMAC secret for --http (at least 16 bytes).") var secretFile: String?
        @Option(help: "Write JSON lines into this folder.") var directory: String?
        @Option(help: "Start a new file once one reaches this size (with --directory).") var maxFileBytes: Int = 64 << 20
        @Option(help: "Kinesis PutRecords endpoint (https://kinesis.REGION.amazonaws.com, or a stand-in).") var kinesis: String?
        @Option(help: "AWS region (with --kinesis).") var region: String?
        @Option(help: "AWS access key id (with --kinesis).") var accessKeyId: String?
        @Option(help: "A file holding the AWS secret access key (with --kinesis).") var secretAccessKeyFile: String?

        func run() async throws {
            guard (1...128).contains(streamName.utf8.count), streamName.allSatisfy({ $0.isLetter || $0.isNumber || "_.-".contains($0) }) else {
                throw CLIError("--stream-name must be 1-128 letters, digits, _ . or - (as Kinesis stream names)")
            }
            guard [http, directory, kinesis].compactMap({ $0 }).count == 1 else {
                throw CLIError("give exactly one of --http, --directory or --kinesis")
            }
            var c: StreamSinkConfiguration
            if let http {
                guard let parts = URLComponents(string: http), let scheme = parts.scheme?.lowercased(), let host = parts.host?.lowercased(),
                      scheme == "https" || (scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)),
                      parts.user == nil, parts.password == nil else {
                    throw CLIError("--http must be an https:// URL (plain http only on loopback) without a user name or password")
                }
                guard let secretFile else { throw CLIError("--http needs --secret-file") }
                let secret = try Self.readFile(secretFile, what: "the HMAC secret").trimmingCharacters(in: .whitespacesAndNewlines)
                guard secret.utf8.count >= 16 else { throw CLIError("the HMAC secret in \(secretFile) must be at least 16 bytes") }
                c = StreamSinkConfiguration(streamName: streamName, kind: .http)
                c.url = http
                c.secret = secret
            } else if let directory {
                guard maxFileBytes >= 1024 else { throw CLIError("--max-file-bytes must be at least 1024") }
                c = StreamSinkConfiguration(streamName: streamName, kind: .directory)
                c.directory = URL(fileURLWithPath: directory).standardizedFileURL.path
                c.maxFileBytes = maxFileBytes
            } else {
                guard let kinesis, let parts = URLComponents(string: kinesis), ["http", "https"].contains(parts.scheme?.lowercased() ?? ""),
                      !(parts.host ?? "").isEmpty, parts.user == nil, parts.password == nil else {
                    throw CLIError("--kinesis must be an http(s):// endpoint URL (such as https://kinesis.us-east-1.amazonaws.com)")
                }
                guard let region, !region.isEmpty, let accessKeyId, !accessKeyId.isEmpty, let secretAccessKeyFile else {
                    throw CLIError("--kinesis needs --region, --access-key-id and --secret-access-key-file")
                }
                c = StreamSinkConfiguration(streamName: streamName, kind: .kinesis)
                c.url = kinesis
                c.region = region
                c.accessKeyID = accessKeyId
                c.secretAccessKey = try Self.readFile(secretAccessKeyFile, what: "the AWS secret access key").trimmingCharacters(in: .whitespacesAndNewlines)
                guard !(c.secretAccessKey ?? "").isEmpty else { throw CLIError("the secret access key file \(secretAccessKeyFile) is empty") }
            }
            let ledger = try data.open()
            defer { ledger.close() }
            try ledger.secrets.storeStreamSink(c)
            print("Configured stream \(streamName): \(c.kind.rawValue) \(c.url ?? c.directory ?? "").")
        }

        static func readFile(_ path: String, what: String) throws -> String {
            do { return try String(contentsOfFile: path, encoding: .utf8) } catch { throw CLIError.file(what, path, error) }
        }
    }

    /// `syncledger streams status`.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show each pool's stream target: status, cursor, lag and deliveries.")
        @OptionGroup var data: DataDirectory
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let store = try StreamCursorStore(directory: ledger.directory + "/streams")
            let settings = try ledger.poolStreamSettings().filter { !$0.streamName.isEmpty }
            let targets = try store.all()
            let sinks = Dictionary(try ledger.secrets.streamSinks().map { ($0.streamName, $0) }, uniquingKeysWith: { a, _ in a })
            let last = try ledger.lastSequence
            var keys: [(String, String)] = settings.map { ($0.pool.rawValue, $0.streamName) }
            for t in targets where !keys.contains(where: { $0 == (t.pool, t.streamName) }) { keys.append((t.pool, t.streamName)) }
            var rows: [JSON] = []
            for (pool, name) in keys {
                let setting = settings.first { $0.pool.rawValue == pool && $0.streamName == name }
                let target = targets.first { $0.pool == pool && $0.streamName == name }
                let status = setting == nil ? "UNCONFIGURED" : setting!.enabled ? "ENABLED" : "DISABLED"
                // A running bulk publish: its start and the datasets the sink acknowledged so far.
                let running = try setting?.bulkPublishStarted.map { started in
                    (started, try store.bulkProgress(pool: pool, started: started)?.published ?? 0)
                }
                let bulk: JSON = running.map { .object([("started", .int($0.0.milliseconds)), ("published", .int($0.1))]) } ?? .null
                let sink: JSON = sinks[name].map { s in .object(s.redacted.sorted { $0.key < $1.key }.map { ($0.key, JSON.string($0.value)) }) } ?? .null
                rows.append([
                    "pool": .string(pool), "streamName": .string(name), "streamingStatus": .string(status),
                    "cursor": .uint(target?.cursor), "lagEntries": .uint(target.map { last > $0.cursor ? last - $0.cursor : 0 }),
                    "delivered": .int(target?.delivered ?? 0), "batches": .int(target?.batches ?? 0), "failures": .int(target?.failures ?? 0),
                    "lastError": .string(target?.lastError), "sink": sink, "bulkPublish": bulk,
                ])
                if !json {
                    let where_ = sinks[name].map { "\($0.kind.rawValue) \($0.url ?? $0.directory ?? "")" } ?? "no sink configured"
                    let position = target.map { "cursor \($0.cursor), lag \(last > $0.cursor ? last - $0.cursor : 0) entries, delivered \($0.delivered) in \($0.batches) batches, \($0.failures) failures" } ?? "not started"
                    let publishing = running.map { "; bulk publish running, \($0.1) datasets published" } ?? ""
                    print("\(pool) → \(name) [\(status)]: \(position); \(where_)\(target?.lastError.map { "; last error: \($0)" } ?? "")\(publishing)")
                }
            }
            if json { print(JSON.object([("feedSequence", .uint(last)), ("targets", .array(rows))]).pretty) } else if keys.isEmpty { print("No pool has CognitoStreams configured.") }
        }
    }

    /// `syncledger streams remove`.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove the sink of a StreamName and its cursors (records wait until a sink is configured again).")
        @OptionGroup var data: DataDirectory
        @Option(help: "The StreamName.") var streamName: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            try ledger.secrets.removeStreamSink(name: streamName)
            let removed = try StreamCursorStore(directory: ledger.directory + "/streams").remove(streamName: streamName)
            print("Removed the sink of stream \(streamName) and \(removed) cursor(s).")
        }
    }
}
