import CLMDB
import Foundation

extension Environment {
    /// The names of the named databases (the keys of LMDB's main database, where it keeps them).
    public func databaseNames() throws -> [String] {
        try read { txn in
            var dbi: MDB_dbi = 0
            try check(mdb_dbi_open(txn.handle, nil, 0, &dbi))
            return try txn.withCursor(Database(dbi: dbi, name: "")) { cursor in
                var names: [String] = []
                var pair = try cursor.first()
                while let current = pair {
                    names.append(String(decoding: current.key, as: UTF8.self))
                    pair = try cursor.next()
                }
                return names
            }
        }
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
                let batch: [Cursor.Pair] = try read { txn in
                    try txn.withCursor(source) { cursor in
                        var pairs: [Cursor.Pair] = []
                        var pair = start.isEmpty ? try cursor.first() : try cursor.seek(atLeast: start)
                        while let current = pair, pairs.count < 8192 {
                            pairs.append(current)
                            pair = try cursor.next()
                        }
                        return pairs
                    }
                }
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
}
