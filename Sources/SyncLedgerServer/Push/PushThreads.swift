import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// The threads push delivery runs on: one event loop for its HTTP client (TLS, HTTP/2,
/// HPACK) and its delivery tasks, and one thread for its LMDB work (deriving from the feed, the
/// outbox's transactions), both at a lower CPU priority (`--push-nice`, default 10) than the
/// threads that serve requests. When the machine is busy the kernel runs writes first, and delivery takes what is
/// left; pending notifications meanwhile collapse per device and dataset, so falling behind
/// costs latency, never unbounded work.
final class PushThreads: Sendable {
    let loops: MultiThreadedEventLoopGroup
    let pool: NIOThreadPool
    /// Runs the delivery tasks (building requests, reading answers) on the push event loop,
    /// not on Swift's cooperative threads, which serve requests.
    let executor: EventLoopTaskExecutor

    /// - Parameter niceness: the nice value of the push threads (0: as the server's, 19: the
    ///   lowest priority; `--push-nice`).
    init(niceness: Int32) {
        loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        executor = EventLoopTaskExecutor(loops.next())
        for loop in loops.makeIterator() { loop.execute { Self.lowerPriority(to: niceness) } }
        pool.submit { _ in Self.lowerPriority(to: niceness) }
    }

    /// Lowers the calling thread's priority. On Linux the nice value belongs to a thread, and
    /// `setpriority(PRIO_PROCESS, 0, …)` sets the calling thread's (setpriority(2), NOTES).
    static func lowerPriority(to niceness: Int32) {
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

/// A task executor that runs jobs on one NIO event loop.
final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    let loop: any EventLoop

    init(_ loop: any EventLoop) {
        self.loop = loop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
