import ArgumentParser
import Crypto
import Foundation
import SyncLedger
import SyncLedgerServer

extension Push {
    /// `syncledger push configure apns|fcm|webhook`.
    struct Configure: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Configure how an application ARN of a pool's PushSync is delivered.",
            discussion: """
                Name the transport by the SNS platform application ARN you give the pool in \
                SetIdentityPoolConfiguration's PushSync.ApplicationArns, as Cognito does \
                (arn:aws:sns:REGION:ACCOUNT:app/PLATFORM/NAME). Keys and secrets are kept with the \
                other secrets: never in the log, exports, followers or logs.
                """,
            subcommands: [APNs.self, FCM.self, Webhook.self])

        static func store(_ configuration: PushTransportConfiguration, _ data: DataDirectory) throws {
            do { try PushConfigurationCheck.validate(configuration) } catch let error as StartupError { throw CLIError(error.message) }
            let ledger = try data.open()
            defer { ledger.close() }
            try ledger.secrets.storePushTransport(configuration)
        }

        static func readFile(_ path: String, what: String) throws -> String {
            do { return try String(contentsOfFile: path, encoding: .utf8) } catch { throw CLIError.file(what, path, error) }
        }

        struct APNs: AsyncParsableCommand {
            static let configuration = CommandConfiguration(commandName: "apns", abstract: "Apple's HTTP/2 provider API with a .p8 token key.")
            @OptionGroup var data: DataDirectory
            @Option(help: "The application ARN (…:app/APNS/NAME or …:app/APNS_SANDBOX/NAME).") var arn: String
            @Option(help: "The .p8 signing key file from Apple's developer account.") var keyFile: String
            @Option(help: "The key's id (10 characters).") var keyId: String
            @Option(help: "The team id (10 characters).") var teamId: String
            @Option(help: "The app's bundle id (apns-topic).") var topic: String

            func run() async throws {
                for (name, value) in [("--key-id", keyId), ("--team-id", teamId)] where !(1...64).contains(value.count) || !value.allSatisfy({ $0.isLetter || $0.isNumber }) {
                    throw CLIError("\(name) must be 1-64 letters and digits (Apple's are 10), not \(quote(value))")
                }
                guard (1...255).contains(topic.utf8.count) else { throw CLIError("--topic must be the app's bundle id") }
                var c = PushTransportConfiguration(arn: arn, kind: .apns)
                c.apnsKey = try Configure.readFile(keyFile, what: "the APNs key")
                c.apnsKeyID = keyId
                c.apnsTeamID = teamId
                c.apnsTopic = topic
                try Configure.store(c, data)
                print("Configured APNs for \(arn) (key \(keyId), team \(teamId), topic \(topic)).")
            }
        }

        struct FCM: AsyncParsableCommand {
            static let configuration = CommandConfiguration(commandName: "fcm", abstract: "Firebase Cloud Messaging's HTTP v1 API with a service-account key file.")
            @OptionGroup var data: DataDirectory
            @Option(help: "The application ARN (…:app/GCM/NAME).") var arn: String
            @Option(help: "The service-account JSON key file from the Firebase console.") var serviceAccount: String

            func run() async throws {
                let json = try Configure.readFile(serviceAccount, what: "the service-account file")
                guard let account = FCMServiceAccount(json: json) else {
                    throw CLIError("the service-account file \(serviceAccount) lacks project_id, client_email or private_key")
                }
                var c = PushTransportConfiguration(arn: arn, kind: .fcm)
                c.fcmServiceAccount = json
                try Configure.store(c, data)
                print("Configured FCM for \(arn) (project \(account.projectID), \(account.clientEmail)).")
            }
        }

        struct Webhook: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "webhook", abstract: "A signed HTTPS POST to your endpoint (ADM, web push gateways, your own fan-out).",
                discussion: "Without --secret-file a fresh secret is made and printed once; keep it in the receiver, which verifies X-SyncLedger-Signature (docs/push.md).")
            @OptionGroup var data: DataDirectory
            @Option(help: "The application ARN (any platform).") var arn: String
            @Option(help: "Where to POST: https://…, or http:// on loopback.") var url: String
            @Option(help: "A file holding the signing secret (at least 16 bytes).") var secretFile: String?

            func run() async throws {
                var secret: String
                var generated = false
                if let secretFile {
                    secret = try Configure.readFile(secretFile, what: "the webhook secret").trimmingCharacters(in: .whitespacesAndNewlines)
                    guard secret.utf8.count >= 16 else { throw CLIError("the webhook secret in \(secretFile) must be at least 16 bytes") }
                } else {
                    secret = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
                    generated = true
                }
                var c = PushTransportConfiguration(arn: arn, kind: .webhook)
                c.webhookURL = url
                c.webhookSecret = secret
                try Configure.store(c, data)
                print("Configured a webhook for \(arn) → \(url).")
                if generated { print("Signing secret (shown only now): \(secret)") }
                secret = ""
            }
        }
    }
}
