import NATS

/// How a node (or `syncledger cluster …`) authenticates to the nats-servers and secures the
/// connection (docs/cluster.md, "Securing NATS"). The secrets are held here once read from
/// their file or environment variable; `description` never shows them.
public struct ClusterConnection: Sendable, Equatable, CustomStringConvertible {
    /// At most one way to authenticate.
    public enum Credentials: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
        /// None (a server without authorization, or its `no_auth_user`).
        case none
        /// A user and its password.
        case userPassword(user: String, password: String)
        /// A token.
        case token(String)
        /// An NKey user's seed (`SU…`).
        case nkeySeed(String)

        /// Names the method (and user), never the secret.
        public var description: String {
            switch self {
            case .none: "no credentials"
            case .userPassword(let user, _): "user \(user) with a password"
            case .token: "a token"
            case .nkeySeed: "an nkey"
            }
        }
        public var debugDescription: String { description }
        public var customMirror: Mirror { Mirror(self, children: [:]) }
    }

    public var credentials: Credentials = .none
    /// PEM CA certificates that signed the nats-servers' certificates (implies TLS).
    public var caFile: String?
    /// PEM client certificate for servers that verify clients (`verify: true`), with ``keyFile``.
    public var certificateFile: String?
    public var keyFile: String?
    /// Refuse a server that does not offer TLS (a `tls://` URL, or any file above, implies it).
    public var requireTLS = false

    public init() {}

    public var description: String {
        var parts = [credentials.description]
        if let caFile { parts.append("CA \(caFile)") }
        if let certificateFile { parts.append("client certificate \(certificateFile)") }
        if requireTLS { parts.append("TLS required") }
        return parts.joined(separator: ", ")
    }

    /// Checks what can be checked before connecting: the nkey seed parses, the CA, certificate
    /// and key files are PEM. Throws ``StartupError`` saying which (never echoing a secret).
    public func validate() throws {
        var options = NATSClientOptions(servers: [])
        try apply(to: &options)
        do { try options.tls.check() } catch {
            throw StartupError(Self.explain(error))
        }
    }

    /// Sets `options`' credentials and TLS.
    /// - Throws: ``StartupError`` for an nkey seed that does not parse (without echoing it).
    func apply(to options: inout NATSClientOptions) throws {
        switch credentials {
        case .none: options.auth = .none
        case .userPassword(let user, let password): options.auth = .userPassword(user: user, password: password)
        case .token(let token): options.auth = .token(token)
        case .nkeySeed(let seed):
            do { options.auth = .nkey(try NKeyPair(seed: seed)) } catch {
                throw StartupError("the NATS nkey seed cannot be used: \(error)")
            }
        }
        options.tls = NATSTLSOptions(caFile: caFile, certificateFile: certificateFile, keyFile: keyFile, required: requireTLS)
    }

    /// `error` (from joining or reaching the cluster) with what to change when it is a refusal
    /// of the credentials or of a certificate.
    public static func explain(_ error: any Error) -> String {
        guard let e = error as? NATSError else { return "\(error)" }
        switch e {
        case .authorizationViolation, .authenticationFailed, .invalidCredentials:
            return "\(e); give the NATS user with --nats-user and --nats-password-file (or SYNCLEDGER_NATS_USER and SYNCLEDGER_NATS_PASSWORD), a token with --nats-token-file, or an nkey seed with --nats-nkey-file"
        case .certificateUntrusted:
            return "\(e); give the CA that signed the nats-servers' certificates with --nats-ca (or SYNCLEDGER_NATS_CA)"
        case .tlsHandshakeFailed:
            return "\(e); check --nats-ca, and --nats-cert/--nats-key when the servers verify clients"
        case .tlsRequired:
            return "\(e); use the servers' TLS port, or a server configured with tls { }"
        case .tlsConfiguration:
            return "\(e); check --nats-ca, --nats-cert and --nats-key"
        default:
            return "\(e)"
        }
    }
}
