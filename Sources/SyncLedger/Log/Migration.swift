import LedgerStorage

extension Ledger {
    /// Format 2 → 3: every entry whose body carries its values inline (body version 1 or 2) is
    /// rewritten with each value as a salted commitment (version 3 or 4, fresh random salts, the
    /// same offset, time, author, device and events), and every stream's hash chain is computed
    /// again over the new bodies, heads included. Commit sequences, offsets, the index and the
    /// views do not change. Runs inside the opening write transaction, so a crash leaves the
    /// directory as it was.
    ///
    /// The new hashes differ from the old ones (they commit to the salts), so a follower cannot
    /// be migrated apart from its leader: a follower's directory is refused, to be replicated
    /// again from the migrated leader.
    ///
    /// - Returns: how many bodies were rewritten.
    @discardableResult
    func migrateToValueCommitments(_ txn: Transaction) throws -> Int {
        if let leader = try txn.get(schema.meta, key: Array("replication-leader".utf8)) {
            throw LedgerError(.unsupportedFormat, "\(directory) is a follower of ledger \(String(decoding: leader, as: UTF8.self)), written by format 2; "
                + "format 3 commits to values through salted hashes, which a follower cannot compute apart from its leader: "
                + "move this directory away and start the follower again in an empty one (after its leader was migrated)")
        }
        var hashes: [UInt64: [UInt8]] = [:]  // stream id → its chain's latest hash, recomputed
        var names: [UInt64: StreamName] = [:]
        var rewritten = 0
        var next: UInt64 = 1
        while true {
            // A batch of rows read, then written (no cursor open across the writes).
            let rows: [(sequence: UInt64, value: [UInt8])] = try txn.withCursor(schema.log) { cursor in
                var rows: [(UInt64, [UInt8])] = []
                var pair = try cursor.seek(atLeast: .bigEndian(next))
                while let current = pair, rows.count < 4096 {
                    rows.append((current.key.bigEndianUInt64(), Array(current.value)))
                    pair = try cursor.next()
                }
                return rows
            }
            guard let last = rows.last else { break }
            for (sequence, value) in rows {
                let id = value.bigEndianUInt64()
                if names[id] == nil { names[id] = try streamName(txn, id: id) }
                let stream = names[id]!
                var body = Array(value[40...])
                if let version = body.first, version <= 2 {
                    let (entry, _) = try decodeEntry(value, sequence: sequence, stream: stream, txn: txn)
                    body = LogEntry.encodeBody(offset: entry.offset, time: entry.time, author: entry.author, device: entry.device, events: entry.events)
                    rewritten += 1
                }
                let hash = LogEntry.chainHash(previous: hashes[id] ?? LogEntry.genesisHash, stream: stream, body: body)
                hashes[id] = hash
                var row = ByteWriter(capacity: 40 + body.count)
                row.fixed64(id)
                row.raw(hash)
                row.raw(body)
                try txn.put(schema.log, key: .bigEndian(sequence), value: row.bytes)
            }
            next = last.sequence + 1
        }
        for (id, hash) in hashes {
            let stream = names[id]!
            guard let bytes = try txn.get(schema.streams, key: stream.key), var head = try? StreamHead(decoding: bytes) else {
                throw LedgerError(.corruptData, "the stream has entries but no head", stream: stream)
            }
            head.hash = hash
            try txn.put(schema.streams, key: stream.key, value: head.encoded())
        }
        // The Merkle tree over the entry hashes is derived: rebuilt on the next digest.
        try txn.removeAll(schema.merkle)
        _ = try txn.delete(schema.meta, key: Array("merkle-leaves".utf8))
        // Idempotency answers of UpdateRecords hold values; they stay (they are purged after
        // their retention, and a redaction deletes those of the streams it erases).
        return rewritten
    }
}
