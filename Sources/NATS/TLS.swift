import Foundation
import NIOCore
import NIOSSL

/// TLS settings of a ``NATSClient``. The client upgrades a connection to TLS after the server's
/// INFO (the classic NATS way) when the server requires it (`tls_required`), or when the client
/// does (``required``, a `tls://` server URL, or any of the files below given); it then refuses a
/// server that does not offer TLS. The server's certificate is always verified — against
/// ``caFile`` when given, else the system's trust roots — including its name (or IP address)
/// against the URL's host.
public struct NATSTLSOptions: Sendable, Equatable {
    /// PEM certificates to trust for the servers (a private CA); nil: the system's trust roots.
    public var caFile: String?
    /// PEM certificate chain presented to servers that ask for one (`verify: true`).
    public var certificateFile: String?
    /// PEM private key of ``certificateFile``.
    public var keyFile: String?
    /// Refuse servers that do not offer TLS even when no file is given.
    public var required = false

    public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil, required: Bool = false) {
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.required = required
    }

    /// Reads the files now, as a connection would: throws ``NATSError/tlsConfiguration(_:)``
    /// naming a file that is missing or not PEM, or a certificate without its key.
    public func check() throws(NATSError) {
        if caFile != nil || certificateFile != nil || keyFile != nil { _ = try makeContext() }
    }

    /// True when the client insists on TLS.
    var isRequired: Bool { required || caFile != nil || certificateFile != nil }

    /// The NIOSSL client context; throws ``NATSError/tlsConfiguration(_:)`` naming the file that
    /// could not be used.
    func makeContext() throws(NATSError) -> NIOSSLContext {
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        config.certificateVerification = .fullVerification
        if let caFile {
            do {
                let certs = try NIOSSLCertificate.fromPEMFile(caFile)
                guard !certs.isEmpty else { throw NATSError.tlsConfiguration("no certificate in the CA file \(caFile)") }
                config.trustRoots = .certificates(certs)
            } catch let e as NATSError {
                throw e
            } catch {
                throw .tlsConfiguration("cannot read the CA file \(caFile): \(error)")
            }
        }
        switch (certificateFile, keyFile) {
        case (nil, nil):
            break
        case (let cert?, let key?):
            do {
                config.certificateChain = try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) }
            } catch {
                throw .tlsConfiguration("cannot read the client certificate \(cert): \(error)")
            }
            do {
                config.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            } catch {
                throw .tlsConfiguration("cannot read the client key \(key): \(error)")
            }
        case (_?, nil):
            throw .tlsConfiguration("a client certificate needs its key file")
        case (nil, _?):
            throw .tlsConfiguration("a client key needs its certificate file")
        }
        do {
            return try NIOSSLContext(configuration: config)
        } catch {
            throw .tlsConfiguration("cannot make the TLS context: \(error)")
        }
    }
}

/// What one connection needs to upgrade to TLS.
struct TLSUpgrade: Sendable {
    /// nil: the client has no context (TLS not configured); a server requiring TLS then gets one
    /// made with the system's trust roots.
    var context: NIOSSLContext?
    var required: Bool
    /// The client sends a secret (a password or a token): upgrade whenever the server offers TLS
    /// (`tls_available`), even if neither side requires it, so the secret is not sent in clear.
    var whenOffered = false

    /// Whether a connection whose server sent `info` as its first INFO is upgraded to TLS.
    func upgrades(for info: NATSServerInfo) -> Bool {
        info.tlsRequired || required || (whenOffered && info.tlsAvailable)
    }
}

extension NATSChannelHandler {
    /// Called with the first INFO, before it is passed on: adds the TLS handler in front of this
    /// one when either side requires TLS (or the client has a secret to send and the server
    /// offers TLS), so the client's CONNECT is written through it. Returns whether it upgraded.
    func upgradeIfNeeded(_ info: NATSServerInfo, context: ChannelHandlerContext) throws(NATSError) -> Bool {
        let offered = info.tlsRequired || info.tlsAvailable
        guard tls.upgrades(for: info) else { return false }
        guard offered else {
            throw .tlsRequired("\(address) does not offer TLS, and the client requires it")
        }
        let sslContext: NIOSSLContext
        if let c = tls.context {
            sslContext = c
        } else {
            sslContext = try NATSTLSOptions().makeContext()
        }
        // SNI and name checks use the URL's host; for an IP address NIOSSL checks the peer's
        // address against the certificate's IP SANs instead.
        let isIP = address.host.contains(":") || address.host.allSatisfy { $0.isNumber || $0 == "." }
        do {
            let handler = try NIOSSLClientHandler(context: sslContext, serverHostname: isIP ? nil : address.host)
            try context.pipeline.syncOperations.addHandler(handler, position: .before(self))
        } catch {
            throw .tlsConfiguration("cannot start TLS with \(address): \(error)")
        }
        return true
    }

    /// A TLS error as a typed NATSError naming what failed.
    static func describeTLS(_ error: any Error, address: ServerAddress) -> NATSError? {
        let text = reason(error)
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return .certificateUntrusted("\(address): the server's certificate does not name \(address.host)")
        }
        if let e = error as? NIOSSLError, case .uncleanShutdown = e { return nil }
        guard error is NIOSSLError || error is NIOSSLExtraError || error is BoringSSLError else { return nil }
        let lower = text.lowercased()
        if lower.contains("certificate_verify_failed") || lower.contains("certificate verify failed") {
            return .certificateUntrusted("\(address): the server's certificate was not signed by a trusted CA (\(text))")
        }
        if lower.contains("certificate_required") || lower.contains("bad_certificate") || lower.contains("unknown_ca") {
            return .tlsHandshakeFailed("\(address) refused the client certificate (give one its CA signed): \(text)")
        }
        return .tlsHandshakeFailed("\(address): \(text)")
    }

    /// BoringSSL's reason codes (`CERTIFICATE_VERIFY_FAILED`, …) when the error carries them,
    /// else the error's description.
    static func reason(_ error: any Error) -> String {
        let text = String(describing: error)
        var codes: [String] = []
        var rest = Substring(text)
        while let r = rest.range(of: "OPENSSL_internal:") {
            let tail = rest[r.upperBound...]
            let code = tail.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
            if !code.isEmpty { codes.append(String(code)) }
            rest = tail.dropFirst(code.count)
        }
        return codes.isEmpty ? text : codes.joined(separator: ", ")
    }
}
