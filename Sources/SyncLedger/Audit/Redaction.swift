import Foundation
import LedgerStorage

/// An erasure of values: what was erased, why and by whom — the record a redaction leaves in
/// the identity's `_syncledger.redactions` stream (`redaction/<n>`; before, in the pool's
/// `redactions` system stream), so the erasure itself is audited.
public struct Redaction: Sendable, Hashable, Codable {
    /// The identity whose values were erased.
    public var identity: String
    /// The dataset, when the redaction was of one dataset (or one key of it).
    public var dataset: String?
    /// The record key, when the redaction was of one key.
    public var key: String?
    /// Why (given by the admin who made it).
    public var reason: String
    /// Who made it.
    public var by: String
    /// When.
    public var at: Timestamp
    /// Feed positions of the entries that removed the erased records from the current state
    /// (a dataset delete, or a key's removal), so devices drop them at their next sync.
    public var removals: [UInt64]
    /// Set when this redaction erases a copy an identity merge made of another identity's data
    /// (the dataset `<D>.<that identity>` of the survivor): the identity whose redaction it
    /// follows. Nil for a redaction asked for directly.
    public var mergedFrom: String?

    /// Whether this redaction covers a put of `key` in `stream` (of its pool).
    public func covers(_ stream: StreamName, key: String) -> Bool {
        stream.identity.rawValue == identity && (dataset.map { $0 == stream.dataset.rawValue } ?? true)
            && (self.key.map { RecordKey($0) == RecordKey(key) } ?? true)
    }
}

/// What ``Ledger/redact(pool:identity:dataset:key:reason:author:)`` did.
public struct RedactionReport: Sendable, Hashable {
    /// The audit record.
    public var redaction: Redaction
    /// The feed position of the audit entry.
    public var sequence: UInt64
    /// Values erased from the history.
    public var erasedValues: Int
    /// Log entries rewritten (their values section; hashes unchanged).
    public var entriesRewritten: Int
    /// Streams looked through.
    public var streams: Int
    /// The redactions of the copies identity merges made of the erased data (each recorded
    /// in the survivor's own `_syncledger.redactions` stream). The counts above include theirs.
    public var copies: [RecordedRedaction] = []
    /// Copies not redacted by this call because their survivor's streams are written elsewhere
    /// (on a cluster: a shard another node owns): each is redacted by a redaction of that
    /// survivor and copy, sent where it is written.
    public var remaining: [MergeCopy] = []
}

/// A copy an identity merge made of a dataset: the survivor and the copy's dataset in it.
public struct MergeCopy: Sendable, Hashable {
    /// The identity the data was merged into.
    public var identity: IdentityID
    /// The copy's dataset in it.
    public var dataset: DatasetName
}

/// A redaction and the feed position of its audit entry.
public struct RecordedRedaction: Sendable, Hashable {
    /// The feed position of the entry that recorded it.
    public var sequence: UInt64
    /// The redaction.
    public var redaction: Redaction
}

extension Ledger {
    /// The stream holding the redaction records of an identity's values: its reserved dataset
    /// `_syncledger.redactions`, in the identity's shard — so a redaction (its removals and its
    /// record) is one write of one shard on a cluster.
    static func redactionsStream(_ pool: IdentityPoolID, _ identity: IdentityID) -> StreamName {
        StreamName(pool: pool, identity: identity, dataset: .redactions)
    }

    /// Where ledgers before redactions moved to the identity's stream kept a pool's redaction
    /// records (still read, and a record stored there still erases).
    static func legacyRedactionsStream(_ pool: IdentityPoolID) -> StreamName { systemStream(pool, "redactions") }

    /// Whether `stream` holds redaction records (whose storing erases what they name).
    static func holdsRedactions(_ stream: StreamName) -> Bool {
        stream.dataset == DatasetName.redactions || (stream.identity == systemIdentity && stream.dataset.rawValue == "redactions")
    }

    /// The longest reason kept.
    public static let maxRedactionReasonLength = 1000

    /// Erases the values of an identity (every dataset, its device messages too), of one
    /// dataset, or of one key of a dataset, across the whole history, in one write transaction:
    ///
    /// 1. the current state lets go of them through the ordinary write path: a dataset delete of
    ///    each live dataset in scope (or the key's removal), authored by `author`, so views and
    ///    devices drop them;
    /// 2. every earlier entry in scope keeps its key, times and the value's salted commitment
    ///    but loses the value and its salt — the hash chain, digests and proofs still verify;
    /// 3. the idempotency answers of those streams (which hold values) are deleted;
    /// 4. the redaction is recorded in the identity's `_syncledger.redactions` stream. Storing that
    ///    record is what erases (``eraseHistory(_:_:redaction:before:)``), so a follower that
    ///    replicates it erases its own copy the same way.
    ///
    /// The freed pages of the data file still hold the old bytes until they are reused:
    /// `syncledger compact` rewrites the file without them.
    ///
    /// An identity merged into another left copies of its datasets in the survivor (`D.<id>`,
    /// and on through later merges of the survivor): each copy in scope is redacted next, as
    /// a redaction of the survivor's copy (the key in it, for a key), recorded in the survivor's
    /// own redactions stream with ``Redaction/mergedFrom`` — one write per copy. A copy whose
    /// survivor this ledger does not write (`writesHere`; on a cluster, another node's shard)
    /// is listed in ``RedactionReport/remaining`` instead. Redacting again redoes what a crash
    /// in between left undone.
    ///
    /// - Throws: `.invalidParameter` for an empty or over-long reason, a key without a dataset,
    ///   or the reserved identity; `.notFound` when the identity or dataset has no stream.
    ///
    /// - Parameter writesHere: whether this ledger writes the survivor's streams (on a cluster:
    ///   owns its shard); a copy it does not write is left for a redaction sent where it is
    ///   written and listed in ``RedactionReport/remaining``.
    public func redact(pool: IdentityPoolID, identity: IdentityID, dataset: DatasetName? = nil, key: String? = nil,
                       reason: String, author: String,
                       writesHere: (IdentityID) async -> Bool = { _ in true }) async throws -> RedactionReport {
        let copies = try mergeCopies(pool: pool, of: identity, dataset: dataset)  // before anything is written: it may refuse
        var report = try await redactStreams(pool: pool, identity: identity, dataset: dataset, key: key, reason: reason, author: author, mergedFrom: nil)
        for (survivor, copy) in copies {
            guard await writesHere(survivor) else {
                report.remaining.append(MergeCopy(identity: survivor, dataset: copy))
                continue
            }
            let done: RedactionReport
            do {
                done = try await redactStreams(pool: pool, identity: survivor, dataset: copy, key: key, reason: reason, author: author,
                                               mergedFrom: identity.rawValue)
            } catch let error as LedgerError where error.code == .notFound {
                continue  // a copy not made (yet): nothing of it to erase
            }
            report.erasedValues += done.erasedValues
            report.entriesRewritten += done.entriesRewritten
            report.streams += done.streams
            report.copies.append(RecordedRedaction(sequence: done.sequence, redaction: done.redaction))
        }
        return report
    }

    /// The copies identity merges made of `identity`'s datasets (of `dataset` only, when given):
    /// for each, the survivor and the copy's name — following the survivor's own later merges,
    /// which copied the copy again.
    func mergeCopies(pool: IdentityPoolID, of identity: IdentityID, dataset: DatasetName?) throws -> [(IdentityID, DatasetName)] {
        var found: [(IdentityID, DatasetName)] = []
        var pending: [(identity: String, dataset: String?)] = [(identity.rawValue, dataset?.rawValue)]
        var seen: Set<String> = []
        while let next = pending.popLast() {
            let (source, name) = next
            guard found.count < 10_000 else {
                throw LedgerError(.limitExceeded, "identity \(identity.rawValue) has more than 10,000 copies made by merges; redact them in parts (by dataset), nothing was written")
            }
            guard seen.insert("\(source)/\(name ?? "")").inserted,
                  let survivor = try self.identity(pool: pool, id: source)?.mergedInto else { continue }
            for merge in try merges(pool: pool, identity: survivor)
            where merge.sourceIdentity == source && (name == nil || merge.sourceDataset == name) {
                guard let id = try? IdentityID(survivor), let child = try? DatasetName(merge.child) else { continue }
                found.append((id, child))
                pending.append((survivor, merge.child))
            }
        }
        return found
    }

    /// ``redact(pool:identity:dataset:key:reason:author:)`` of one identity's streams, without
    /// following merges: one write transaction.
    func redactStreams(pool: IdentityPoolID, identity: IdentityID, dataset: DatasetName?, key: String?,
                       reason: String, author: String, mergedFrom: String?) async throws -> RedactionReport {
        try Self.requireUserIdentity(identity)
        let reason = reason.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !reason.isEmpty else { throw LedgerError(.invalidParameter, "a redaction needs a reason") }
        guard reason.count <= Self.maxRedactionReasonLength else {
            throw LedgerError(.invalidParameter, "the reason has \(reason.count) characters; at most \(Self.maxRedactionReasonLength)")
        }
        if key != nil, dataset == nil { throw LedgerError(.invalidParameter, "a key is redacted within a dataset: give the dataset too") }
        if let key, key.isEmpty { throw LedgerError(.invalidParameter, "the key to redact is empty") }
        let origin = try ChangeOrigin(author: author)
        let now = options.clock()
        return try await write(on: Self.redactionsStream(pool, identity)) { [self] txn in
            let streams = try self.redactionScope(txn, pool: pool, identity: identity, dataset: dataset)
            guard !streams.isEmpty else {
                let what = dataset.map { "dataset \($0) of identity \(identity)" } ?? "identity \(identity)"
                throw LedgerError(.notFound, "\(what) has no data in pool \(pool)")
            }
            // 1. The current state lets go of the values.
            var removals: [UInt64] = []
            for (stream, id) in streams {
                guard let meta = try self.dataset(txn, id: id, stream: stream), !meta.deleted else { continue }
                if stream.dataset == DatasetName.messages {
                    let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: id)
                    guard try view.record("message")?.value != nil else { continue }
                    removals.append(try self.append(txn, to: stream, author: origin.author, events: [.remove(key: "message", deviceModified: nil)]).entry.sequence)
                    continue
                }
                guard !stream.isInternal else { continue }
                let events: [Event]
                if let key {
                    let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: id)
                    guard try view.record(key)?.value != nil else { continue }
                    events = [.remove(key: key, deviceModified: nil)]
                } else {
                    events = [.deleteDataset]
                }
                let change = try validateChange(events, for: stream)
                removals.append(try self.appendUser(txn, to: stream, origin: origin, change: change, admission: .merge).entry.sequence)
            }
            let redaction = Redaction(identity: identity.rawValue, dataset: dataset?.rawValue, key: key, reason: reason, by: origin.author, at: now,
                                      removals: removals, mergedFrom: mergedFrom)
            // 2-3. The history, counted here; storing the record below erases (again: nothing left).
            let next = try self.nextSequence(txn)
            let (erased, rewritten) = try self.eraseHistory(txn, pool, redaction: redaction, before: next)
            // 4. The record.
            let audit = Self.redactionsStream(pool, identity)
            let number = (try head(txn, audit)?.offset ?? 0) + 1
            let entry = try self.append(txn, to: audit, author: origin.author,
                                        events: [.put(key: String(format: "redaction/%010llu", number), value: Self.json(redaction), deviceModified: nil)]).entry
            return RedactionReport(redaction: redaction, sequence: entry.sequence, erasedValues: erased, entriesRewritten: rewritten, streams: streams.count)
        }
    }

    /// The streams a redaction covers, with their ids: every stream of the identity (device
    /// messages too; not SyncLedger's records about it — redactions, SyncTrigger invocations,
    /// merge copies — which hold no user values), or the one dataset.
    func redactionScope(_ txn: Transaction, pool: IdentityPoolID, identity: IdentityID, dataset: DatasetName?) throws -> [(StreamName, UInt64)] {
        if let dataset {
            guard !dataset.isAuditRecord else { return [] }
            let stream = StreamName(pool: pool, identity: identity, dataset: dataset)
            return try head(txn, stream).map { [(stream, $0.id)] } ?? []
        }
        var streams: [(StreamName, UInt64)] = []
        try forEachStream(txn, prefix: StreamName.prefix(pool: pool, identity: identity)) { stream, head in
            if !stream.dataset.isAuditRecord { streams.append((stream, head.id)) }
            return true
        }
        return streams
    }

    /// Erases, in every entry of `redaction`'s scope committed before feed position `before`,
    /// the values it covers (keeping keys, times and commitments, so hashes do not change), and
    /// deletes the idempotency answers of those streams. Idempotent.
    /// - Returns: values erased and entries rewritten.
    @discardableResult
    func eraseHistory(_ txn: Transaction, _ pool: IdentityPoolID, redaction: Redaction, before: UInt64) throws -> (values: Int, entries: Int) {
        let identity = try IdentityID(redaction.identity)
        let dataset = try redaction.dataset.map { try DatasetName($0) }
        var values = 0, entries = 0
        for (stream, id) in try redactionScope(txn, pool: pool, identity: identity, dataset: dataset) {
            var sequences: [UInt64] = []
            let prefix = [UInt8].bigEndian(id)
            try txn.withCursor(schema.index) { cursor in
                var pair = try cursor.seek(atLeast: prefix)
                while let current = pair, current.key.starts(with: prefix) {
                    let sequence = current.value.bigEndianUInt64()
                    if sequence < before { sequences.append(sequence) }
                    pair = try cursor.next()
                }
            }
            for sequence in sequences {
                guard let row = try txn.get(schema.log, key: .bigEndian(sequence)), row.count > 40 else {
                    throw LedgerError(.corruptData, "the index names sequence \(sequence), which the log lacks", stream: stream)
                }
                let rewritten: (body: [UInt8], erased: Int)?
                do { rewritten = try LogEntry.erasingValues(row[40...], where: { redaction.covers(stream, key: $0) }) } catch {
                    throw LedgerError(.corruptData, "the entry at sequence \(sequence) cannot be erased: \(error)", stream: stream)
                }
                guard let rewritten else { continue }
                try txn.put(schema.log, key: .bigEndian(sequence), value: Array(row[..<40]) + rewritten.body)
                values += rewritten.erased
                entries += 1
            }
            try deleteIdempotencyAnswers(txn, of: stream)
        }
        return (values, entries)
    }

    /// Deletes the stored UpdateRecords answers of `stream` (they hold values) and their purge rows.
    func deleteIdempotencyAnswers(_ txn: Transaction, of stream: StreamName) throws {
        let prefix = stream.key + [0]
        let rows: [(key: [UInt8], time: [UInt8])] = try txn.withCursor(schema.idempotency) { cursor in
            var rows: [([UInt8], [UInt8])] = []
            var pair = try cursor.seek(atLeast: prefix)
            while let current = pair, current.key.starts(with: prefix) {
                rows.append((Array(current.key), Array(current.value.prefix(8))))
                pair = try cursor.next()
            }
            return rows
        }
        for row in rows {
            _ = try txn.delete(schema.idempotency, key: row.key)
            _ = try txn.delete(schema.idempotencyByTime, key: row.time + row.key)
        }
    }

    /// Called for every stored entry of a stream of redaction records (on the leader, on a
    /// follower and on every cluster replica alike): erases what its records name in the
    /// history before it.
    func storeRedaction(_ txn: Transaction, _ entry: LogEntry) throws {
        for case .put(let key, let value, _) in entry.events where key.hasPrefix("redaction/") {
            let redaction = try Self.decode(Redaction.self, value, stream: entry.stream)
            try eraseHistory(txn, entry.stream.pool, redaction: redaction, before: entry.sequence)
        }
    }

    /// Every redaction of `pool` (of one identity's values, when `identity` is given), with the
    /// feed position of its record, in feed order.
    public func redactions(pool: IdentityPoolID, identity: IdentityID? = nil) throws -> [(sequence: UInt64, redaction: Redaction)] {
        var streams = [Self.legacyRedactionsStream(pool)]
        if let identity {
            streams.append(Self.redactionsStream(pool, identity))
        } else {
            try read { txn in
                try forEachStream(txn, prefix: StreamName.prefix(pool: pool)) { stream, _ in
                    if stream.dataset == DatasetName.redactions { streams.append(stream) }
                    return true
                }
            }
        }
        var result: [(sequence: UInt64, redaction: Redaction)] = []
        for stream in streams {
            try forEachEntry(in: stream) { entry in
                for case .put(let key, let value, _) in entry.events where key.hasPrefix("redaction/") {
                    let redaction = try Self.decode(Redaction.self, value, stream: entry.stream)
                    if identity.map({ $0.rawValue == redaction.identity }) ?? true { result.append((entry.sequence, redaction)) }
                }
                return true
            }
        }
        return result.sorted { $0.sequence < $1.sequence }
    }
}
