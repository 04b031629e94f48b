import ArgumentParser
import Foundation
import SyncLedger
import SyncLedgerServer

/// `syncledger serve`: the Cognito Sync–compatible server.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the Cognito Sync REST API (2014-06-30) over the ledger.")
    @OptionGroup var data: DataOptions
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0: any free port).") var port = 8080
    @Option(help: "Largest request body in bytes.") var maxBodyBytes = 4 << 20
    @Option(help: "Sync session lifetime in seconds.") var sessionLifetime = 600
    @Option(help: "Keep a bulk publish IN_PROGRESS at least this many seconds.") var bulkPublishMinSeconds = 0.0
    @Option(help: "Run as a read-only follower of this leader (http://HOST:PORT), replicating its change feed.") var follow: String?

    func run() async throws {
        var config = ServerConfiguration()
        config.dataDirectory = data.data
        config.host = host
        config.port = port
        config.maxBodyBytes = maxBodyBytes
        config.ledger.durable = !data.fast
        config.ledger.sessionLifetime = .seconds(sessionLifetime)
        config.bulkPublishMinimum = .milliseconds(Int(bulkPublishMinSeconds * 1000))
        config.follow = follow
        let environment = ProcessInfo.processInfo.environment
        config.adminAccessKeyID = environment["SYNCLEDGER_ACCESS_KEY_ID"]
        config.adminSecretAccessKey = environment["SYNCLEDGER_SECRET_ACCESS_KEY"]
        config.onListening = { port in
            FileHandle.standardOutput.write(Data("SyncLedger listening on http://\(host):\(port) (data: \(data.data))\n".utf8))
        }
        try await SyncLedgerServer.run(config)
    }
}

/// `syncledger credentials`: access keys for the server.
struct Credentials: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage access keys.", subcommands: [Create.self])

    /// `syncledger credentials create`: mints a credential for one identity.
    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Mint a credential that reaches one identity's datasets and devices; prints JSON.")
        @OptionGroup var data: DataOptions
        @Option(name: .customLong("identity-pool-id"), help: "The identity pool.") var pool: String
        @Option(name: .customLong("identity-id"), help: "The identity.") var identity: String
        @Flag(help: "Also issue a session token that requests must carry (like temporary AWS credentials).") var sessionToken = false

        func run() async throws {
            let poolID = try IdentityPoolID(pool)
            let identityID = try IdentityID(identity)
            let ledger = try data.open()
            defer { ledger.close() }
            let credential = Credential.generate(scope: .identity(pool: poolID.rawValue, identity: identityID.rawValue), withSessionToken: sessionToken)
            try ledger.secrets.store(credential)
            var object: [String: String] = [
                "AccessKeyId": credential.accessKeyID, "SecretAccessKey": credential.secretAccessKey,
                "IdentityPoolId": poolID.rawValue, "IdentityId": identityID.rawValue,
            ]
            if let token = credential.sessionToken { object["SessionToken"] = token }
            let json = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])
            print(String(decoding: json, as: UTF8.self))
        }
    }
}
