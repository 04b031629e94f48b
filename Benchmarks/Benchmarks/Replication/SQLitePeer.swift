import CSQLite

/// A SQLite failure: the call that failed and SQLite's message.
struct SQLiteError: Error, CustomStringConvertible {
    let description: String
}

/// A minimal SQLite connection (the system's libsqlite3), enough for the peer baseline: exec,
/// prepared statements, binding, stepping.
///
/// Used by one task at a time (a benchmark's iterations run one after the other).
final class SQLiteConnection {
    let handle: OpaquePointer

    /// Opens (creating) the database file at `path`.
    init(path: String) throws {
        var db: OpaquePointer?
        let code = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "code \(code)"
            sqlite3_close(db)
            throw SQLiteError(description: "open \(path): \(message)")
        }
        handle = db
    }

    deinit {
        sqlite3_close_v2(handle)
    }

    /// Runs SQL statements that return nothing of interest.
    func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        if sqlite3_exec(handle, sql, nil, nil, &message) != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(message)
            throw SQLiteError(description: "\(sql): \(text)")
        }
    }

    /// Compiles one statement.
    func prepare(_ sql: String) throws -> SQLiteStatement {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK, let statement else {
            throw SQLiteError(description: "prepare \(sql): \(String(cString: sqlite3_errmsg(handle)))")
        }
        return SQLiteStatement(handle: statement, connection: self)
    }
}

/// A prepared statement, reset after each execution and reused.
final class SQLiteStatement {
    let handle: OpaquePointer
    let connection: SQLiteConnection

    init(handle: OpaquePointer, connection: SQLiteConnection) {
        self.handle = handle
        self.connection = connection
    }

    deinit {
        sqlite3_finalize(handle)
    }

    func bind(_ index: Int32, _ value: Int64) {
        sqlite3_bind_int64(handle, index, value)
    }

    func bind(_ index: Int32, _ value: String?) {
        if let value {
            sqlite3_bind_text(handle, index, value, -1, bench_sqlite_transient())
        } else {
            sqlite3_bind_null(handle, index)
        }
    }

    func bind(_ index: Int32, _ value: [UInt8]) {
        value.withUnsafeBytes { bytes in
            _ = sqlite3_bind_blob(handle, index, bytes.baseAddress, Int32(bytes.count), bench_sqlite_transient())
        }
    }

    /// Runs the bound statement to completion and resets it.
    func run() throws {
        let code = sqlite3_step(handle)
        sqlite3_reset(handle)
        guard code == SQLITE_DONE else {
            throw SQLiteError(description: "step: \(String(cString: sqlite3_errmsg(connection.handle)))")
        }
    }
}
