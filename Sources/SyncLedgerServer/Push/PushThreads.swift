import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// The threads push delivery runs on: one event loop for its HTTP client (TLS, HTTP/2,
/// HPACK) and one thread for its LMDB work (deriving from the feed, the outbox's
/// transactions), both at a lower CPU priority (nice 10) than the threads that serve
/// requests. When the machine is busy the kernel runs writes first, and delivery takes what is
/// left; pending notifications meanwhile collapse per device and dataset, so falling behind
/// costs latency, never unbounded work.
final class PushThreads: Sendable {
    let loops: MultiThreadedEventLoopGroup
    let pool: NIOThreadPool

    /// The nice value of push threads (0 is normal, 19 the lowest priority).
    static let niceness: Int32 = 10

    init() {
        loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        for loop in loops.makeIterator() { loop.execute { Self.lowerPriority() } }
        pool.submit { _ in Self.lowerPriority() }
    }

    /// Lowers the calling thread's priority. On Linux the nice value belongs to a thread, and
    /// `setpriority(PRIO_PROCESS, 0, …)` sets the calling thread's (setpriority(2), NOTES).
    static func lowerPriority() {
        #if os(Linux)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, niceness)
        #endif
    }

    /// Runs `body` on the push thread.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(body)
    }

    func shutdown() {
        try? pool.syncShutdownGracefully()
        try? loops.syncShutdownGracefully()
    }
}
