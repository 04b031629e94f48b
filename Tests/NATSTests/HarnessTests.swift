import Testing
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The harness itself: a server whose port another process took is told apart, so that the
/// harness starts again on fresh ports instead of failing the test that asked for a server.
@Suite struct HarnessTests {
    @Test func aServerWhosePortIsTakenIsReportedAsSuch() async throws {
        // Hold a port the way another process would.
        let (fd, port) = try TestNetwork.boundSocket()
        defer { close(fd) }
        try #require(listen(fd, 1) == 0)

        let dir = try NATSServerProcess.makeTempDirectory()
        let config = """
            listen: 127.0.0.1:\(port)
            log_file: "\(dir.appendingPathComponent("taken.log").path)"
            """
        let server = try await NATSServerProcess.start(config: config, port: port, name: "taken", directory: dir, ownsDirectory: true, logFile: "taken.log")
        // The port accepts (our socket), so wait for the process to exit rather than the port.
        let deadline = ContinuousClock.now + .seconds(10)
        while server.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let error = await #expect(throws: ServerExited.self) { try await server.waitForPort() }
        #expect(error?.portTaken == true, "the log says why: \(error?.log ?? "")")
        // And a start that retries gets a server on another port.
        var tries = 0
        let fresh = try await retryingTakenPorts { () async throws -> NATSServerProcess in
            tries += 1
            if tries == 1 { throw ServerExited(log: "listen tcp 127.0.0.1:\(port): bind: address already in use") }
            return try await NATSServerProcess.start()
        }
        #expect(tries == 2 && fresh.isRunning && fresh.port != port)
    }
}
