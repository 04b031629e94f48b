import LedgerStorage
@testable import SyncLedger

extension Ledger {
    /// Appends an entry to any stream through the log core alone — open, seal, store — without
    /// the rules a user's dataset passes: for tests that need entries the rules refuse (a
    /// device's forged log), or many entries fast. The server has no such door.
    @discardableResult
    func forgeEntry(_ txn: Transaction, to stream: StreamName, author: String, events: [Event]) throws -> LogEntry {
        var draft = try openEntry(txn, on: stream)
        try seal(&draft, txn, author: author, device: nil, events: events)
        return try store(txn, draft)
    }

    /// Appends a valid change to a user's dataset the way every write path does.
    @discardableResult
    func appendChange(_ txn: Transaction, to stream: StreamName, author: String, events: [Event]) throws -> LogEntry {
        try appendUser(txn, to: stream, origin: try ChangeOrigin(author: author), change: try validateChange(events, for: stream)).entry
    }
}
