import Foundation
import NIOSSL

/// Reads the PEM files of `--tls-cert`/`--tls-key` and `--follow-ca`, with errors that name the
/// file and the option.
enum TLSFiles {
    /// The server's TLS configuration: the certificate chain (leaf first) and its private key.
    static func server(certificate: String, key: String) throws -> TLSConfiguration {
        let chain = try certificates(certificate, option: "--tls-cert")
        let privateKey: NIOSSLPrivateKey
        do {
            try requireReadable(key, option: "--tls-key")
            privateKey = try NIOSSLPrivateKey(file: key, format: .pem)
        } catch let error as StartupError {
            throw error
        } catch {
            throw StartupError("--tls-key \(key) holds no PEM private key this server can read (\(error))")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(privateKey))
        configuration.minimumTLSVersion = .tlsv12
        // A mismatched pair would fail every handshake; say so now instead.
        do { _ = try NIOSSLContext(configuration: configuration) } catch {
            throw StartupError("--tls-cert \(certificate) and --tls-key \(key) do not make a usable pair: \(error)")
        }
        return configuration
    }

    /// The follower's client TLS configuration: the system's roots, or only the certificates of
    /// `ca` (a private CA or a self-signed leader certificate).
    static func client(trusting ca: String?) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let ca {
            configuration.trustRoots = .certificates(try certificates(ca, option: "--follow-ca"))
        }
        return configuration
    }

    /// The push transports' client TLS configuration: the system's roots plus, with `ca`
    /// (`--push-ca`), the certificates it holds (stand-ins in tests, a corporate proxy's CA).
    static func pushClient(trusting ca: String?) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let ca {
            configuration.additionalTrustRoots = [.certificates(try certificates(ca, option: "--push-ca"))]
        }
        return configuration
    }

    private static func certificates(_ path: String, option: String) throws -> [NIOSSLCertificate] {
        try requireReadable(path, option: option)
        let chain: [NIOSSLCertificate]
        do { chain = try NIOSSLCertificate.fromPEMFile(path) } catch {
            throw StartupError("\(option) \(path) holds no PEM certificate this server can read (\(error))")
        }
        guard !chain.isEmpty else { throw StartupError("\(option) \(path) holds no PEM certificate") }
        return chain
    }

    private static func requireReadable(_ path: String, option: String) throws {
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw StartupError("\(option) \(path): " + (FileManager.default.fileExists(atPath: path) ? "not readable" : "no such file"))
        }
    }
}
