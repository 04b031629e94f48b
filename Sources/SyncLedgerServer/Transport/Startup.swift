import Foundation
import LedgerStorage
import NIOCore
import NIOPosix
import SyncLedger
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why `syncledger serve` could not start: one sentence naming what and where.
public struct StartupError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, naming the file, directory, port or option.
    public let message: String
    public var description: String { message }

    /// An error with `message`.
    public init(_ message: String) { self.message = message }
}

/// What the server does before it opens the ledger: take the data directory's lock, raise the
/// open-file limit, and check that the port is free.
enum Startup {
    /// The lock file, inside the data directory, that one server at a time holds.
    static let lockFileName = "server.lock"

    /// Descriptors kept free for the ledger, logs, the event loops and the follower's client.
    static let reservedDescriptors = 64

    /// Takes `<data>/server.lock` (creating the directory, 0700, if needed), so that a second
    /// server on the same directory refuses to start. Commands such as `credentials create`
    /// or `export` do not take it and work beside a running server.
    static func lockDataDirectory(_ directory: String) throws -> FileLock {
        do { try PrivateFiles.makeDirectories(directory) } catch {
            throw StartupError("cannot create the data directory \(directory): \(error.description)")
        }
        let path = (directory as NSString).appendingPathComponent(lockFileName)
        do {
            return try FileLock(path: path)
        } catch let held as FileLock.Held {
            let who = held.holder.map { "process \($0)" } ?? "another process"
            throw StartupError("another server is already using the data directory \(directory): \(who) holds \(path); stop it, or give this one another --data")
        } catch {
            throw StartupError("cannot lock the data directory \(directory) (\(path)): \(error)")
        }
    }

    /// Raises the soft limit on open files to the hard limit and returns how many connections
    /// fit under it (`requested`, or fewer — with a warning — when the limit is lower).
    static func fitConnections(_ requested: Int, warn: (String) -> Void) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return requested }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        let available = limit.rlim_cur == rlim_t.max ? UInt64(Int.max) : UInt64(limit.rlim_cur)
        let fits = available > UInt64(reservedDescriptors) ? Int(min(available - UInt64(reservedDescriptors), UInt64(Int.max))) : 1
        guard requested > fits else { return requested }
        warn("--max-connections \(requested) does not fit under the open-file limit of \(available) (ulimit -n, with \(reservedDescriptors) kept for the server itself); serving at most \(fits) connections")
        return fits
    }

    /// Fails with a message naming the address when `host:port` is taken, before anything is
    /// written to the data directory. Port 0 (any free port) is not checked.
    static func checkPortFree(host: String, port: Int) async throws {
        guard port != 0 else { return }
        do {
            let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .bind(host: host, port: port).get()
            try await channel.close()
        } catch {
            throw describeBindError(error, host: host, port: port)
        }
    }

    /// A bind failure as a sentence naming the address.
    static func describeBindError(_ error: any Error, host: String, port: Int) -> any Error {
        if let io = error as? IOError {
            switch io.errnoCode {
            case EADDRINUSE: return StartupError("cannot listen on \(host):\(port): the port \(port) is already in use (another server?); pick another --port")
            case EACCES: return StartupError("cannot listen on \(host):\(port): permission denied (ports below 1024 need privileges)")
            case EADDRNOTAVAIL: return StartupError("cannot listen on \(host):\(port): \(host) is not an address of this machine (--host)")
            default: return StartupError("cannot listen on \(host):\(port): \(String(cString: strerror(io.errnoCode)))")
            }
        }
        if error is SocketAddressError { return StartupError("cannot listen on \(host):\(port): cannot resolve \(host) (--host)") }
        return error
    }
}
