import ArgumentParser
import Foundation
import SyncLedgerServer

/// How `serve --cluster` and `cluster …` authenticate to the nats-servers and secure the
/// connection. Secrets come from a file or an environment variable, never from the command
/// line itself (where `ps` would show them).
struct NATSFlags: ParsableArguments {
    @Option(help: "NATS user name (env SYNCLEDGER_NATS_USER); its password comes from --nats-password-file or SYNCLEDGER_NATS_PASSWORD.")
    var natsUser: String?
    @Option(help: "File holding the NATS user's password (env SYNCLEDGER_NATS_PASSWORD_FILE, or the password itself in SYNCLEDGER_NATS_PASSWORD).")
    var natsPasswordFile: String?
    @Option(help: "File holding a NATS authorization token (env SYNCLEDGER_NATS_TOKEN_FILE, or the token itself in SYNCLEDGER_NATS_TOKEN).")
    var natsTokenFile: String?
    @Option(help: "File holding a NATS nkey user seed, SU… (env SYNCLEDGER_NATS_NKEY_FILE, or the seed itself in SYNCLEDGER_NATS_NKEY_SEED).")
    var natsNkeyFile: String?
    @Option(help: "PEM CA certificates that signed the nats-servers' certificates; implies TLS (env SYNCLEDGER_NATS_CA).")
    var natsCa: String?
    @Option(help: "PEM client certificate for nats-servers that verify clients, with --nats-key; implies TLS (env SYNCLEDGER_NATS_CERT).")
    var natsCert: String?
    @Option(help: "PEM private key of --nats-cert (env SYNCLEDGER_NATS_KEY).")
    var natsKey: String?
    @Flag(help: "Refuse nats-servers that do not offer TLS (env SYNCLEDGER_NATS_TLS=1; a tls:// URL, --nats-ca or --nats-cert imply it).")
    var natsTls = false

    /// True when any of these flags is on the command line.
    var isGiven: Bool {
        natsUser != nil || natsPasswordFile != nil || natsTokenFile != nil || natsNkeyFile != nil || natsCa != nil
            || natsCert != nil || natsKey != nil || natsTls
    }

    /// The credentials and TLS settings, read from the flags, else the environment: when any
    /// credential flag is given, the credential variables are ignored (not mixed).
    func connection(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ClusterConnection {
        func env(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        var c = ClusterConnection()
        let fromFlags = natsUser != nil || natsPasswordFile != nil || natsTokenFile != nil || natsNkeyFile != nil
        let user: String?, password: String?, token: String?, seed: String?
        if fromFlags {
            user = natsUser
            password = try natsPasswordFile.map { try Self.secret(file: $0, what: "--nats-password-file") }
            token = try natsTokenFile.map { try Self.secret(file: $0, what: "--nats-token-file") }
            seed = try natsNkeyFile.map { try Self.secret(file: $0, what: "--nats-nkey-file") }
        } else {
            user = env("SYNCLEDGER_NATS_USER")
            password = try env("SYNCLEDGER_NATS_PASSWORD") ?? env("SYNCLEDGER_NATS_PASSWORD_FILE").map { try Self.secret(file: $0, what: "SYNCLEDGER_NATS_PASSWORD_FILE") }
            token = try env("SYNCLEDGER_NATS_TOKEN") ?? env("SYNCLEDGER_NATS_TOKEN_FILE").map { try Self.secret(file: $0, what: "SYNCLEDGER_NATS_TOKEN_FILE") }
            seed = try env("SYNCLEDGER_NATS_NKEY_SEED") ?? env("SYNCLEDGER_NATS_NKEY_FILE").map { try Self.secret(file: $0, what: "SYNCLEDGER_NATS_NKEY_FILE") }
        }
        let methods = [user != nil || password != nil, token != nil, seed != nil].filter { $0 }.count
        guard methods <= 1 else {
            throw ValidationError("give one way to authenticate to NATS: a user and password, a token, or an nkey seed, not several")
        }
        switch (user, password) {
        case (let u?, let p?): c.credentials = .userPassword(user: u, password: p)
        case (_?, nil): throw ValidationError("the NATS user needs a password: --nats-password-file or SYNCLEDGER_NATS_PASSWORD")
        case (nil, _?): throw ValidationError("a NATS password needs its user: --nats-user or SYNCLEDGER_NATS_USER")
        case (nil, nil): break
        }
        if let token { c.credentials = .token(token) }
        if let seed { c.credentials = .nkeySeed(seed) }
        c.caFile = natsCa ?? env("SYNCLEDGER_NATS_CA")
        c.certificateFile = natsCert ?? env("SYNCLEDGER_NATS_CERT")
        c.keyFile = natsKey ?? env("SYNCLEDGER_NATS_KEY")
        c.requireTLS = natsTls || env("SYNCLEDGER_NATS_TLS") == "1"
        if (c.certificateFile == nil) != (c.keyFile == nil) {
            throw ValidationError("give both --nats-cert and --nats-key (a client certificate and its key), or neither")
        }
        for (flag, path) in [("--nats-ca", c.caFile), ("--nats-cert", c.certificateFile), ("--nats-key", c.keyFile)] {
            if let path, !FileManager.default.isReadableFile(atPath: path) {
                throw ValidationError("\(flag) \(path): no such readable file")
            }
        }
        do { try c.validate() } catch let error as StartupError { throw ValidationError(error.message) }
        return c
    }

    /// A secret's file: readable, not readable by others, at most 64 KiB, its text trimmed of
    /// surrounding white space and not empty. Errors name the file, never its content.
    static func secret(file path: String, what: String) throws -> String {
        let attributes: [FileAttributeKey: Any]
        do { attributes = try FileManager.default.attributesOfItem(atPath: path) } catch {
            throw ValidationError("\(what) \(path): no such file")
        }
        if let mode = attributes[.posixPermissions] as? Int, mode & 0o004 != 0 {
            throw ValidationError("\(what) \(path) is readable by every user: chmod 600 it (it holds a secret)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("\(what) \(path): cannot read it")
        }
        guard data.count <= 65_536 else { throw ValidationError("\(what) \(path): larger than 64 KiB, not a secret") }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { throw ValidationError("\(what) \(path) is empty") }
        return text
    }
}
