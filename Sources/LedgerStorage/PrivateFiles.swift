#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Folders and files only their owner can read: what a data directory, its secrets and an
/// export are made of. Errors name the path and the system's reason in one line (Foundation's
/// descriptions of these failures name internal domains and codes).
public enum PrivateFiles {
    /// Why a folder or file could not be made.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Creates `path` and its missing parents, each 0700.
    /// - Throws: ``Failure`` naming the part of the path that failed and why.
    public static func makeDirectories(_ path: String) throws(Failure) {
        if let failure = make(path) { throw Failure(description: failure) }
    }

    private static func make(_ path: String) -> String? {
        var info = stat()
        if stat(path, &info) == 0 {
            return (info.st_mode & S_IFMT) == S_IFDIR ? nil : "\(path) is a file, not a directory"
        }
        let parent = parentPath(path)
        if let parent, let failure = make(parent) { return failure }
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else {
            let reason = String(cString: strerror(errno)).lowercased()
            return parent.map { "\(reason) in \($0)" } ?? reason
        }
        return nil
    }

    /// The folder holding `path` (nil for a path without one).
    private static func parentPath(_ path: String) -> String? {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return nil }
        let parent = trimmed[..<slash]
        return parent.isEmpty ? (trimmed.hasPrefix("/") && trimmed != "/" ? "/" : nil) : String(parent)
    }

    /// Writes `bytes` to `path` (0600) through a temporary file renamed into place, so that the
    /// file is either whole or absent.
    /// - Throws: ``Failure`` naming the file and why.
    public static func writeFile(_ bytes: [UInt8], to path: String) throws(Failure) {
        let temporary = path + ".partial"
        func failure() -> Failure { Failure(description: "cannot write \(path): \(String(cString: strerror(errno)).lowercased())") }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure() }
        var done = 0
        while done < bytes.count {
            // SAFETY: the pointer is valid for the closure; `done` stays below `bytes.count`.
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                let error = failure()
                close(fd)
                unlink(temporary)
                throw error
            }
            done += n
        }
        guard close(fd) == 0, rename(temporary, path) == 0 else {
            let error = failure()
            unlink(temporary)
            throw error
        }
    }
}
