import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger identities`: Cognito Identity's pools and identities, on a data directory.
struct Identities: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cognito Identity: identity pools and their identities (list, show).",
        discussion: """
            Pools and identities are records of each pool's system streams (docs/identity.md); these \
            commands read them beside a running server. Merging and disabling identities are not \
            built yet (issue 11).
            """,
        subcommands: [Pools.self, List.self, Show.self])

    static func json(_ r: IdentityRecord, pool: String) -> JSON {
        .object([("identityId", .string(r.id)), ("identityPoolId", .string(pool)), ("logins", .array(r.logins.map { .string($0) })),
                 ("created", .time(r.created)), ("modified", .time(r.modified))])
    }

    /// `syncledger identities pools`.
    struct Pools: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The identity pools created with CreateIdentityPool.")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per pool.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let pools = try ledger.identityPools()
            for p in pools {
                if json {
                    printLine(.object([("identityPoolId", .string(p.id)), ("name", .string(p.name)),
                                       ("allowUnauthenticatedIdentities", .bool(p.allowUnauthenticatedIdentities)),
                                       ("developerProviderName", .string(p.developerProviderName)), ("created", .time(p.created))]))
                } else {
                    print("\(p.id)  \(p.name)  unauthenticated \(p.allowUnauthenticatedIdentities ? "allowed" : "refused")" + (p.developerProviderName.map { "  developer provider \($0)" } ?? ""))
                }
            }
            if !json, pools.isEmpty { print("no identity pools") }
        }
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
                        print("\(r.id)  \(r.logins.isEmpty ? "unauthenticated" : "logins: " + r.logins.joined(separator: ", "))  created \(ISOTime.format(r.created))")
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
            if json { printLine(Identities.json(record, pool: pool.rawValue)); return }
            print("\(record.id) in identity pool \(pool)")
            print("  logins: \(record.logins.isEmpty ? "none (unauthenticated)" : record.logins.joined(separator: ", "))")
            print("  created \(ISOTime.format(record.created)), last changed \(ISOTime.format(record.modified))")
        }
    }
}
