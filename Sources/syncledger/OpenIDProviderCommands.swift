import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger identities providers`: the OpenID Connect login providers whose ID tokens sign
/// users in. The server reaches no issuer, so each is configured here with its JWKS.
struct OpenIDProviderCommands: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "providers",
        abstract: "OpenID Connect login providers (add, list, remove).",
        discussion: """
            Each provider is an issuer URL, its JWKS (the public keys that sign its ID tokens, \
            saved from the issuer's jwks_uri) and the client ids its tokens may carry as aud. Its \
            Logins key is the issuer without https://. Providers are records of a system stream \
            (a log entry each); these commands write beside a running server.
            """,
        subcommands: [Add.self, List.self, Remove.self])

    static func json(_ p: OpenIDProvider) -> JSON {
        .object([("name", .string(p.name)), ("issuer", .string(p.issuer)), ("clientIds", .array(p.clientIDs.map { .string($0) })),
                 ("keys", .int(Int64(keyCount(p)))), ("configured", .time(p.configured))])
    }

    /// How many keys the provider's JWKS lists (0 when it does not parse).
    static func keyCount(_ p: OpenIDProvider) -> Int {
        guard let object = try? JSONSerialization.jsonObject(with: Data(p.jwks.utf8)) as? [String: Any],
              let keys = object["keys"] as? [Any] else { return 0 }
        return keys.count
    }

    /// `syncledger identities providers add`.
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an OpenID Connect provider, or replace the one of that name.",
            discussion: "The JWKS file is checked: RSA keys of at least 2048 bits and EC P-256 keys, at most 100, at most 256 KiB.")
        @OptionGroup var data: DataDirectory
        @Option(help: "The issuer URL (https://…); a token's iss must equal it exactly.") var issuer: String
        @Option(help: ArgumentHelp("The JWKS file (JSON).", valueName: "file")) var jwks: String
        @Option(name: .customLong("client-id"), help: "A client id a token's aud may name (repeat for more).") var clientIDs: [String] = []
        @Option(help: "The Logins key (default: the issuer without https:// and without a trailing /).") var name: String?
        @Flag(help: "Print the provider as one JSON object.") var json = false

        func validate() throws {
            guard !clientIDs.isEmpty else { throw ValidationError("give at least one --client-id") }
        }

        func run() async throws {
            let text: String
            do { text = try String(contentsOfFile: jwks, encoding: .utf8) } catch { throw CLIError.file("cannot read the JWKS file", jwks, error) }
            let provider = OpenIDProvider(name: name, issuer: issuer, clientIDs: clientIDs, jwks: text)
            do { try provider.validate() } catch {
                throw CLIError(error.message.hasPrefix("the JWKS") ? "\(jwks): \(error.message)" : error.message)
            }
            let ledger = try data.open()
            defer { ledger.close() }
            let replaced = try ledger.openIDProvider(named: provider.name) != nil
            let stored = try await ledger.configureOpenIDProvider(provider, caller: "cli")
            if json { printLine(OpenIDProviderCommands.json(stored)); return }
            print("\(replaced ? "replaced" : "added") OpenID Connect provider \(stored.name) (issuer \(stored.issuer), "
                  + "\(OpenIDProviderCommands.keyCount(stored)) keys, client ids \(stored.clientIDs.joined(separator: ", ")))")
        }
    }

    /// `syncledger identities providers list`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The configured OpenID Connect providers, by name.")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per provider.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let providers = try ledger.openIDProviders()
            for p in providers {
                if json { printLine(OpenIDProviderCommands.json(p)) } else {
                    print("\(p.name)  issuer \(p.issuer)  \(OpenIDProviderCommands.keyCount(p)) keys  client ids \(p.clientIDs.joined(separator: ", "))  configured \(ISOTime.format(p.configured))")
                }
            }
            if !json, providers.isEmpty { print("no OpenID Connect providers") }
        }
    }

    /// `syncledger identities providers remove`.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove an OpenID Connect provider: its tokens stop signing users in.")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The provider's name (its Logins key).") var name: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            try await ledger.removeOpenIDProvider(named: name, caller: "cli")
            print("removed OpenID Connect provider \(name)")
        }
    }
}
