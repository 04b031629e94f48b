import CLMDB
#if canImport(Glibc)
import Glibc
#endif

/// How an ``Environment`` is opened.
public struct EnvironmentOptions: Sendable, Equatable {
    /// The initial size of the memory map in bytes. The map grows by itself when full.
    public var initialMapSize: Int = 256 << 20
    /// The largest number of named databases.
    public var maxDatabases: UInt32 = 32
    /// The largest number of concurrent read transactions (across processes).
    public var maxReaders: UInt32 = 1022
    /// `true` (the default): every commit is on disk (fsync) before it returns.
    /// `false`: commits skip fsync (`MDB_NOSYNC`); a process crash loses nothing, a power cut
    /// or kernel crash can lose the latest commits. For benchmarks and bulk loads.
    public var durable: Bool = true
    /// With ``durable``: `true` (the default) flushes the data and then the meta page on every
    /// commit (two syncs). `false` (`MDB_NOMETASYNC`) flushes only the data; the meta page goes
    /// with the next commit or the system's own flush. The database stays intact, but a power
    /// cut or kernel crash may undo the latest commit — for stores whose latest commit can be
    /// made again (the push outbox: it is derived from the log).
    public var syncsMetadata: Bool = true

    /// The defaults: durable, a 256 MiB initial map.
    public init() {}
}

/// An LMDB environment: one data directory holding named databases.
///
/// Opened with `MDB_NOTLS`, so read transactions are not tied to threads and readers never
/// block the writer. Write transactions belong to the thread that began them.
public final class Environment: @unchecked Sendable {
    // @unchecked Sendable: LMDB's MDB_env is safe to share between threads for the calls made
    // here (documented in lmdb.h); the map size, the one thing that changes, is only set while
    // `resizeLock` is held exclusively, i.e. with no transaction of this process open.

    /// The C handle. Valid from init until deinit.
    let handle: OpaquePointer
    let resizeLock = ReadersWriterLock()
    /// The directory this environment lives in.
    public let path: String
    /// The options it was opened with.
    public let options: EnvironmentOptions

    /// Opens (creating if needed) the environment in the directory `path`.
    ///
    /// - Throws: ``LMDBError`` when LMDB refuses (e.g. `.invalid` for a file that is not LMDB,
    ///   `.versionMismatch`), or an errno such as `ENOENT`/`EACCES` for the directory.
    public init(path: String, options: EnvironmentOptions = EnvironmentOptions()) throws {
        var env: OpaquePointer?
        try check(mdb_env_create(&env))
        guard let env else { throw LMDBError.invalid }
        do {
            try check(mdb_env_set_maxdbs(env, options.maxDatabases))
            try check(mdb_env_set_maxreaders(env, options.maxReaders))
            try check(mdb_env_set_mapsize(env, options.initialMapSize))
            var flags = UInt32(MDB_NOTLS)
            if !options.durable { flags |= UInt32(MDB_NOSYNC) }
            if options.durable, !options.syncsMetadata { flags |= UInt32(MDB_NOMETASYNC) }
            try check(mdb_env_open(env, path, flags, 0o600))  // owner only: the files hold users' data
        } catch {
            mdb_env_close(env)
            throw error
        }
        self.handle = env
        self.path = path
        self.options = options
    }

    deinit {
        mdb_env_close(handle)
    }

    /// The current size of the memory map in bytes.
    public var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return info.me_mapsize
    }

    /// Bytes of the data file in use (last used page × page size).
    public var usedBytes: Int {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        mdb_env_info(handle, &info)
        mdb_env_stat(handle, &stat)
        return (info.me_last_pgno + 1) * Int(stat.ms_psize)
    }

    /// Whether the file system holding the environment, or this process's file-size limit
    /// (`RLIMIT_FSIZE`), leaves less than `margin` bytes to grow into.
    ///
    /// LMDB reports a short write — what a full disk usually causes — as `EIO`, so a failed
    /// commit is checked against this to tell a full disk from a failing one.
    public func isOutOfSpace(margin: UInt64 = 16 << 20) -> Bool {
        var fs = statvfs()
        if statvfs(path, &fs) == 0, UInt64(fs.f_bavail) * UInt64(fs.f_frsize) < margin { return true }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max {
            var file = stat()
            if stat(path + "/data.mdb", &file) == 0, UInt64(file.st_size) + margin > UInt64(limit.rlim_cur) { return true }
        }
        return false
    }

    /// Flushes the data file to disk (`mdb_env_sync(force: 1)`); useful in non-durable mode.
    public func sync() throws {
        try check(mdb_env_sync(handle, 1))
    }

    /// Doubles the memory map (at least to `minimum` bytes). Waits until no transaction of this
    /// process is open.
    public func grow(minimum: Int = 0) throws {
        resizeLock.lockExclusive()
        defer { resizeLock.unlock() }
        let target = max(mapSize * 2, minimum)
        try check(mdb_env_set_mapsize(handle, target))
    }

    /// Adopts a map size that another process set (`MDB_MAP_RESIZED`).
    func adoptResizedMap() throws {
        resizeLock.lockExclusive()
        defer { resizeLock.unlock() }
        try check(mdb_env_set_mapsize(handle, 0))
    }

    /// Opens (or creates) a named database.
    public func openDatabase(_ name: String, flags: DatabaseFlags = []) throws -> Database {
        try write { txn in
            var dbi: MDB_dbi = 0
            try check(mdb_dbi_open(txn.handle, name, flags.rawValue | UInt32(MDB_CREATE), &dbi))
            return Database(dbi: dbi, name: name)
        }
    }

    /// Begins a transaction, adopting a map that another process grew. The caller holds
    /// `resizeLock` shared for the transaction's lifetime.
    func begin(parent: Transaction?, readOnly: Bool) throws -> OpaquePointer {
        var txn: OpaquePointer?
        let flags = readOnly ? UInt32(MDB_RDONLY) : 0
        var code = mdb_txn_begin(handle, parent?.handle, flags, &txn)
        if code == MDB_MAP_RESIZED, parent == nil {
            resizeLock.unlock()
            defer { resizeLock.lockShared() }
            try adoptResizedMap()
            code = mdb_txn_begin(handle, nil, flags, &txn)
        }
        try check(code)
        guard let txn else { throw LMDBError.badTransaction }
        return txn
    }

    /// Runs `body` in a short read-only transaction, which ends when `body` returns.
    ///
    /// - Warning: Nothing read may be kept past the closure except copies (the getters here copy).
    public func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        let txn = Transaction(handle: try begin(parent: nil, readOnly: true), environment: self, readOnly: true)
        defer { txn.abort() }
        return try body(txn)
    }

    /// Runs `body` in a write transaction on the calling thread: commits when it returns, aborts
    /// when it throws. When the map is full, the transaction is aborted, the map grown and
    /// `body` run again, so `body` must have no effects outside the transaction.
    ///
    /// - Throws: what `body` throws, or an ``LMDBError`` from commit (`.noSpace` on a full disk).
    public func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        while true {
            do {
                resizeLock.lockShared()
                let result: T
                do {
                    defer { resizeLock.unlock() }
                    let txn = Transaction(handle: try begin(parent: nil, readOnly: false), environment: self, readOnly: false)
                    do {
                        let value = try body(txn)
                        try txn.commit()
                        result = value
                    } catch {
                        txn.abort()
                        throw error
                    }
                }
                return result
            } catch LMDBError.mapFull {
                try grow()
            }
        }
    }
}

/// Flags for ``Environment/openDatabase(_:flags:)``.
public struct DatabaseFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Keys are native-endian unsigned integers. C: `MDB_INTEGERKEY`.
    public static let integerKey = DatabaseFlags(rawValue: UInt32(MDB_INTEGERKEY))
}

/// A named database inside an ``Environment``. A plain handle: valid as long as its environment.
public struct Database: Sendable, Hashable {
    let dbi: MDB_dbi
    /// The database's name, for messages.
    public let name: String
}
