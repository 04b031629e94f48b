import CLMDB
import Foundation

extension Environment {
    /// The names of the named databases (the keys of LMDB's main database, where it keeps them).
    public func databaseNames() throws -> [String] {
        // Through LMDB's cursor directly: Swift 6.3's optimizer crashes (GenericSpecializer,
        // "Cannot initialize a nonCopyable type with a guaranteed value") specializing
        // `withCursor` over the main database here.
        var names: [String] = []
        try read { txn in
            var dbi: MDB_dbi = 0
            try check(mdb_dbi_open(txn.handle, nil, 0, &dbi))
            var cursor: OpaquePointer?
            try check(mdb_cursor_open(txn.handle, dbi, &cursor))
            defer { mdb_cursor_close(cursor) }
            var key = MDB_val(), value = MDB_val()
            var code = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
            while code == 0 {
                names.append(String(decoding: UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size), as: UTF8.self))
                code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
            if code != MDB_NOTFOUND { try check(code) }
        }
        return names
    }

    /// Copies every named database, pair by pair, into a new environment at `path` (a folder
    /// that must not hold one), in key order with `MDB_APPEND`: the copy holds only live data,
    /// in pages written afresh — nothing of freed pages, nor of old bytes left in the free
    /// space of live pages, which a page-for-page copy would carry over. `progress` is called
    /// with the pairs copied so far.
    /// - Returns: the copy's environment (the caller closes it by releasing it).
    public func logicalCopy(to path: String, options: EnvironmentOptions, progress: (Int) -> Void = { _ in }) throws -> Environment {
        let target = try Environment(path: path, options: options)
        var copied = 0
        for name in try databaseNames() {
            let source = try openDatabase(name)
            let destination = try target.openDatabase(name)
            var next: [UInt8]? = []
            while let start = next {
                let batch = try read { txn in try Self.pairs(txn, source, from: start, limit: 8192) }
                try target.write { txn in
                    for pair in batch { try txn.put(destination, key: pair.key, value: pair.value, flags: .append) }
                }
                copied += batch.count
                progress(copied)
                next = batch.count == 8192 ? batch.last.map { $0.key + [0] } : nil
            }
        }
        try target.sync()
        return target
    }

    /// Up to `limit` pairs of `db` from the first key ≥ `start` (from the first when empty),
    /// read through LMDB's cursor directly (see ``databaseNames()`` for why not `withCursor`).
    static func pairs(_ txn: Transaction, _ db: Database, from start: [UInt8], limit: Int) throws -> [Cursor.Pair] {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn.handle, db.dbi, &cursor))
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val(), value = MDB_val()
        var code: Int32
        if start.isEmpty {
            code = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
        } else {
            code = start.withUnsafeBytes { bytes -> Int32 in
                key = MDB_val(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
                return mdb_cursor_get(cursor, &key, &value, MDB_SET_RANGE)
            }
        }
        var result: [Cursor.Pair] = []
        while code == 0, result.count < limit {
            result.append(([UInt8](UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)),
                           [UInt8](UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size))))
            code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
        }
        if code != 0, code != MDB_NOTFOUND { try check(code) }
        return result
    }
}
