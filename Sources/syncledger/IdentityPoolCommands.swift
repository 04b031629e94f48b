import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger identities pools`: identity pools from the command line, as CreateIdentityPool,
/// UpdateIdentityPool and DeleteIdentityPool make them over the wire.
struct IdentityPoolCommands: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pools",
        abstract: "Identity pools: list (the default), create, update, delete.",
        subcommands: [List.self, Create.self, Update.self, Delete.self],
        defaultSubcommand: List.self)

    static func json(_ p: IdentityPoolDefinition) -> JSON {
        .object([("identityPoolId", .string(p.id)), ("name", .string(p.name)),
                 ("allowUnauthenticatedIdentities", .bool(p.allowUnauthenticatedIdentities)),
                 ("developerProviderName", .string(p.developerProviderName)),
                 ("supportedLoginProviders", .object(p.supportedLoginProviders.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
                 ("openIdConnectProviderARNs", .array((p.openIdConnectProviderARNs ?? []).map { .string($0) })),
                 ("created", .time(p.created))])
    }

    static func show(_ p: IdentityPoolDefinition, json: Bool) {
        if json { printLine(Self.json(p)); return }
        var line = "\(p.id)  \(p.name)  unauthenticated \(p.allowUnauthenticatedIdentities ? "allowed" : "refused")"
        if let provider = p.developerProviderName { line += "  developer provider \(provider)" }
        let providers = p.openIdConnectProviders + p.supportedLoginProviders.keys.sorted()
        if !providers.isEmpty { line += "  logins: " + providers.joined(separator: ", ") }
        print(line)
    }

    /// The settings `create` and `update` share.
    struct Settings: ParsableArguments {
        @Option(help: "The pool's name: 1-128 letters, digits, _ and spaces.") var name: String
        @Flag(inversion: .prefixedNo, help: "Whether GetId hands out identities without a login.") var allowUnauthenticated = false
        @Option(help: "The developer provider name (fixed once set).") var developerProvider: String?
        @Option(name: .customLong("openid-provider"), help: "An OpenID Connect provider (its name, as `identities providers add` made it) whose tokens sign users in; repeat for more.")
        var openIDProviders: [String] = []
        @Option(name: .customLong("login-provider"), help: "A SupportedLoginProviders entry NAME=APP_ID; repeat for more.")
        var loginProviders: [String] = []
        @Option(help: "The account id in the OpenID provider ARNs.") var account = "000000000000"

        func arns() -> [String] { openIDProviders.map { "arn:aws:iam::\(account):oidc-provider/\($0)" } }

        func supported() throws -> [String: String] {
            var map: [String: String] = [:]
            for entry in loginProviders {
                guard let eq = entry.firstIndex(of: "="), eq != entry.startIndex, entry.index(after: eq) != entry.endIndex else {
                    throw ValidationError("--login-provider must be NAME=APP_ID, not \(entry)")
                }
                map[String(entry[..<eq])] = String(entry[entry.index(after: eq)...])
            }
            return map
        }
    }

    /// `syncledger identities pools list`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The identity pools, by id.")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per pool.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let pools = try ledger.identityPools()
            for p in pools { IdentityPoolCommands.show(p, json: json) }
            if !json, pools.isEmpty { print("no identity pools") }
        }
    }

    /// `syncledger identities pools create`.
    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create an identity pool; prints it.")
        @OptionGroup var data: DataDirectory
        @OptionGroup var settings: Settings
        @Option(help: "The region part of the pool id.") var region = "us-east-1"
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let ledger = try data.open(create: true)
            defer { ledger.close() }
            let pool = try await ledger.createIdentityPool(
                region: region, name: settings.name, allowUnauthenticatedIdentities: settings.allowUnauthenticated,
                developerProviderName: settings.developerProvider, supportedLoginProviders: try settings.supported(),
                openIdConnectProviderARNs: settings.arns(), caller: "cli")
            IdentityPoolCommands.show(pool, json: json)
        }
    }

    /// `syncledger identities pools update`.
    struct Update: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Replace an identity pool's settings (all of them, as UpdateIdentityPool does).")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The identity pool id.") var id: String
        @OptionGroup var settings: Settings
        @Flag(help: "One JSON object.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let updated = IdentityPoolDefinition(
                id: try IdentityPoolID(id).rawValue, name: settings.name, allowUnauthenticatedIdentities: settings.allowUnauthenticated,
                developerProviderName: settings.developerProvider, supportedLoginProviders: try settings.supported(),
                openIdConnectProviderARNs: settings.arns(), created: .now)
            IdentityPoolCommands.show(try await ledger.updateIdentityPool(updated, caller: "cli"), json: json)
        }
    }

    /// `syncledger identities pools delete`.
    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete an identity pool: GetId and its credentials stop; its data and history stay.")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The identity pool id.") var id: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            try await ledger.deleteIdentityPool(try IdentityPoolID(id), caller: "cli")
            print("deleted identity pool \(id)")
        }
    }
}
