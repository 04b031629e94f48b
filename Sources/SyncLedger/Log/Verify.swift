import LedgerStorage
import Crypto

/// What ``Ledger/verify()`` found.
public struct VerificationReport: Sendable, CustomStringConvertible {
    /// The first problem found, and where.
    public struct Problem: Sendable, Hashable, CustomStringConvertible {
        /// The stream, when the problem is in one.
        public let stream: StreamName?
        /// The offset in it, when known.
        public let offset: UInt64?
        /// What is wrong.
        public let message: String

        public var description: String {
            var text = message
            if let stream { text += " [stream \(stream)" + (offset.map { " offset \($0)" } ?? "") + "]" }
            return text
        }
    }

    /// Streams checked.
    public var streams: Int = 0
    /// Entries checked.
    public var entries: UInt64 = 0
    /// The first problem, or nil when every chain and view checked out.
    public var problem: Problem?
    /// SHA-256 over every stream's name, head offset and head hash, in name order (hex): equal
    /// digests mean equal logs.
    public var digest: String = ""

    /// Whether nothing was wrong.
    public var isValid: Bool { problem == nil }

    public var description: String {
        if let problem { return "FAILED after \(streams) streams, \(entries) entries: \(problem)" }
        return "ok: \(streams) streams, \(entries) entries, digest \(digest)"
    }
}

extension Ledger {
    private struct Failure: Error {
        let problem: VerificationReport.Problem
    }

    /// Recomputes every stream's hash chain and views from the log, compares them with what is
    /// stored, and reports the first bad stream and offset. Streams the log in batches; memory
    /// stays bounded by one dataset.
    public func verify() throws -> VerificationReport {
        var report = VerificationReport()
        do {
            let logCountAtStart = try read { txn in
                let logCount = try txn.count(schema.log)
                let indexCount = try txn.count(schema.index)
                if logCount != indexCount {
                    throw Failure(problem: .init(stream: nil, offset: nil, message: "the log holds \(logCount) entries but the index \(indexCount)"))
                }
                return logCount
            }
            var after: [UInt8]?
            var latestByPool: [String: Timestamp] = [:]
            let timeRuleFrom = try read { txn in try txn.get(schema.meta, key: Schema.timeRuleFromKey)?.bigEndianUInt64() ?? 0 }
            // Every erased value must be covered by a redaction recorded after it (a value erased
            // without that record is tampering). Redactions are few; read them all first.
            var redactions: [String: [(sequence: UInt64, redaction: Redaction)]] = [:]
            for pool in try poolsWithStreams() {
                let list = try self.redactions(pool: pool)
                if !list.isEmpty { redactions[pool.rawValue] = list }
            }
            while true {
                let batch = try read { txn -> [(StreamName, UInt64)] in
                    var result: [(StreamName, UInt64)] = []
                    try forEachStream(txn, prefix: [], from: after) { stream, head in
                        result.append((stream, head.id))
                        return result.count < 256
                    }
                    return result
                }
                for (stream, id) in batch {
                    let (count, latest) = try verifyStream(stream, id: id, timeRuleFrom: timeRuleFrom, redactions: redactions[stream.pool.rawValue] ?? [])
                    report.entries += count
                    if !stream.isInternal, let latest {
                        latestByPool[stream.pool.rawValue] = max(latestByPool[stream.pool.rawValue] ?? latest, latest)
                    }
                    report.streams += 1
                }
                guard batch.count == 256, let last = batch.last else { break }
                after = last.0.key + [0]
            }
            try verifyPools(latest: latestByPool, logCountAtStart: logCountAtStart)
            // The stored Merkle tree (docs/proofs.md) is derived from the log too.
            if let problem = try checkMerkleTree() { throw Failure(problem: .init(stream: nil, offset: nil, message: problem)) }
        } catch let failure as Failure {
            report.problem = failure.problem
        } catch let error as LedgerError where error.code == .corruptData {
            report.problem = .init(stream: error.stream, offset: error.offset, message: error.message)
        }
        report.digest = try digest()
        return report
    }

    /// Recomputes one stream's hash chain and views from the log and compares them with what
    /// is stored, as ``verify()`` does for every stream (without the ledger-wide checks: the
    /// log/index counts, pool times, the Merkle tree). Its cost follows the stream's entries.
    ///
    /// - Throws: ``LedgerError`` `.notFound` when the stream has no entries.
    public func verify(stream: StreamName) throws -> VerificationReport {
        guard let head = try read({ try head($0, stream) }) else {
            throw LedgerError(.notFound, "dataset \(stream) does not exist: it has no entries", stream: stream)
        }
        let timeRuleFrom = try read { txn in try txn.get(schema.meta, key: Schema.timeRuleFromKey)?.bigEndianUInt64() ?? 0 }
        var report = VerificationReport()
        do {
            let (count, _) = try verifyStream(stream, id: head.id, timeRuleFrom: timeRuleFrom, redactions: try redactions(pool: stream.pool, identity: stream.identity))
            report.entries = count
            report.streams = 1
        } catch let failure as Failure {
            report.problem = failure.problem
        } catch let error as LedgerError where error.code == .corruptData {
            report.problem = .init(stream: error.stream, offset: error.offset, message: error.message)
        }
        return report
    }

    /// SHA-256 over every stream's name, head offset and head hash, in name order (hex).
    public func digest() throws -> String {
        try read { txn in
            var hasher = SHA256()
            try txn.withCursor(schema.streams) { cursor in
                var pair = try cursor.first()
                while let current = pair {
                    var w = ByteWriter()
                    w.varint(UInt64(current.key.count))
                    w.raw(current.key)
                    w.raw(current.value.dropFirst(8))  // head offset and hash, not the local id
                    hasher.update(data: w.bytes)
                    pair = try cursor.next()
                }
            }
            return Hex.encode(hasher.finalize())
        }
    }

    /// Checks one stream; returns the number of entries checked.
    /// Checks one stream; returns the number of entries checked and the latest entry time.
    /// Time must not go backwards from entries after sequence `timeRuleFrom` on (a ledger
    /// migrated from format 1 holds entries written before the rule).
    private func verifyStream(_ stream: StreamName, id: UInt64, timeRuleFrom: UInt64,
                              redactions: [(sequence: UInt64, redaction: Redaction)]) throws -> (UInt64, Timestamp?) {
        var view = MemoryDatasetView()
        var expected: UInt64 = 1
        var previous = LogEntry.genesisHash
        var previousTime: Timestamp?
        var latest: Timestamp?
        let prefix = [UInt8].bigEndian(id)
        func fail(_ message: String, at offset: UInt64? = nil) -> Failure {
            Failure(problem: .init(stream: stream, offset: offset, message: message))
        }
        while true {
            let finished = try read { txn -> Bool in
                guard let head = try head(txn, stream) else { throw fail("the stream has no head") }
                var count = 0
                try txn.withCursor(schema.index) { cursor in
                    var pair = try cursor.seek(atLeast: Schema.indexKey(stream: id, offset: expected))
                    while let current = pair, current.key.starts(with: prefix), count < Self.scanBatch {
                        let offset = current.key.bigEndianUInt64(at: 8)
                        guard offset == expected else { throw fail("offset \(expected) is missing from the index", at: expected) }
                        let sequence = current.value.bigEndianUInt64()
                        guard let bytes = try txn.get(schema.log, key: .bigEndian(sequence)) else {
                            throw fail("the index names sequence \(sequence), which the log lacks", at: offset)
                        }
                        let entry: LogEntry
                        let storedID: UInt64
                        do { (entry, storedID) = try decodeEntry(bytes, sequence: sequence, stream: stream, txn: txn) } catch let error as LedgerError {
                            throw fail(error.message, at: offset)
                        }
                        guard storedID == id, entry.offset == offset else {
                            throw fail("the entry at sequence \(sequence) belongs to stream id \(storedID) offset \(entry.offset)", at: offset)
                        }
                        // Over the canonical bytes: every value present through its salted commitment.
                        let hash = LogEntry.chainHash(previous: previous, stream: stream, body: bytes[40...])
                        guard hash == entry.hash else { throw fail("the hash chain breaks: stored hash differs from the recomputed one", at: offset) }
                        if let previousTime, entry.time < previousTime, entry.sequence > timeRuleFrom {
                            throw fail("time goes backwards: \(entry.time) after \(previousTime)", at: offset)
                        }
                        for case .erased(let key, _) in entry.events
                        where !redactions.contains(where: { $0.sequence > entry.sequence && $0.redaction.covers(stream, key: key) }) {
                            throw fail("the value of \(quoted(key)) is erased, but no redaction recorded after it covers it", at: offset)
                        }
                        previousTime = entry.time
                        latest = max(latest ?? entry.time, entry.time)
                        try apply(entry, to: &view)
                        previous = hash
                        expected += 1
                        count += 1
                        pair = try cursor.next()
                    }
                }
                if count == Self.scanBatch { return false }
                guard head.offset == expected - 1, head.hash == previous else {
                    throw fail("the stream head (offset \(head.offset)) does not match its last entry (offset \(expected - 1))", at: head.offset)
                }
                try compareViews(txn, stream: stream, id: id, with: view, at: head.offset)
                return true
            }
            if finished { return (expected - 1, latest) }
        }
    }

    private func compareViews(_ txn: Transaction, stream: StreamName, id: UInt64, with view: MemoryDatasetView, at offset: UInt64) throws {
        func fail(_ message: String) -> Failure { Failure(problem: .init(stream: stream, offset: offset, message: message)) }
        let stored = try dataset(txn, id: id, stream: stream)
        guard stored == view.dataset else { throw fail("the dataset view differs from the replayed log") }
        let prefix = [UInt8].bigEndian(id)
        var seen = 0
        try txn.withCursor(schema.records) { cursor in
            var pair = try cursor.seek(atLeast: prefix)
            while let current = pair, current.key.starts(with: prefix) {
                guard let (key, record) = try? Schema.decodeRecord(key: current.key, value: current.value) else {
                    throw fail("a stored record does not decode")
                }
                guard record == view.records[RecordKey(key)], current.key == Schema.recordKey(stream: id, key: key) else {
                    throw fail("the view of record \(quoted(key)) differs from the replayed log")
                }
                seen += 1
                pair = try cursor.next()
            }
        }
        guard seen == view.records.count else {
            throw fail("the view holds \(seen) records; the replayed log has \(view.records.count)")
        }
        // Every record once in records-by-sync-count, under the sync count it carries.
        var rows = 0
        try txn.withCursor(schema.recordsBySyncCount) { cursor in
            var pair = try cursor.seek(atLeast: prefix)
            while let current = pair, current.key.starts(with: prefix) {
                let recordKey = Array(current.key.prefix(8)) + current.key.dropFirst(16)
                guard current.key.count >= 16, let value = try txn.get(schema.records, key: recordKey),
                      let (_, record) = try? Schema.decodeRecord(key: recordKey, value: value),
                      record.syncCount == current.key.bigEndianUInt64(at: 8) else {
                    throw fail("records-by-sync-count has a row that matches no record")
                }
                rows += 1
                pair = try cursor.next()
            }
        }
        guard rows == seen else {
            throw fail("records-by-sync-count holds \(rows) rows for \(seen) records")
        }
    }

    /// Checks the pool aggregates against the datasets, in one read transaction. A pool's
    /// last-modified time has one definition, in the view and here: the latest time of any entry
    /// of its user streams (`latest`, gathered by ``verifyStream``) — the view keeps it as a
    /// running maximum as entries are applied.
    ///
    /// `latest` was gathered in earlier read transactions than this one. When the log grew
    /// since verify started (a server writes beside it), a pool's stored time may be later
    /// than `latest` says, and is then checked to be at least that (a running maximum only
    /// grows); its bytes are this transaction's on both sides and must be equal.
    private func verifyPools(latest: [String: Timestamp], logCountAtStart: Int) throws {
        try read { txn in
            let quiet = try txn.count(schema.log) == logCountAtStart
            var expected: [String: PoolState] = [:]
            try forEachStream(txn, prefix: []) { stream, head in
                guard !stream.isInternal, let meta = try dataset(txn, id: head.id, stream: stream) else { return true }
                var pool = expected[stream.pool.rawValue] ?? PoolState(bytes: 0, lastModified: latest[stream.pool.rawValue] ?? meta.lastModified)
                pool.bytes += meta.bytes
                expected[stream.pool.rawValue] = pool
                return true
            }
            var stored: [String: PoolState] = [:]
            try txn.withCursor(schema.pools) { cursor in
                var pair = try cursor.first()
                while let current = pair {
                    stored[String(decoding: current.key, as: UTF8.self)] = try? PoolState(decoding: current.value)
                    pair = try cursor.next()
                }
            }
            func matches(_ expected: PoolState?, _ stored: PoolState?) -> Bool {
                if expected == stored { return true }
                guard !quiet, let expected, let stored else { return false }
                return expected.bytes == stored.bytes && stored.lastModified >= expected.lastModified
            }
            if let pool = Set(expected.keys).union(stored.keys).sorted().first(where: { !matches(expected[$0], stored[$0]) }) {
                throw Failure(problem: .init(stream: nil, offset: nil, message: "the usage view of pool \(pool) differs from its datasets"))
            }
        }
    }

    /// Recomputes every view from the log with ``apply(_:to:)``, in one write transaction.
    public func rebuildViews() async throws {
        try await write { [self] txn in try self.rebuildViews(txn) }
    }

    func rebuildViews(_ txn: Transaction) throws {
        for db in schema.views { try txn.removeAll(db) }
        var names: [UInt64: StreamName] = [:]
        var sequence: UInt64 = 0
        while true {
            // Collect a batch first: the views are written while the log is read.
            var batch: [(LogEntry, UInt64)] = []
            try txn.withCursor(schema.log) { cursor in
                var pair = try cursor.seek(atLeast: .bigEndian(sequence + 1))
                while let current = pair, batch.count < Self.scanBatch {
                    let id = current.value.bigEndianUInt64()
                    if names[id] == nil { names[id] = try streamName(txn, id: id) }
                    batch.append(try decodeEntry(current.value, sequence: current.key.bigEndianUInt64(), stream: names[id], txn: txn))
                    pair = try cursor.next()
                }
            }
            for (entry, id) in batch {
                var view = try StoredDatasetView(txn: txn, schema: schema, stream: entry.stream, streamID: id)
                try apply(entry, to: &view)
                try view.flush()
                if entry.stream.dataset == DatasetName.messages { try indexMessage(txn, entry, streamID: id, known: nil) }
            }
            guard batch.count == Self.scanBatch, let last = batch.last else { return }
            sequence = last.0.sequence
        }
    }

    /// Every key/value pair of the view databases, for comparing maintained and rebuilt views.
    func viewContents() throws -> [[Cursor.Pair]] {
        try read { txn in
            try schema.views.map { db in
                try txn.withCursor(db) { cursor in
                    var pairs: [Cursor.Pair] = []
                    var pair = try cursor.first()
                    while let current = pair {
                        pairs.append(current)
                        pair = try cursor.next()
                    }
                    return pairs
                }
            }
        }
    }
}
