#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive advisory lock on a file (`flock(LOCK_EX | LOCK_NB)`), held until ``unlock()``
/// or until the process ends — a crash or `kill -9` releases it with the process.
///
/// A server takes one on its data directory so that two servers never serve it at once; the
/// file holds the holder's process id, so the one refused can say who has it.
public final class FileLock: @unchecked Sendable {
    // @unchecked Sendable: the descriptor is set once in init and only closed in unlock/deinit,
    // which take `mutex` (exclusively).
    private var descriptor: Int32
    private let mutex = ReadersWriterLock()

    /// Who holds a lock that could not be taken.
    public struct Held: Error, Sendable, CustomStringConvertible {
        /// The lock file.
        public let path: String
        /// The process id written by the holder, if it could be read.
        public let holder: Int32?
        public var description: String {
            "\(path) is locked by another process" + (holder.map { " (pid \($0))" } ?? "")
        }
    }

    /// Takes the lock on `path`, creating the file (mode 0600) if needed, and writes this
    /// process's id into it.
    ///
    /// - Throws: ``Held`` when another process holds it; an ``LMDBError`` carrying `errno` when
    ///   the file cannot be opened.
    public init(path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw LMDBError(rawValue: errno) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = pread(fd, &buffer, buffer.count, 0)
            close(fd)
            guard code == EWOULDBLOCK else { throw LMDBError(rawValue: code) }
            let text = count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
            throw Held(path: path, holder: Int32(text.split(separator: "\n").first ?? ""))
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, pid, pid.count, 0)
        descriptor = fd
    }

    /// Releases the lock.
    public func unlock() {
        mutex.lockExclusive()
        defer { mutex.unlock() }
        guard descriptor >= 0 else { return }
        close(descriptor)  // closing the descriptor releases the flock
        descriptor = -1
    }

    deinit { unlock() }
}
