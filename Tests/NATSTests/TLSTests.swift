import Testing
import Foundation
import NATS

@Suite("TLS against nats-server")
struct TLSTests {
    static func tlsBlock(_ pki: TestPKI, cert: String? = nil, key: String? = nil, verify: Bool = false) -> String {
        """
        tls {
          cert_file: "\(cert ?? pki.serverCert)"
          key_file: "\(key ?? pki.serverKey)"
          ca_file: "\(pki.caFile)"
          verify: \(verify)
          timeout: 10
        }
        """
    }

    @Test func serverVerifiedWithTheCA() async throws {
        let pki = try TestPKI.make()
        let server = try await NATSServerProcess.start(configBody: Self.tlsBlock(pki))
        // nats:// upgrades because the server requires TLS; tls:// and localhost (SNI) work too.
        for url in [server.url, "tls://127.0.0.1:\(server.port)", "nats://localhost:\(server.port)"] {
            let client = try await connect([url], tls: NATSTLSOptions(caFile: pki.caFile))
            #expect(await client.serverInfo?.tlsRequired == true)
            try await roundTrip(client)
            await client.close()
        }
    }

    @Test func untrustedServerCertificateIsRefused() async throws {
        let pki = try TestPKI.make()
        let server = try await NATSServerProcess.start(configBody: Self.tlsBlock(pki))
        let rogue = await natsError { try await connect([server.url], tls: NATSTLSOptions(caFile: pki.rogueCAFile)) }
        guard case .certificateUntrusted(let why)? = rogue else {
            Issue.record("expected certificateUntrusted, got \(String(describing: rogue))")
            return
        }
        #expect(why.contains("not signed by a trusted CA"), "\(why)")
        #expect(rogue?.description.contains("certificate verification failed") == true)
        // Without a CA the system's roots are used, which do not include the test CA.
        let system = await natsError { try await connect([server.url]) }
        if case .certificateUntrusted? = system {} else { Issue.record("expected certificateUntrusted, got \(String(describing: system))") }
    }

    @Test func certificateForAnotherHostIsRefused() async throws {
        let pki = try TestPKI.make()
        let server = try await NATSServerProcess.start(configBody: Self.tlsBlock(pki, cert: pki.otherNameCert, key: pki.otherNameKey))
        let error = await natsError { try await connect([server.url], tls: NATSTLSOptions(caFile: pki.caFile)) }
        if case .certificateUntrusted? = error {} else { Issue.record("expected certificateUntrusted, got \(String(describing: error))") }
    }

    @Test func clientCertificateWhenTheServerVerifiesClients() async throws {
        let pki = try TestPKI.make()
        let server = try await NATSServerProcess.start(configBody: Self.tlsBlock(pki, verify: true) + """

            authorization { users: [ { user: node, password: pw } ] }
            """)
        let auth = NATSAuth.userPassword(user: "node", password: "pw")
        let client = try await connect([server.url], auth: auth,
                                       tls: NATSTLSOptions(caFile: pki.caFile, certificateFile: pki.clientCert, keyFile: pki.clientKey))
        try await roundTrip(client)
        // Reconnection redoes TLS and CONNECT.
        let events = client.events
        try await server.restart()
        _ = try await waitForEvent(events) { if case .reconnected = $0 { true } else { false } }
        try await roundTrip(client, subject: "after.restart")
        await client.close()

        let noCert = await natsError { try await connect([server.url], auth: auth, tls: NATSTLSOptions(caFile: pki.caFile)) }
        switch noCert {
        case .tlsHandshakeFailed?, .connectionLost?: break
        default: Issue.record("expected a TLS refusal, got \(String(describing: noCert))")
        }
        let wrongPassword = await natsError {
            try await connect([server.url], auth: .userPassword(user: "node", password: "nope"),
                              tls: NATSTLSOptions(caFile: pki.caFile, certificateFile: pki.clientCert, keyFile: pki.clientKey))
        }
        #expect(wrongPassword == .authorizationViolation(server.url))
    }

    @Test func clientRequiringTLSRefusesAPlainServer() async throws {
        let server = try await NATSServerProcess.start()
        let error = await natsError { try await connect(["tls://127.0.0.1:\(server.port)"]) }
        guard case .tlsRequired? = error else {
            Issue.record("expected tlsRequired, got \(String(describing: error))")
            return
        }
    }

    @Test func unreadableFilesAreConfigurationErrors() async throws {
        let server = try await NATSServerProcess.start()
        let error = await natsError { try await connect([server.url], tls: NATSTLSOptions(caFile: "/nonexistent/ca.pem")) }
        guard case .tlsConfiguration(let why)? = error else {
            Issue.record("expected tlsConfiguration, got \(String(describing: error))")
            return
        }
        #expect(why.contains("/nonexistent/ca.pem"))
    }
}
