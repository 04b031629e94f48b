import Foundation
import LedgerStorage
#if canImport(Glibc)
import Glibc
#endif

/// What ``Ledger/compact(directory:durable:progress:)`` did.
public struct CompactionReport: Sendable, Hashable {
    /// Bytes of `data.mdb` before and after.
    public var bytesBefore: Int
    /// See `bytesBefore`.
    public var bytesAfter: Int
    /// Key/value pairs copied.
    public var pairs: Int
}

extension Ledger {
    /// Rewrites the data file of the ledger in `directory` with only its live data: every
    /// database copied pair by pair into a fresh file (``Environment/logicalCopy(to:options:progress:)``),
    /// which then replaces `data.mdb` by an atomic rename. After a redaction this is what takes
    /// the erased bytes out of the file: LMDB keeps freed pages (and the free space of live
    /// pages) as they were until it reuses them.
    ///
    /// No other process may have the ledger open: the caller holds the data directory's
    /// `server.lock` (`syncledger compact` does), and no `Ledger` of this process is open on it.
    /// A crash before the rename leaves the old file in place (and a `compact.tmp` folder that
    /// the next compaction clears); after it, the new one.
    ///
    /// - Throws: `.notFound` when there is no ledger; `.storage` when a file cannot be written.
    public static func compact(directory: String, durable: Bool = true, progress: (Int) -> Void = { _ in }) throws -> CompactionReport {
        let file = directory + "/data.mdb"
        let fm = FileManager.default
        guard fm.fileExists(atPath: file) else { throw LedgerError(.notFound, "there is no ledger at \(directory) (no data.mdb); check --data") }
        let temporary = directory + "/compact.tmp"
        func size(_ path: String) -> Int { ((try? fm.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0 }
        let before = size(file)
        var pairs = 0
        do {
            if fm.fileExists(atPath: temporary) { try fm.removeItem(atPath: temporary) }
            try makePrivateDirectory(temporary, what: "the compaction folder")
            var options = EnvironmentOptions()
            options.durable = durable
            do {
                let source = try Environment(path: directory, options: options)
                let copy = try source.logicalCopy(to: temporary, options: options) { copied in
                    pairs = copied
                    progress(copied)
                }
                try copy.sync()
            }  // both closed here
            guard rename(temporary + "/data.mdb", file) == 0 else {
                throw LedgerError(.storage, "cannot move the compacted file over \(file): errno \(errno)")
            }
            let folder = open(directory, O_RDONLY | O_CLOEXEC)
            if folder >= 0 { _ = fsync(folder); _ = Glibc.close(folder) }
            try fm.removeItem(atPath: temporary)
        } catch let error as LedgerError {
            throw error
        } catch {
            throw LedgerError(.storage, "cannot compact \(directory): \(error)", underlying: error)
        }
        return CompactionReport(bytesBefore: before, bytesAfter: size(file), pairs: pairs)
    }
}
