import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger credentials`: access keys for the server.
struct Credentials: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage access keys: create, list, revoke, rotate.",
        discussion: """
            Credentials live in the data directory's secrets folder (never in the log, exports or \
            followers). These commands work beside a running server: it sees a new, revoked or \
            rotated key at the next request. The admin credential the server generates on first \
            start is listed (flagged) and can be revoked or rotated; the server refuses it while \
            SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY name your own.
            """,
        subcommands: [Create.self, List.self, Revoke.self, Rotate.self])

    /// `syncledger credentials create`: mints a credential for one identity.
    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint a credential that reaches one identity's datasets and devices; prints JSON.",
            discussion: "Makes the ledger when the data directory holds none, so that credentials can be minted before the server's first start.")
        @Option(name: .long, help: "The data directory (made, with an empty ledger, when missing).") var data = "syncledger-data"
        @Option(name: .long, help: "Where the secrets live (default DATA/secrets, or $SYNCLEDGER_SECRETS).") var secrets: String?
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Option(name: .customLong("identity-id"), help: "The identity.") var identity: String
        @Flag(help: "A temporary credential: requests must carry its session token, and it expires (see --duration).") var sessionToken = false
        @Option(help: "Seconds a temporary credential lives, 1-\(Self.maxDuration) (default 3600).") var duration: Int?

        /// AWS's longest session (GetSessionToken): 36 hours.
        static let maxDuration = 129_600

        func validate() throws {
            if let duration {
                guard sessionToken else { throw ValidationError("--duration is for temporary credentials: add --session-token") }
                guard (1...Self.maxDuration).contains(duration) else {
                    throw ValidationError("--duration must be 1 to \(Self.maxDuration) seconds (36 hours), not \(duration)")
                }
            }
        }

        func run() async throws {
            let poolID = try IdentityPoolID(pool)
            let identityID = try IdentityID(identity)
            var options = LedgerOptions()
            options.secretsDirectory = secretsDirectory(secrets)
            let ledger = try openLedger(at: data, options: options, create: true)
            defer { ledger.close() }
            let credential = Credential.generate(scope: .identity(pool: poolID.rawValue, identity: identityID.rawValue),
                                                 withSessionToken: sessionToken, lifetime: duration.map { .seconds($0) })
            try ledger.secrets.store(credential)
            print(secretJSON(credential).pretty)
        }
    }

    /// `syncledger credentials list`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the stored access keys (never their secrets).")
        @OptionGroup var data: DataDirectory
        @Flag(help: "One JSON object per credential: AccessKeyId, Scope, IdentityPoolId, IdentityId, Created, Expiration, Temporary, Expired, GeneratedAdmin.") var json = false

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            let generated = try ledger.secrets.generatedAdminAccessKeyID()
            let now = Timestamp.now
            let credentials = try ledger.secrets.list()
            for credential in credentials {
                let isGenerated = credential.accessKeyID == generated
                if json {
                    var members: [(String, JSON)] = [("AccessKeyId", .string(credential.accessKeyID))]
                    members += scopeMembers(credential.scope)
                    members += [
                        ("Created", .time(credential.created)), ("Expiration", .time(credential.expires)),
                        ("Temporary", .bool(credential.sessionToken != nil)), ("Expired", .bool(credential.isExpired(at: now))),
                        ("GeneratedAdmin", .bool(isGenerated)),
                    ]
                    printLine(.object(members))
                } else {
                    var notes: [String] = []
                    if isGenerated { notes.append("generated admin") }
                    if credential.sessionToken != nil { notes.append("temporary") }
                    if credential.isExpired(at: now) { notes.append("expired") }
                    let expiry = credential.expires.map { "expires \(ISOTime.format($0))" } ?? "no expiry"
                    print([credential.accessKeyID, credential.scope.description, "created \(ISOTime.format(credential.created))", expiry,
                           notes.joined(separator: ", ")].joined(separator: "\t"))
                }
            }
            if credentials.isEmpty, !json { printError("syncledger: no credentials are stored in \(ledger.secrets.directory)") }
            if let configured = ProcessInfo.processInfo.environment["SYNCLEDGER_ACCESS_KEY_ID"], !configured.isEmpty, !json {
                printError("syncledger: the admin credential \(configured) set in SYNCLEDGER_ACCESS_KEY_ID is not stored, so not listed; while a server has it, that server refuses stored admin credentials")
            }
        }
    }

    /// `syncledger credentials revoke KEY`.
    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete an access key; requests signed with it fail from the next one on.")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The access key id.") var accessKeyID: String

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            guard let credential = try ledger.secrets.credential(accessKeyID: accessKeyID) else {
                throw CLIError("no credential has access key id \(accessKeyID) in \(ledger.secrets.directory)")
            }
            let wasGenerated = try ledger.secrets.generatedAdminAccessKeyID() == accessKeyID
            try ledger.secrets.revoke(accessKeyID: accessKeyID)
            print("revoked \(accessKeyID) (\(credential.scope)\(wasGenerated ? ", the generated admin credential" : ""))")
            if wasGenerated {
                printError("syncledger: a server started without SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY generates a new admin credential (and prints it once)")
            }
        }
    }

    /// `syncledger credentials rotate KEY`.
    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Replace an access key by a new one of the same scope (and lifetime); prints the new one as JSON.")
        @OptionGroup var data: DataDirectory
        @Argument(help: "The access key id to replace.") var accessKeyID: String
        @Option(help: "Seconds the old key keeps working, 0-\(Self.maxGrace) (default 0: it stops at once).") var grace = 0

        /// Thirty days.
        static let maxGrace = 2_592_000

        func validate() throws {
            guard (0...Self.maxGrace).contains(grace) else { throw ValidationError("--grace must be 0 to \(Self.maxGrace) seconds (30 days), not \(grace)") }
        }

        func run() async throws {
            let ledger = try data.open()
            defer { ledger.close() }
            guard let old = try ledger.secrets.credential(accessKeyID: accessKeyID) else {
                throw CLIError("no credential has access key id \(accessKeyID) in \(ledger.secrets.directory)")
            }
            let now = Timestamp.now
            let fresh = try ledger.secrets.rotate(accessKeyID: accessKeyID, grace: .seconds(grace), now: now)
            print(secretJSON(fresh).pretty)
            let end = Timestamp(milliseconds: now.milliseconds + Int64(grace) * 1000)
            let until = grace == 0 ? "now" : "at \(ISOTime.format(min(end, old.expires ?? end)))"
            printError("syncledger: \(accessKeyID) is replaced by \(fresh.accessKeyID); the old key stops working \(until)")
        }
    }
}

/// A credential with its secret, as `create` and `rotate` print it (AWS's member names; the
/// secret as is, `/` unescaped).
func secretJSON(_ credential: Credential) -> JSON {
    var members: [(String, JSON)] = [("AccessKeyId", .string(credential.accessKeyID)), ("SecretAccessKey", .string(credential.secretAccessKey))]
    if let token = credential.sessionToken { members.append(("SessionToken", .string(token))) }
    if let expires = credential.expires { members.append(("Expiration", .time(expires))) }
    members += scopeMembers(credential.scope)
    return .object(members)
}

/// `Scope` (admin or identity) and, for an identity, `IdentityPoolId` and `IdentityId`.
func scopeMembers(_ scope: Credential.Scope) -> [(String, JSON)] {
    switch scope {
    case .admin: [("Scope", "admin")]
    case .identity(let pool, let identity): [("Scope", "identity"), ("IdentityPoolId", .string(pool)), ("IdentityId", .string(identity))]
    }
}
