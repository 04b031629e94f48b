import Foundation

/// Certificates made at test time with the `openssl` command (Debian's; the tests fail, never
/// skip, without it): a CA, a server certificate naming 127.0.0.1 and localhost, a client
/// certificate, a second CA that signed nothing here, and a server certificate naming another host.
struct TestPKI {
    let directory: URL
    let caFile: String
    let serverCert: String
    let serverKey: String
    let clientCert: String
    let clientKey: String
    let rogueCAFile: String
    /// Signed by the CA, but for `elsewhere.invalid` only.
    let otherNameCert: String
    let otherNameKey: String

    static func make() throws -> TestPKI {
        let dir = try NATSServerProcess.makeTempDirectory()
        func path(_ name: String) -> String { dir.appendingPathComponent(name).path }
        try makeCA(path("ca"))
        try makeCA(path("rogue"))
        try issue(path("server"), ca: path("ca"), extensions: """
            subjectAltName=IP:127.0.0.1,DNS:localhost
            extendedKeyUsage=serverAuth,clientAuth
            basicConstraints=critical,CA:FALSE
            """)
        try issue(path("client"), ca: path("ca"), extensions: """
            extendedKeyUsage=clientAuth
            basicConstraints=critical,CA:FALSE
            """)
        try issue(path("other"), ca: path("ca"), extensions: """
            subjectAltName=DNS:elsewhere.invalid
            extendedKeyUsage=serverAuth
            basicConstraints=critical,CA:FALSE
            """)
        return TestPKI(directory: dir, caFile: path("ca.pem"), serverCert: path("server.pem"), serverKey: path("server-key.pem"),
                       clientCert: path("client.pem"), clientKey: path("client-key.pem"), rogueCAFile: path("rogue.pem"),
                       otherNameCert: path("other.pem"), otherNameKey: path("other-key.pem"))
    }

    private static func makeCA(_ base: String) throws {
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", base + "-key.pem", "-out", base + ".pem", "-days", "30",
                     "-subj", "/CN=\((base as NSString).lastPathComponent)-test-ca",
                     "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    }

    private static func issue(_ base: String, ca: String, extensions: String) throws {
        try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", base + "-key.pem", "-out", base + ".csr", "-subj", "/CN=\((base as NSString).lastPathComponent)"])
        try extensions.write(toFile: base + ".ext", atomically: true, encoding: .utf8)
        try openssl(["x509", "-req", "-in", base + ".csr", "-CA", ca + ".pem", "-CAkey", ca + "-key.pem",
                     "-set_serial", String(UInt32.random(in: 1...UInt32.max)), "-days", "30",
                     "-extfile", base + ".ext", "-out", base + ".pem"])
    }

    private static func openssl(_ arguments: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["openssl"] + arguments
        let err = Pipe()
        p.standardOutput = FileHandle.nullDevice
        p.standardError = err
        try p.run()
        let text = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw HarnessError("openssl \(arguments.prefix(2).joined(separator: " ")) failed (\(p.terminationStatus)): \(String(decoding: text, as: UTF8.self).suffix(500))")
        }
    }
}

extension NATSServerProcess {
    /// Starts a server on a free port from a config `body` (everything but `listen` and the log).
    static func start(configBody body: String) async throws -> NATSServerProcess {
        try await retryingTakenPorts {
            let dir = try makeTempDirectory()
            let port = try TestNetwork.freePort()
            let name = "s\(port)"
            let config = """
                listen: 127.0.0.1:\(port)
                server_name: \(name)
                log_file: "\(dir.appendingPathComponent("server.log").path)"
                \(body)
                """
            let server = try await start(config: config, port: port, name: name, directory: dir, ownsDirectory: true)
            try await server.waitForPort()
            return server
        }
    }
}
