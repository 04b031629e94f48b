import CLMDB
#if canImport(Glibc)
import Glibc
#endif

/// An error code returned by LMDB (or an `errno` it passed through), with Swift names.
///
/// Pattern-match on the static members: `catch LMDBError.mapFull`.
public struct LMDBError: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The C return code.
    public let rawValue: Int32

    /// Wraps a C return code.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The key/data pair already exists. The corresponding C error is `MDB_KEYEXIST`.
    public static let keyExists = LMDBError(rawValue: MDB_KEYEXIST)
    /// No matching key/data pair. The corresponding C error is `MDB_NOTFOUND`.
    public static let notFound = LMDBError(rawValue: MDB_NOTFOUND)
    /// A requested page was not found: the file is corrupt. C: `MDB_PAGE_NOTFOUND`.
    public static let pageNotFound = LMDBError(rawValue: MDB_PAGE_NOTFOUND)
    /// The located page was the wrong type: the file is corrupt. C: `MDB_CORRUPTED`.
    public static let corrupted = LMDBError(rawValue: MDB_CORRUPTED)
    /// The environment had a fatal error. C: `MDB_PANIC`.
    public static let panic = LMDBError(rawValue: MDB_PANIC)
    /// The file was written by an incompatible LMDB version. C: `MDB_VERSION_MISMATCH`.
    public static let versionMismatch = LMDBError(rawValue: MDB_VERSION_MISMATCH)
    /// The file is not an LMDB data file. C: `MDB_INVALID`.
    public static let invalid = LMDBError(rawValue: MDB_INVALID)
    /// The memory map is full; the environment must grow. C: `MDB_MAP_FULL`.
    public static let mapFull = LMDBError(rawValue: MDB_MAP_FULL)
    /// Too many named databases. C: `MDB_DBS_FULL`.
    public static let databasesFull = LMDBError(rawValue: MDB_DBS_FULL)
    /// Too many concurrent readers. C: `MDB_READERS_FULL`.
    public static let readersFull = LMDBError(rawValue: MDB_READERS_FULL)
    /// The transaction has too many dirty pages. C: `MDB_TXN_FULL`.
    public static let transactionFull = LMDBError(rawValue: MDB_TXN_FULL)
    /// Another process grew the map beyond ours. C: `MDB_MAP_RESIZED`.
    public static let mapResized = LMDBError(rawValue: MDB_MAP_RESIZED)
    /// The database was opened with incompatible flags. C: `MDB_INCOMPATIBLE`.
    public static let incompatible = LMDBError(rawValue: MDB_INCOMPATIBLE)
    /// The transaction cannot be used any more (it had an error). C: `MDB_BAD_TXN`.
    public static let badTransaction = LMDBError(rawValue: MDB_BAD_TXN)
    /// A key or value has an unsupported size. C: `MDB_BAD_VALSIZE`.
    public static let badValueSize = LMDBError(rawValue: MDB_BAD_VALSIZE)
    /// No space left on the device. C: `ENOSPC`.
    public static let noSpace = LMDBError(rawValue: ENOSPC)
    /// The disk quota is exhausted. C: `EDQUOT`.
    public static let quotaExceeded = LMDBError(rawValue: EDQUOT)
    /// The file may not grow (e.g. `RLIMIT_FSIZE`). C: `EFBIG`.
    public static let fileTooLarge = LMDBError(rawValue: EFBIG)
    /// An I/O error. C: `EIO`.
    public static let io = LMDBError(rawValue: EIO)

    /// Whether this error means the disk, the quota or the allowed file size is full.
    public var isDiskFull: Bool { self == .noSpace || self == .quotaExceeded || self == .fileTooLarge }

    /// Whether this error means the data file is damaged.
    public var isCorruption: Bool {
        self == .corrupted || self == .pageNotFound || self == .panic || self == .invalid
    }

    /// Lets `catch LMDBError.mapFull` match thrown errors.
    public static func ~= (pattern: LMDBError, value: any Error) -> Bool {
        (value as? LMDBError) == pattern
    }

    /// LMDB's own text for the code (`mdb_strerror`), with the code.
    public var description: String {
        "\(String(cString: mdb_strerror(rawValue))) (\(rawValue))"
    }
}

/// Runs a C call and throws its non-zero return code as an ``LMDBError``.
@inline(__always)
func check(_ code: Int32) throws(LMDBError) {
    if code != 0 { throw LMDBError(rawValue: code) }
}
