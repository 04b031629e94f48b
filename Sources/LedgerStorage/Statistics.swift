import CLMDB
import Foundation

/// What LMDB itself says of an environment's file: page size, the file's size and high-water
/// mark, the freelist, and entries and pages per named database (benchmarks read it).
public struct EnvironmentStatistics: Sendable {
    public var pageSize = 0
    public var fileBytes = 0
    /// Last page used + 1.
    public var highWater = 0
    /// Pages of free pages' lists, and the free pages they list.
    public var freelistPages = 0
    public var freePages = 0
    /// The main (catalog) B-tree's pages.
    public var mainPages = 0
    public var databases: [String: (entries: Int, pages: Int)] = [:]
    public var databasePages: Int { databases.values.map(\.pages).reduce(0, +) }

    /// Empty statistics (all zero).
    public init() {}
}

extension EnvironmentStatistics {
    /// Reads the statistics of the environment in `directory`, read-only. The environment must
    /// not be open in this process (LMDB allows one open per process); another process may
    /// have it open.
    /// - Throws: ``StatisticsError`` naming the LMDB call that failed.
    public static func read(directory: String) throws -> EnvironmentStatistics {
        var s = EnvironmentStatistics()
        var env: OpaquePointer?
        func check(_ rc: Int32, _ what: String) throws {
            if rc != 0 { throw StatisticsError(description: "LMDB \(what) on \(directory): \(String(cString: mdb_strerror(rc)))") }
        }
        try check(mdb_env_create(&env), "env_create")
        defer { mdb_env_close(env) }
        try check(mdb_env_set_maxdbs(env, 64), "set_maxdbs")
        var info = MDB_envinfo()
        try check(mdb_env_open(env, directory, UInt32(MDB_RDONLY), 0o600), "env_open")
        mdb_env_info(env, &info)
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "txn_begin")
        defer { mdb_txn_abort(txn) }
        func stat(_ dbi: MDB_dbi) throws -> MDB_stat {
            var st = MDB_stat()
            try check(mdb_stat(txn, dbi, &st), "stat")
            return st
        }
        let freeStat = try stat(0), mainStat = try stat(1)
        s.pageSize = Int(mainStat.ms_psize)
        s.highWater = info.me_last_pgno + 1
        s.freelistPages = freeStat.ms_branch_pages + freeStat.ms_leaf_pages + freeStat.ms_overflow_pages
        s.mainPages = mainStat.ms_branch_pages + mainStat.ms_leaf_pages + mainStat.ms_overflow_pages
        // The freelist: each record's value is a list of page numbers, its first word their count.
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn, 0, &cursor), "cursor_open(free)")
        var key = MDB_val(), value = MDB_val()
        var rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
        while rc == 0 {
            s.freePages += value.mv_data.load(as: Int.self)
            rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
        }
        mdb_cursor_close(cursor)
        // The named databases: the main database's keys.
        var names: [String] = []
        try check(mdb_cursor_open(txn, 1, &cursor), "cursor_open(main)")
        rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
        while rc == 0 {
            names.append(String(decoding: UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size), as: UTF8.self))
            rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
        }
        mdb_cursor_close(cursor)
        for name in names {
            var dbi: MDB_dbi = 0
            guard mdb_dbi_open(txn, name, 0, &dbi) == 0 else { continue }
            let st = try stat(dbi)
            s.databases[name] = (st.ms_entries, st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages)
        }
        s.fileBytes = (try? FileManager.default.attributesOfItem(atPath: directory + "/data.mdb")[.size] as? Int) ?? 0
        return s
    }
}

/// An LMDB call failed while reading statistics.
public struct StatisticsError: Error, CustomStringConvertible {
    /// Which call, on which directory, and LMDB's message.
    public let description: String
}
