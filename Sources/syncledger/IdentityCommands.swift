import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger identities`: Cognito Identity's pools and identities, on a data directory.
struct Identities: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cognito Identity: identity pools, their identities, merges and OpenID Connect providers.",
        discussion: """
            Pools, identities and their links are records of each pool's system streams \
            (docs/identity.md); these commands read and change them beside a running server, each \
            change one log entry.
            """,
        subcommands: [IdentityPoolCommands.self, List.self, Show.self, Merge.self, Disable.self, OpenIDProviderCommands.self])

    static func json(_ r: IdentityRecord, pool: String) -> JSON {
        .object([("identityId", .string(r.id)), ("identityPoolId", .string(pool)), ("logins", .array(r.logins.map { .string($0) })),
                 ("created", .time(r.created)), ("modified", .time(r.modified)), ("disabled", .string(r.disabled)),
                 ("mergedInto", .string(r.mergedInto))])
    }

    static func json(_ m: MergedDataset) -> JSON {
        .object([("dataset", .string(m.child)), ("mergedFrom", .string(m.sourceIdentity)), ("sourceDataset", .string(m.sourceDataset)),
                 ("sourceSyncCount", .uint(m.sourceSyncCount)), ("reportedUnder", .string(m.root)), ("merged", .time(m.merged))])
    }

    /// `syncledger identities list`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The identities of a pool, by id.")
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Option(help: "Show at most this many.") var limit = 1000
        @Flag(help: "One JSON object per identity.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let pool = try IdentityPoolID(self.pool)
            var shown = 0
            var next: String?
            repeat {
                let page = try ledger.identities(pool: pool, maxResults: 60, nextToken: next)
                for r in page.identities where shown < limit {
                    shown += 1
                    if json { printLine(Identities.json(r, pool: pool.rawValue)) } else {
                        let state = r.disabled.map { "  DISABLED (\($0))" } ?? ""
                        print("\(r.id)  \(r.logins.isEmpty ? "unauthenticated" : "logins: " + r.logins.joined(separator: ", "))  created \(ISOTime.format(r.created))\(state)")
                    }
                }
                next = page.nextToken
            } while next != nil && shown < limit
            if !json, shown == 0 { print("no identities") }
        }
    }

    /// `syncledger identities show`.
    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One identity: its pool, logins and dates.")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The identity id.") var id: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            guard let pool = try ledger.poolOfIdentity(id), let record = try ledger.identity(pool: pool, id: id) else {
                throw LedgerError(.notFound, "there is no identity \(id)")
            }
            let merges = try ledger.merges(pool: pool, identity: record.id)
            if json {
                guard case .object(var fields) = Identities.json(record, pool: pool.rawValue) else { return }
                fields.append(("merges", .array(merges.map(Identities.json))))
                printLine(.object(fields))
                return
            }
            print("\(record.id) in identity pool \(pool)")
            if let reason = record.disabled { print("  DISABLED: \(reason)") }
            print("  logins: \(record.logins.isEmpty ? "none (unauthenticated)" : record.logins.joined(separator: ", "))")
            print("  created \(ISOTime.format(record.created)), last changed \(ISOTime.format(record.modified))")
            for m in merges {
                print("  merged: \(m.child) copies \(m.sourceIdentity)/\(m.sourceDataset) at sync count \(m.sourceSyncCount) (\(ISOTime.format(m.merged)))")
            }
        }
    }

    /// `syncledger identities merge`.
    struct Merge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Merge one identity into another, as Cognito does.",
            discussion: """
                The source's logins move to the destination, each of its datasets D becomes D.<source> \
                of the destination (ListRecords of D reports it in MergedDatasetNames), and the source \
                is disabled. One log entry set, all or nothing; the source's history stays.
                """)
        @OptionGroup var data: DataDirectory
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Option(help: "The identity merged away (disabled afterwards).") var source: String
        @Option(help: "The identity that survives.") var destination: String
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let summary = try await ledger.mergeIdentities(pool: try IdentityPoolID(pool), source: source, into: destination, caller: "cli")
            if json {
                printLine(.object([("survivor", .string(summary.survivor)), ("merged", .array(summary.merged.map { .string($0) })),
                                   ("datasets", .array(summary.datasets.map(Identities.json)))]))
                return
            }
            print("merged \(source) into \(destination): \(summary.datasets.count) dataset(s) copied")
            for m in summary.datasets { print("  \(m.sourceDataset) -> \(m.child)") }
        }
    }

    /// `syncledger identities disable`.
    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Disable an identity: no more credentials, its temporary ones stop at once; its data and history stay.")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The identity id.") var id: String
        @Option(help: "Why (shown by identities show).") var reason = ""

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            guard let pool = try ledger.poolOfIdentity(id) else { throw LedgerError(.notFound, "there is no identity \(id)") }
            try await ledger.disableIdentity(pool: pool, identity: id, reason: reason, caller: "cli")
            print("disabled \(id)")
        }
    }
}
