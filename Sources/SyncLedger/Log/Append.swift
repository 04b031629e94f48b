import LedgerStorage

/// One entry on its way into a stream, in the order the write path takes it:
///
/// 1. ``Ledger/openEntry(_:on:)`` reads the stream's head and view — the state the write's rules
///    read (conflicts, existence, counts);
/// 2. ``Ledger/seal(_:_:author:device:events:)`` makes the entry (sequence, offset, time, chain
///    hash) and runs ``apply(_:to:)`` on the view — the state the limits read;
/// 3. ``Ledger/store(_:_:message:)`` writes the log, the index, the head and the views.
///
/// Nothing reaches LMDB before step 3, so a rule that refuses between the steps leaves nothing
/// behind. The rules themselves are plain calls between the steps (see ``Ledger/appendUser(_:to:origin:change:admission:expecting:)``),
/// never closures handed to the log.
struct EntryDraft {
    /// The stream the entry goes to.
    let stream: StreamName
    /// The stream's head before the entry (nil: the stream's first entry).
    let head: StreamHead?
    /// The stream's id (a new one for a new stream).
    let streamID: UInt64
    /// The stream's view: as it is before the entry until sealed, as it will be after once sealed.
    fileprivate(set) var view: StoredDatasetView
    /// The entry and its stored body, once sealed.
    fileprivate(set) var sealed: (entry: LogEntry, body: [UInt8])?
}

extension Ledger {
    // MARK: - The log core

    /// Step 1 of an append: the stream's head and its view before the entry.
    func openEntry(_ txn: Transaction, on stream: StreamName) throws -> EntryDraft {
        let existing = try head(txn, stream)
        let id = try existing?.id ?? nextStreamID(txn)
        return EntryDraft(stream: stream, head: existing, streamID: id,
                          view: try StoredDatasetView(txn: txn, schema: schema, stream: stream, streamID: id))
    }

    /// Step 2: makes the entry of `events` and applies it to the draft's view. The entry's time is
    /// the clock's, but never earlier than the stream's previous entry, so time only moves forward
    /// in a stream (a clock step back does not backdate an entry). Writes nothing.
    func seal(_ draft: inout EntryDraft, _ txn: Transaction, author: String, device: String?, events: [Event]) throws {
        precondition(draft.sealed == nil, "an entry draft is sealed once")
        let sequence = try nextSequence(txn)
        let offset = (draft.head?.offset ?? 0) + 1
        let now = options.clock()
        let time = draft.view.dataset.map { max(now, $0.lastModified) } ?? now
        let (body, canonical) = LogEntry.encodeStoredBody(offset: offset, time: time, author: author, device: device, events: events)
        let hash = LogEntry.chainHash(previous: draft.head?.hash ?? LogEntry.genesisHash, stream: draft.stream, canonical: canonical[...])
        let entry = LogEntry(stream: draft.stream, offset: offset, sequence: sequence, time: time, author: author, device: device, events: events, hash: hash)
        try apply(entry, to: &draft.view)
        draft.sealed = (entry, body)
    }

    /// Step 3: stores a sealed draft — the log append, the index, the stream head (and name, for a
    /// new stream) and the view changes. - Returns: the entry.
    func store(_ txn: Transaction, _ draft: EntryDraft, message: KnownMessage? = nil) throws -> LogEntry {
        guard let (entry, body) = draft.sealed else { preconditionFailure("an entry draft is sealed before it is stored") }
        try store(txn, entry, body: body, streamID: draft.streamID, newStream: draft.head == nil, view: draft.view, message: message)
        return entry
    }

    /// Appends one entry of `events` to one of SyncLedger's own streams (system streams, device
    /// messages, merge and redaction records) inside `txn`, applied to its views.
    ///
    /// A user's dataset is not written here: its entries pass Cognito's rules in
    /// ``appendUser(_:to:origin:change:admission:expecting:)``. A rule a system stream needs
    /// (a pool's identity cap, say) reads ``openEntry(_:on:)``'s view before calling
    /// ``append(_:_:author:device:events:message:)`` with that draft.
    ///
    /// - Throws: `.invalidParameter` for a user's dataset (nothing is written).
    @discardableResult
    func append(_ txn: Transaction, to stream: StreamName, author: String, device: String? = nil, events: [Event],
                message: KnownMessage? = nil) throws -> (entry: LogEntry, view: StoredDatasetView) {
        var draft = try openEntry(txn, on: stream)
        let entry = try append(txn, &draft, author: author, device: device, events: events, message: message)
        return (entry, draft.view)
    }

    /// ``append(_:to:author:device:events:message:)`` on a draft the caller opened (and read).
    @discardableResult
    func append(_ txn: Transaction, _ draft: inout EntryDraft, author: String, device: String? = nil, events: [Event],
                message: KnownMessage? = nil) throws -> LogEntry {
        guard draft.stream.isInternal else {
            throw LedgerError(.invalidParameter, "\(draft.stream) is a user's dataset: it is written only through Cognito's rules (appendUser); nothing was written", stream: draft.stream)
        }
        try seal(&draft, txn, author: author, device: device, events: events)
        return try store(txn, draft, message: message)
    }

    /// A stream id for a stream seen for the first time.
    func nextStreamID(_ txn: Transaction) throws -> UInt64 {
        try (txn.withCursor(schema.streamNames) { try $0.last() }?.key.bigEndianUInt64() ?? 0) + 1
    }

    /// The commit sequence of the next entry.
    func nextSequence(_ txn: Transaction) throws -> UInt64 {
        try (txn.withCursor(schema.log) { try $0.last() }?.key.bigEndianUInt64() ?? 0) + 1
    }

    /// Writes an entry whose view changes `view` holds: the log (an append), the index, the
    /// stream head (and name, for a new stream) and the views. Every append goes through here,
    /// or — a merge writing several entries of a stream — through its two halves.
    func store(_ txn: Transaction, _ entry: LogEntry, body: [UInt8], streamID id: UInt64, newStream: Bool, view: StoredDatasetView, message: KnownMessage? = nil) throws {
        try storeLog(txn, entry, body: body[...], streamID: id, message: message)
        try storeHead(txn, entry, streamID: id, newStream: newStream, view: view)
    }

    /// The log append and the index entry of `entry`.
    func storeLog(_ txn: Transaction, _ entry: LogEntry, body: ArraySlice<UInt8>, streamID id: UInt64, message: KnownMessage? = nil) throws {
        var buffers = AppendBuffers()
        try storeLog(txn, entry, body: body, streamID: id, buffers: &buffers, message: message)
    }

    /// Keys and values of log appends, kept across the appends of one merge so that writing an
    /// entry allocates nothing once they have grown (LMDB copies what it is given).
    struct AppendBuffers {
        var sequence = ByteWriter(capacity: 8)
        var value = ByteWriter(capacity: 512)
        var index = ByteWriter(capacity: 16)
    }

    /// ``storeLog(_:_:body:streamID:)`` through reused buffers.
    func storeLog(_ txn: Transaction, _ entry: LogEntry, body: ArraySlice<UInt8>, streamID id: UInt64, buffers: inout AppendBuffers,
                  message: KnownMessage? = nil) throws {
        buffers.sequence.bytes.removeAll(keepingCapacity: true)
        buffers.sequence.fixed64(entry.sequence)
        buffers.value.bytes.removeAll(keepingCapacity: true)
        buffers.value.fixed64(id)
        buffers.value.raw(entry.hash)
        buffers.value.bytes.append(contentsOf: body)
        buffers.index.bytes.removeAll(keepingCapacity: true)
        buffers.index.fixed64(id)
        buffers.index.fixed64(entry.offset)
        try txn.put(schema.log, key: buffers.sequence.bytes, value: buffers.value.bytes, flags: .append)
        try txn.put(schema.index, key: buffers.index.bytes, value: buffers.sequence.bytes)
        if entry.stream.dataset == DatasetName.messages { try indexMessage(txn, entry, streamID: id, known: message) }
        // A redaction's record erases what it names, wherever it is stored (a follower too).
        if Self.holdsRedactions(entry.stream) { try storeRedaction(txn, entry) }
        // A merge's copies on a cluster: the list of those this replica has yet to see made.
        if entry.stream.dataset == DatasetName.merges || (entry.stream.identity == Self.systemIdentity && entry.stream.dataset.rawValue == "identities") {
            try notePendingCopies(txn, entry)
        }
    }

    /// The stream head after `entry` (its last stored entry), the name of a new stream, and the
    /// view changes `view` collected.
    func storeHead(_ txn: Transaction, _ entry: LogEntry, streamID id: UInt64, newStream: Bool, view: StoredDatasetView) throws {
        try txn.put(schema.streams, key: entry.stream.key, value: StreamHead(id: id, offset: entry.offset, hash: entry.hash).encoded())
        if newStream {
            try txn.put(schema.streamNames, key: .bigEndian(id), value: entry.stream.key)
        }
        try view.flush()
    }

}
