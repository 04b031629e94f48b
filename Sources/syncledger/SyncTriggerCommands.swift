import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger sync-trigger`: the webhooks that serve pools' SyncTrigger (Cognito Events'
/// Lambda), kept in the secret store by the ARN that `SetCognitoEvents` names.
struct SyncTriggerCommands: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync-trigger",
        abstract: "SyncTrigger hooks: the webhook (and its signing secret) each SyncTrigger ARN calls.",
        discussion: """
            A pool's SetCognitoEvents maps SyncTrigger to an ARN; UpdateRecords of that pool (not with the \
            admin credential) then POSTs Cognito's event to the hook set here and writes its answer. The \
            secret signs each request (X-SyncLedger-Signature: sha256=HMAC of "<X-SyncLedger-Timestamp>.<body>"); \
            it is kept in the secret store and never printed.
            """,
        subcommands: [Set.self, List.self, Remove.self])

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set (or replace) the hook of a SyncTrigger ARN.")
        @OptionGroup var data: DataDirectory
        @Option(help: "The ARN the pool's CognitoEvents names for SyncTrigger.") var arn: String
        @Option(help: "The hook: https://…, or http:// to a loopback address.") var url: String
        @Option(help: "A file holding the signing secret (at least 16 bytes; a final newline is dropped).") var secretFile: String

        func run() async throws {
            let text: String
            do { text = try String(contentsOfFile: secretFile, encoding: .utf8) } catch { throw CLIError.file("cannot read the secret file", secretFile, error) }
            let secret = text.hasSuffix("\n") ? String(text.dropLast()) : text
            let ledger = try data.open()
            defer { ledger.close() }
            try ledger.secrets.storeHook(SyncTriggerHook(arn: arn, url: url, secret: secret))
            print("SyncTrigger \(arn) calls \(url)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The configured hooks (never their secrets).")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per hook.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let hooks = try ledger.secrets.hooksConfigured()
            for h in hooks {
                if json { printLine(.object([("arn", .string(h.arn)), ("url", .string(h.url)), ("configured", .time(h.configured))])) }
                else { print("\(h.arn)  \(h.url)  configured \(ISOTime.format(h.configured))") }
            }
            if !json, hooks.isEmpty { print("no SyncTrigger hooks") }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove the hook of a SyncTrigger ARN (its pools' updates are then refused until one is set or the event is removed).")
        @OptionGroup var data: DataDirectory
        @Option(help: "The ARN.") var arn: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            try ledger.secrets.removeHook(arn: arn)
            print("removed the hook of \(arn)")
        }
    }
}
