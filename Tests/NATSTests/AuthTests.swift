import Testing
import Foundation
import NATS

/// Connects with `auth` (and `tls`) to `urls`, short time-outs, no retries past the first pass.
func connect(_ urls: [String], auth: NATSAuth = .none, tls: NATSTLSOptions = NATSTLSOptions()) async throws -> NATSClient {
    var options = NATSClientOptions(servers: urls)
    options.auth = auth
    options.tls = tls
    options.connectTimeout = .seconds(5)
    options.requestTimeout = .seconds(20)
    options.reconnectWait = .milliseconds(100)
    return try await NATSClient.connect(options)
}

/// The NATSError `operation` throws (failing the test when it succeeds or throws something else).
func natsError(_ operation: () async throws -> NATSClient) async -> NATSError? {
    do {
        let client = try await operation()
        await client.close()
        Issue.record("connected, expected a refusal")
        return nil
    } catch let e as NATSError {
        return e
    } catch {
        Issue.record("expected a NATSError, got \(error)")
        return nil
    }
}

/// A message published by `client` on a fresh subject comes back to it (the connection works).
func roundTrip(_ client: NATSClient, subject: String = "auth.check") async throws {
    let sub = try await client.subscribe(subject)
    try await client.flush()
    try await client.publish(subject, payload: bytes("hello"))
    let got = try await withTimeout("round trip") {
        for try await m in sub { return m.string }
        return ""
    }
    #expect(got == "hello")
    await sub.unsubscribe()
}

@Suite("Authentication against nats-server")
struct AuthTests {
    @Test func userAndPassword() async throws {
        let server = try await NATSServerProcess.start(configBody: """
            authorization { timeout: 10, users: [ { user: alice, password: "s3cret-Pass" } ] }
            """)
        let client = try await connect([server.url], auth: .userPassword(user: "alice", password: "s3cret-Pass"))
        #expect(await client.serverInfo?.authRequired == true)
        try await roundTrip(client)
        await client.close()

        let wrong = await natsError { try await connect([server.url], auth: .userPassword(user: "alice", password: "guess")) }
        #expect(wrong == .authorizationViolation(server.url))
        #expect(wrong?.description.contains("authorization violation") == true)
        #expect(wrong?.description.contains("guess") == false)
        let none = await natsError { try await connect([server.url]) }
        #expect(none == .authorizationViolation(server.url))
        let token = await natsError { try await connect([server.url], auth: .token("s3cret-Pass")) }
        #expect(token == .authorizationViolation(server.url))
    }

    @Test func token() async throws {
        let server = try await NATSServerProcess.start(configBody: #"authorization { timeout: 10, token: "t0ken-abc" }"#)
        let client = try await connect([server.url], auth: .token("t0ken-abc"))
        try await roundTrip(client)
        await client.close()
        let wrong = await natsError { try await connect([server.url], auth: .token("t0ken-abd")) }
        #expect(wrong == .authorizationViolation(server.url))
    }

    @Test func nkeySignsTheNonce() async throws {
        let user = NKeyPair.generateUser()
        #expect(user.publicKey.hasPrefix("U") && user.publicKey.count == 56)
        #expect(user.seedText.hasPrefix("SU") && user.seedText.count == 58)
        #expect(try NKeyPair(seed: user.seedText + "\n") == user)
        let server = try await NATSServerProcess.start(configBody: """
            authorization { timeout: 10, users: [ { nkey: \(user.publicKey) } ] }
            """)
        let client = try await connect([server.url], auth: .nkey(try NKeyPair(seed: user.seedText)))
        try await roundTrip(client)
        await client.close()
        let stranger = await natsError { try await connect([server.url], auth: .nkey(NKeyPair.generateUser())) }
        #expect(stranger == .authorizationViolation(server.url))
    }

    @Test func badSeedsAreRefusedWithoutEchoingThem() throws {
        let seed = NKeyPair.generateUser().seedText
        var chars = Array(seed)
        chars[10] = chars[10] == "A" ? "B" : "A"
        let corrupted = String(chars)
        for (text, expected) in [(corrupted, "checksum"), ("not base32!", "base32"), (NKeyPair.generateUser().publicKey, "base32")] {
            do {
                _ = try NKeyPair(seed: text)
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.description.contains(expected), "\(error)")
                #expect(!error.description.contains(text))
            }
        }
        #expect(NATSAuth.userPassword(user: "bob", password: "hunter2").description.contains("hunter2") == false)
        #expect(NATSAuth.token("tok-123").description.contains("tok-123") == false)
        // Nor does printing or dumping options that hold them.
        var options = NATSClientOptions(servers: ["nats://127.0.0.1:4222"])
        options.auth = .userPassword(user: "bob", password: "hunter2")
        var dumped = ""
        dump(options, to: &dumped)
        #expect(!"\(options)".contains("hunter2") && !String(reflecting: options).contains("hunter2") && !dumped.contains("hunter2"))
        let pair = NKeyPair.generateUser()
        options.auth = .nkey(pair)
        dumped = ""
        dump(options, to: &dumped)
        let secretPart = String(pair.seedText.dropFirst(2).prefix(20))
        #expect(!"\(options)".contains(secretPart) && !dumped.contains(secretPart) && !dumped.contains("seed") && "\(options)".contains(pair.publicKey))
    }

    @Test func reconnectionAuthenticatesAgain() async throws {
        let user = NKeyPair.generateUser()
        let server = try await NATSServerProcess.start(configBody: """
            authorization { timeout: 10, users: [ { nkey: \(user.publicKey) } ] }
            """)
        let client = try await connect([server.url], auth: .nkey(user))
        let events = client.events
        let sub = try await client.subscribe("after.restart")
        try await client.flush()
        // A new server process: a new nonce to sign, the subscription re-sent after CONNECT.
        try await server.restart()
        _ = try await waitForEvent(events) { if case .reconnected = $0 { true } else { false } }
        try await client.publish("after.restart", payload: bytes("again"))
        let got = try await withTimeout("message after reconnection") {
            for try await m in sub { return m.string }
            return ""
        }
        #expect(got == "again")
        await client.close()
    }

    @Test func subjectPermissionsAreEnforcedByTheServer() async throws {
        let server = try await NATSServerProcess.start(configBody: """
            authorization { timeout: 10, users: [
              { user: writer, password: w, permissions: { publish: { allow: ["allowed.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
              { user: reader, password: r }
            ] }
            """)
        let writer = try await connect([server.url], auth: .userPassword(user: "writer", password: "w"))
        let reader = try await connect([server.url], auth: .userPassword(user: "reader", password: "r"))
        let sub = try await reader.subscribe(">")
        try await reader.flush()
        try await writer.publish("denied.x", payload: bytes("no"))
        try await writer.publish("allowed.x", payload: bytes("yes"))
        try await writer.flush()
        let first = try await withTimeout("the allowed message") {
            for try await m in sub { return m.subject }
            return ""
        }
        // Published in order: the denied one would have arrived first.
        #expect(first == "allowed.x")
        // A request on a refused subject fails at once with the server's reason, not a time-out.
        do {
            _ = try await writer.request("denied.svc", payload: [], timeout: .seconds(15))
            Issue.record("a refused request succeeded")
        } catch let e as NATSError {
            guard case .permissionViolation(let text) = e else { Issue.record("got \(e)"); return }
            #expect(text.contains("denied.svc"))
        }
        // A refused subscription ends with the reason.
        let refused = try await writer.subscribe("secret.>")
        do {
            try await withTimeout("the refused subscription ends") {
                for try await _ in refused {}
            }
            Issue.record("the refused subscription ended without an error")
        } catch let e as NATSError {
            guard case .permissionViolation = e else { Issue.record("got \(e)"); return }
        }
        await writer.close()
        await reader.close()
    }
}
