import Foundation
import LedgerStorage

/// One record of a SyncTrigger event or answer (Cognito's `datasetRecords` values).
public struct SyncTriggerRecord: Sendable, Hashable {
    /// The value before the update (nil: the record does not exist).
    public var oldValue: String?
    /// The value after it (nil with `remove`).
    public var newValue: String?
    /// `replace` or `remove`.
    public var op: String

    /// A record.
    public init(oldValue: String?, newValue: String?, op: String) {
        self.oldValue = oldValue
        self.newValue = newValue
        self.op = op
    }

    /// Whether it removes the record (`op` remove, or no new value).
    public var removes: Bool { op == "remove" || newValue == nil }
}

/// The event a pool's SyncTrigger receives (Cognito's, `version` 2): every record of the dataset,
/// each as it is (`oldValue` = `newValue`) or as the update changes it.
public struct SyncTriggerEvent: Sendable, Hashable {
    /// The region (the pool id's prefix).
    public var region: String
    /// The stream the update is for.
    public var stream: StreamName
    /// Key → record.
    public var records: [String: SyncTriggerRecord]
}

/// A pool's SyncTrigger: called inside UpdateRecords, before anything is written, with the
/// event; answers the records to write (Cognito's Lambda contract, served here by a webhook).
public protocol SyncTrigger: Sendable {
    /// What to call it in the audit record (the ARN it stands for).
    var name: String { get }
    /// Invokes the hook.
    /// - Returns: the answer's `datasetRecords`, after its read-only fields were checked.
    /// - Throws: ``LedgerError`` `.hookTimeout`, `.hookThrottled` or `.hookInvalidOutput`.
    func invoke(_ event: SyncTriggerEvent) async throws -> [String: SyncTriggerRecord]
}

extension Ledger {
    /// The stream where each SyncTrigger invocation for a dataset is recorded: the identity's
    /// reserved dataset `_syncledger.sync-trigger`, whose record `last/<dataset>` (each version a
    /// log entry) says which hook ran, what it changed, added or removed, or how it failed, and
    /// the entry it led to. It is in the identity's shard, so on a cluster the audit and the
    /// write it led to are one message of one shard's log.
    static func triggerAuditStream(_ stream: StreamName) -> StreamName {
        StreamName(pool: stream.pool, identity: stream.identity, dataset: .syncTriggerAudit)
    }

    /// Where ledgers before the audit moved to the identity's shard recorded it: the pool's
    /// `sync-trigger` system stream, record `last/<identity>/<dataset>` (still read).
    static func legacyTriggerAuditStream(_ pool: IdentityPoolID) -> StreamName { systemStream(pool, "sync-trigger") }

    static func triggerAuditKey(_ stream: StreamName) -> String { "last/\(stream.dataset)" }

    /// UpdateRecords through the pool's SyncTrigger: the event is built from the dataset's
    /// records and the patches, the hook answers, and its answer is written — changed values,
    /// removals and added keys in the same entry as the device's patches; records it omits stay
    /// as they were — through the same validation and `apply` as every write. A record the hook
    /// changed that another writer changed meanwhile is a conflict. The invocation and its
    /// outcome are recorded in the identity's `_syncledger.sync-trigger` stream, in the same
    /// transaction as the entry (or alone, when nothing was written).
    ///
    /// - Throws: what ``updateRecords(_:patches:deviceID:caller:sessionToken:idempotencyKey:)``
    ///   throws, and the hook's `.hookTimeout`, `.hookThrottled`, `.hookInvalidOutput`; nothing
    ///   of the update is written then.
    func updateRecordsThroughTrigger(_ stream: StreamName, patches: [RecordPatch], origin: ChangeOrigin, trigger: any SyncTrigger,
                                     idempotency: IdempotencyRequest?) async throws -> UpdateResult {
        // The event: every live record as it is, and the patched ones as the device changes them.
        let current = try read { txn -> [String: RecordState] in
            guard let head = try head(txn, stream) else { return [:] }
            let view = try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: head.id)
            var found: [String: RecordState] = [:]
            for (key, state) in try view.storedRecordStates() { found[key] = state }
            return found
        }
        var conflicts: [LedgerError.Conflict] = []
        var records: [String: SyncTriggerRecord] = [:]
        for (key, state) in current where state.value != nil {
            records[key] = SyncTriggerRecord(oldValue: state.value, newValue: state.value, op: "replace")
        }
        for patch in patches {
            let now = current[patch.key]
            if (now?.syncCount ?? 0) != patch.syncCount { conflicts.append(.init(key: patch.key, expected: patch.syncCount, actual: now?.syncCount ?? 0)) }
            records[patch.key] = SyncTriggerRecord(oldValue: now?.value, newValue: patch.op == .remove ? nil : patch.value, op: patch.op == .remove ? "remove" : "replace")
        }
        if !conflicts.isEmpty { throw Self.conflictError(conflicts, stream: stream) }
        let region = stream.pool.rawValue.split(separator: ":").first.map(String.init) ?? "us-east-1"
        let event = SyncTriggerEvent(region: region, stream: stream, records: records)
        let started = ContinuousClock.now
        let answer: [String: SyncTriggerRecord]
        do { answer = try await trigger.invoke(event) } catch let error as LedgerError {
            try? await recordTrigger(stream, trigger: trigger, outcome: ["outcome": "\(error.code)", "error": error.message], caller: origin.author)
            throw error
        }
        let elapsed = ContinuousClock.now - started

        // What to write: each answered record whose state differs from the stored one.
        var events: [Event] = []
        var expected: [String: String?] = [:]  // hook-touched keys the device did not patch: their value when the hook saw it
        var changed: [String] = [], added: [String] = [], removed: [String] = []
        let patched = Dictionary(patches.map { ($0.key, $0) }, uniquingKeysWith: { _, last in last })
        let device = Dictionary(patches.map { ($0.key, $0.deviceModified) }, uniquingKeysWith: { _, last in last })
        for key in answer.keys.sorted() {
            let r = answer[key]!
            let stored = current[key]?.value
            let sent = records[key]
            if r.removes {
                guard stored != nil || patched[key] != nil else { continue }
                if stored != nil || patched[key]?.op == .replace { events.append(.remove(key: key, deviceModified: device[key] ?? nil)) }
                if sent == nil || !(sent!.removes) { removed.append(key) }
            } else {
                let value = r.newValue!
                guard value != stored || patched[key] != nil else { continue }
                events.append(.put(key: key, value: value, deviceModified: device[key] ?? nil))
                if sent == nil { added.append(key) } else if sent!.removes || sent!.newValue != value { changed.append(key) }
            }
            if patched[key] == nil { expected[key] = stored }
        }
        let dropped = patches.map(\.key).filter { answer[$0] == nil }
        let audit: [String: String] = ["outcome": "applied", "changed": changed.joined(separator: ","), "added": added.joined(separator: ","),
                                       "removed": removed.joined(separator: ","), "omitted": dropped.joined(separator: ","),
                                       "milliseconds": "\(elapsed.milliseconds)"]
        guard !events.isEmpty else {
            // Nothing to write: the records stay, and the answer is their state now.
            try await recordTrigger(stream, trigger: trigger, outcome: audit.merging(["outcome": "nothing to write"]) { $1 }, caller: origin.author)
            let offset = try read { txn in try head(txn, stream)?.offset ?? 0 }
            return UpdateResult(records: patches.compactMap { p in current[p.key].map { Record(key: p.key, state: $0) } }, syncCount: offset)
        }
        let change: UserChange
        do { change = try validateChange(events, for: stream, describe: { "the SyncTrigger's record \($0)" }) } catch {
            try? await recordTrigger(stream, trigger: trigger, outcome: ["outcome": "invalid output", "error": error.message], caller: origin.author)
            throw LedgerError(.hookInvalidOutput, "the SyncTrigger \(trigger.name) answered records the server refuses: \(error.message)", stream: stream)
        }
        let keys = events.compactMap(\.key)
        let name = trigger.name
        let touched = expected
        // The caller's sync counts, and the records the hook read: changed since, they conflict.
        let expectation = Expectation.records(patches.map { .syncCount($0.key, $0.syncCount) }
            + touched.map { key, value in ExpectedRecord(key: key, syncCount: current[key]?.syncCount ?? 0, compare: .value(value)) })
        return try await writeScoped(on: stream) { [self] scope in
            let txn = scope.txn
            if let idempotency, let stored = try self.storedUpdate(txn, idempotency) { return stored }
            let written = try self.appendUser(txn, to: stream, origin: origin, change: change, expecting: expectation)
            let (entry, view) = (written.entry, written.view)
            var record = audit
            record["hook"] = name
            record["offset"] = "\(entry.offset)"
            _ = try self.append(txn, to: Self.triggerAuditStream(stream), author: origin.author,
                                events: [.put(key: Self.triggerAuditKey(stream), value: Self.json(record), deviceModified: nil)])
            let result = Set(keys).union(patches.map(\.key)).sorted().compactMap { key -> Record? in
                if let state = view.changed[RecordKey(key)] { return Record(key: key, state: state) }
                return current[key].map { Record(key: key, state: $0) }
            }
            let answer = UpdateResult(records: result, syncCount: entry.offset)
            if let idempotency { try self.storeUpdate(scope, idempotency, answer, at: entry.time) }
            return answer
        }
    }

    /// Records an invocation that wrote nothing (it failed, or changed nothing).
    private func recordTrigger(_ stream: StreamName, trigger: any SyncTrigger, outcome: [String: String], caller: String) async throws {
        var record = outcome
        record["hook"] = trigger.name
        let value = Self.json(record)
        try await appendSystem(Self.triggerAuditStream(stream), author: caller) { _ in
            [.put(key: Self.triggerAuditKey(stream), value: value, deviceModified: nil)]
        }
    }

    /// The latest SyncTrigger invocation recorded for a dataset: hook, outcome, what it changed.
    public func lastTriggerInvocation(_ stream: StreamName) throws -> [String: String]? {
        let audit = Self.triggerAuditStream(stream)
        if let value = try recordValue(audit, key: Self.triggerAuditKey(stream)) { return try Self.decode([String: String].self, value, stream: audit) }
        let legacy = Self.legacyTriggerAuditStream(stream.pool)
        return try recordValue(legacy, key: "last/\(stream.identity)/\(stream.dataset)").map { try Self.decode([String: String].self, $0, stream: legacy) }
    }
}
