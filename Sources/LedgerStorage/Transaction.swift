import CLMDB

/// Flags for ``Transaction/put(_:key:value:flags:)``.
public struct PutFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Fail with ``LMDBError/keyExists`` if the key is present. C: `MDB_NOOVERWRITE`.
    public static let noOverwrite = PutFlags(rawValue: UInt32(MDB_NOOVERWRITE))
    /// The key sorts after every key in the database: append without a search, pages packed
    /// full. Fails with ``LMDBError/keyExists`` otherwise. C: `MDB_APPEND`.
    public static let append = PutFlags(rawValue: UInt32(MDB_APPEND))
}

/// An LMDB transaction, lent to a closure by ``Environment/read(_:)``,
/// ``Environment/write(_:)`` or ``Transaction/nested(_:)``.
///
/// - Warning: Valid only inside the closure that received it, on that closure's thread. Values
///   returned by the getters are copies and may be kept.
public final class Transaction {
    let handle: OpaquePointer
    /// The environment this transaction belongs to.
    public let environment: Environment
    /// Whether this is a read-only transaction.
    public let readOnly: Bool
    private var isOpen = true
    /// Changes made through this transaction so far (puts, deletes, drops, and the changes of
    /// committed nested transactions). The group-commit writer compares it before and after a
    /// job to know whether a job that failed had written anything.
    public private(set) var changes = 0

    init(handle: OpaquePointer, environment: Environment, readOnly: Bool) {
        self.handle = handle
        self.environment = environment
        self.readOnly = readOnly
    }

    func commit() throws {
        precondition(isOpen, "transaction already ended")
        isOpen = false
        try check(mdb_txn_commit(handle))
    }

    func countChange() { changes += 1 }

    func abort() {
        guard isOpen else { return }
        isOpen = false
        mdb_txn_abort(handle)
    }

    /// Runs `body` in a nested write transaction: its changes join this transaction when `body`
    /// returns and vanish when it throws, leaving this transaction as it was.
    public func nested<T>(_ body: (Transaction) throws -> T) throws -> T {
        precondition(!readOnly, "nested transactions need a write transaction")
        let child = Transaction(handle: try environment.begin(parent: self, readOnly: false), environment: environment, readOnly: false)
        do {
            let value = try body(child)
            try child.commit()
            changes += child.changes
            return value
        } catch {
            child.abort()
            throw error
        }
    }

    /// Runs `body` in a nested write transaction whose changes join this transaction only when
    /// `body` answers `keep`; otherwise (or when it throws) they vanish. A planner tries a change
    /// and decides from what it wrote whether it stays, without throwing to roll it back.
    public func nested<T>(deciding body: (Transaction) throws -> (value: T, keep: Bool)) throws -> T {
        precondition(!readOnly, "nested transactions need a write transaction")
        let child = Transaction(handle: try environment.begin(parent: self, readOnly: false), environment: environment, readOnly: false)
        do {
            let (value, keep) = try body(child)
            if keep {
                try child.commit()
                changes += child.changes
            } else {
                child.abort()
            }
            return value
        } catch {
            child.abort()
            throw error
        }
    }

    /// Lends the value stored under `key` to `body` (nil when absent), without copying.
    ///
    /// - Warning: The buffer is valid only inside `body`.
    public func withValue<R>(_ db: Database, key: [UInt8], _ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        var data = MDB_val()
        let code = key.withUnsafeBytes { keyBytes -> Int32 in
            var k = MDB_val(mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            return mdb_get(handle, db.dbi, &k, &data)
        }
        if code == MDB_NOTFOUND { return try body(nil) }
        try check(code)
        return try body(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
    }

    /// The value stored under `key`, copied, or nil.
    public func get(_ db: Database, key: [UInt8]) throws -> [UInt8]? {
        try withValue(db, key: key) { buffer in buffer.map { [UInt8]($0) } }
    }

    /// Stores `value` under `key`.
    ///
    /// - Throws: ``LMDBError/mapFull`` when the map must grow; ``LMDBError/keyExists`` with
    ///   `.noOverwrite` or a misplaced `.append`; ``LMDBError/badValueSize`` for an empty or
    ///   oversized key.
    public func put(_ db: Database, key: [UInt8], value: [UInt8], flags: PutFlags = []) throws {
        let code = key.withUnsafeBytes { keyBytes in
            value.withUnsafeBytes { valueBytes -> Int32 in
                var k = MDB_val(mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
                var v = MDB_val(mv_size: valueBytes.count, mv_data: UnsafeMutableRawPointer(mutating: valueBytes.baseAddress))
                return mdb_put(handle, db.dbi, &k, &v, flags.rawValue)
            }
        }
        changes += 1
        try check(code)
    }

    /// Deletes `key`; returns whether it was there.
    @discardableResult
    public func delete(_ db: Database, key: [UInt8]) throws -> Bool {
        let code = key.withUnsafeBytes { keyBytes -> Int32 in
            var k = MDB_val(mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            return mdb_del(handle, db.dbi, &k, nil)
        }
        if code == MDB_NOTFOUND { return false }
        changes += 1
        try check(code)
        return true
    }

    /// Deletes every key of `db` (the database itself stays).
    public func removeAll(_ db: Database) throws {
        changes += 1
        try check(mdb_drop(handle, db.dbi, 0))
    }

    /// The keys in `db` and the pages (branch, leaf, overflow) its B-tree holds.
    public func statistics(_ db: Database) throws -> (entries: Int, pages: Int) {
        var stat = MDB_stat()
        try check(mdb_stat(handle, db.dbi, &stat))
        return (stat.ms_entries, stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages)
    }

    /// The number of keys in `db`.
    public func count(_ db: Database) throws -> Int {
        var stat = MDB_stat()
        try check(mdb_stat(handle, db.dbi, &stat))
        return stat.ms_entries
    }

    /// Lends a cursor over `db` to `body`; it is closed when `body` returns.
    public func withCursor<R>(_ db: Database, _ body: (borrowing Cursor) throws -> R) throws -> R {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(handle, db.dbi, &cursor))
        guard let cursor else { throw LMDBError.badTransaction }
        defer { mdb_cursor_close(cursor) }
        return try body(Cursor(handle: cursor, transaction: self))
    }
}

/// A position in a database, lent by ``Transaction/withCursor(_:_:)``.
///
/// Each move returns the key and value at the new position (copied), or nil past either end.
public struct Cursor: ~Copyable {
    let handle: OpaquePointer
    /// The transaction it belongs to (which counts the cursor's deletes as changes).
    let transaction: Transaction

    /// A key/value pair read through a cursor.
    public typealias Pair = (key: [UInt8], value: [UInt8])

    private func move(_ op: MDB_cursor_op, key: [UInt8]? = nil) throws -> Pair? {
        var k = MDB_val()
        var v = MDB_val()
        let code: Int32
        if let key {
            code = key.withUnsafeBytes { keyBytes -> Int32 in
                k = MDB_val(mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
                return mdb_cursor_get(handle, &k, &v, op)
            }
        } else {
            code = mdb_cursor_get(handle, &k, &v, op)
        }
        if code == MDB_NOTFOUND { return nil }
        try check(code)
        return (
            [UInt8](UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size)),
            [UInt8](UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
        )
    }

    /// Moves to the first pair.
    public func first() throws -> Pair? { try move(MDB_FIRST) }
    /// Moves to the last pair.
    public func last() throws -> Pair? { try move(MDB_LAST) }
    /// Moves to the next pair.
    public func next() throws -> Pair? { try move(MDB_NEXT) }
    /// Moves to the previous pair.
    public func previous() throws -> Pair? { try move(MDB_PREV) }
    /// Moves to the first pair whose key is ≥ `key`. C: `MDB_SET_RANGE`.
    public func seek(atLeast key: [UInt8]) throws -> Pair? {
        key.isEmpty ? try first() : try move(MDB_SET_RANGE, key: key)
    }

    /// Deletes the pair at the cursor; the next ``next()`` returns the pair after it.
    public func deleteCurrent() throws {
        transaction.countChange()
        try check(mdb_cursor_del(handle, 0))
    }
}
