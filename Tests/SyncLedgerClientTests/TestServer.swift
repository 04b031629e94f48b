import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SyncLedger
@testable import SyncLedgerClient
import Synchronization

/// A fixture error.
struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The real server binary (`.build/debug/syncledger serve --fast`) on a free loopback port,
/// with its own data directory and a test admin key; stopped (SIGTERM) by ``stop()`` or when
/// released. (Unchecked: the `Process` is only touched by ``stop()``, once, behind `stopped`.)
final class TestServer: @unchecked Sendable {
    /// The admin (developer) credential the server was started with.
    static let admin = AWSCredentials(accessKeyID: "AKIDCLIENTTESTADMIN01", secretAccessKey: "client-test-admin-secret/0123456789abcdefABCDEF")

    /// The package's root, from this file's path.
    static let packageRoot: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    /// The server binary.
    static let binary: URL = packageRoot.appendingPathComponent(".build/debug/syncledger")

    /// `http://127.0.0.1:PORT`.
    let url: URL
    /// The data directory (inside ``root``).
    let dataDirectory: URL
    private let root: URL
    private let process: Process
    private let stopped = Mutex(false)

    /// Starts a server; waits (at most 30 s) for its `SyncLedger listening on …` line.
    init(extraArguments: [String] = []) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary.path) else {
            throw FixtureError("\(Self.binary.path) is missing: run `swift build` first")
        }
        root = FileManager.default.temporaryDirectory.appendingPathComponent("syncledger-client-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        dataDirectory = root.appendingPathComponent("data")
        let logPath = root.appendingPathComponent("server.log")
        _ = FileManager.default.createFile(atPath: logPath.path, contents: nil)
        let process = Process()
        process.executableURL = Self.binary
        process.arguments = ["serve", "--data", dataDirectory.path, "--host", "127.0.0.1", "--port", "0", "--fast"] + extraArguments
        var environment = ProcessInfo.processInfo.environment
        environment["SYNCLEDGER_ACCESS_KEY_ID"] = Self.admin.accessKeyID
        environment["SYNCLEDGER_SECRET_ACCESS_KEY"] = Self.admin.secretAccessKey
        process.environment = environment
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = try FileHandle(forWritingTo: logPath)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        self.process = process

        // A reader thread finds the listening line, then keeps draining so that the server
        // never blocks on a full pipe; the semaphore says "found" or "end of output".
        let found = Mutex<String?>(nil)
        let signal = DispatchSemaphore(value: 0)
        let reading = stdout.fileHandleForReading
        Thread.detachNewThread {
            var pending = Data()
            var signalled = false
            while true {
                let chunk = reading.availableData
                if chunk.isEmpty { break }
                guard !signalled else { continue }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex...newline)
                    if line.hasPrefix("SyncLedger listening on ") {
                        found.withLock { $0 = line.split(separator: " ")[3].description }
                        signalled = true
                        signal.signal()
                        break
                    }
                }
            }
            if !signalled { signal.signal() }
        }
        let answered = signal.wait(timeout: .now() + 30) == .success
        guard answered, let address = found.withLock({ $0 }), let url = URL(string: address) else {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            let log = (try? String(contentsOf: logPath, encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(at: root)
            throw FixtureError("the server did not print its listening line (\(answered ? "exit \(process.terminationStatus)" : "30 s")); log:\n\(log.suffix(3000))")
        }
        self.url = url
    }

    /// SIGTERM, then wait for the exit (killed after 10 s); removes the data directory.
    /// Returns the exit status (nil when it had to be killed or was stopped already).
    @discardableResult
    func stop() -> Int32? {
        guard stopped.withLock({ done in defer { done = true }; return !done }) else { return nil }
        process.terminate()
        let exited = DispatchSemaphore(value: 0)
        let process = self.process
        Thread.detachNewThread { process.waitUntilExit(); exited.signal() }
        var status: Int32? = nil
        if exited.wait(timeout: .now() + 10) == .success {
            status = process.terminationStatus
        } else {
            kill(process.processIdentifier, SIGKILL)
            exited.wait()
        }
        try? FileManager.default.removeItem(at: root)
        return status
    }

    deinit { stop() }

    // MARK: Cognito Identity

    /// A Cognito Identity call (`POST /`, awsJson1_1), signed with the admin key for the service
    /// `cognito-identity` unless `signed` is false. Throws the call's ``SyncClientError``.
    func identityCall(_ operation: String, _ request: [String: Any], signed: Bool = true) async throws -> [String: Any] {
        let endpoint = try HTTPEndpoint.parse(url).get()
        let body = Array(try JSONSerialization.data(withJSONObject: request))
        let signer = signed ? SigV4Signer(accessKeyID: Self.admin.accessKeyID, secretAccessKey: Self.admin.secretAccessKey, service: "cognito-identity") : nil
        let answer = try await HTTPExchange.send(
            endpoint: endpoint, method: .POST, path: "/",
            headers: [("content-type", "application/x-amz-json-1.1"), ("x-amz-target", "AWSCognitoIdentityService.\(operation)")],
            body: body, signer: signer, timeout: .seconds(30))
        guard answer.status == 200 else { throw AWSErrorBody(answer).clientError(status: answer.status) }
        guard let object = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any] else {
            throw FixtureError("\(operation) did not answer an object")
        }
        return object
    }

    /// CreateIdentityPool (unauthenticated identities allowed); returns its id.
    func createIdentityPool(developerProvider: String? = nil) async throws -> String {
        var request: [String: Any] = ["IdentityPoolName": "client tests", "AllowUnauthenticatedIdentities": true]
        if let developerProvider { request["DeveloperProviderName"] = developerProvider }
        guard let id = try await identityCall("CreateIdentityPool", request)["IdentityPoolId"] as? String else {
            throw FixtureError("CreateIdentityPool answered no IdentityPoolId")
        }
        return id
    }

    /// A new unauthenticated identity of `pool` and its temporary credentials (with a session
    /// token), from unsigned GetId and GetCredentialsForIdentity.
    func makeIdentity(pool: String) async throws -> (identity: String, credentials: AWSCredentials) {
        guard let identity = try await identityCall("GetId", ["IdentityPoolId": pool], signed: false)["IdentityId"] as? String else {
            throw FixtureError("GetId answered no IdentityId")
        }
        let answer = try await identityCall("GetCredentialsForIdentity", ["IdentityId": identity], signed: false)
        guard let c = answer["Credentials"] as? [String: Any], let key = c["AccessKeyId"] as? String, let secret = c["SecretKey"] as? String,
              let token = c["SessionToken"] as? String else {
            throw FixtureError("GetCredentialsForIdentity answered no Credentials")
        }
        return (identity, AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: token))
    }

    /// GetOpenIdTokenForDeveloperIdentity (admin): the identity of developer user `user` and a
    /// token for it.
    func developerToken(pool: String, provider: String, user: String) async throws -> (identity: String, token: String) {
        let answer = try await identityCall("GetOpenIdTokenForDeveloperIdentity", ["IdentityPoolId": pool, "Logins": [provider: user]])
        guard let identity = answer["IdentityId"] as? String, let token = answer["Token"] as? String else {
            throw FixtureError("GetOpenIdTokenForDeveloperIdentity answered no IdentityId or Token")
        }
        return (identity, token)
    }

    /// A transport to this server for `credentials` (the admin's by default) of `identity`.
    func transport(pool: String, identity: String, credentials: AWSCredentials = TestServer.admin) -> CognitoSyncTransport {
        CognitoSyncTransport(endpoint: url, pool: pool, credentials: StaticCredentials(credentials, identityID: identity))
    }
}

/// A fresh Cognito-style id (`us-east-1:uuid`).
func newID() -> String { "us-east-1:\(UUID().uuidString.lowercased())" }
