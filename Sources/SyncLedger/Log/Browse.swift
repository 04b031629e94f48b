import LedgerStorage

/// One dataset stream listed by ``Ledger/browseStreams(pool:identity:after:limit:)``.
public struct BrowsedStream: Hashable, Sendable {
    /// The dataset.
    public let stream: StreamName
    /// Its sync count (the offset of its last entry).
    public let syncCount: UInt64
}

extension Ledger {
    /// Every pool that holds a stream, in id order (one seek per pool).
    public func browsePools() throws -> [IdentityPoolID] {
        try poolsWithStreams()
    }

    /// Up to `limit` Cognito datasets of `pool` (of one identity when `identity` is given), in
    /// name order, after the stream `after` names (nil: from the first). SyncLedger's own
    /// streams (a pool's system stream, an identity's reserved datasets) are left out. One read
    /// transaction; the work follows `limit` and the internal streams skipped, never the
    /// pool's size.
    public func browseStreams(pool: IdentityPoolID, identity: IdentityID? = nil, after: StreamName? = nil, limit: Int = 500) throws -> [BrowsedStream] {
        let prefix = StreamName.prefix(pool: pool, identity: identity)
        return try read { txn in
            var result: [BrowsedStream] = []
            try forEachStream(txn, prefix: prefix, from: after.map { $0.key + [0] }) { stream, head in
                if !stream.isInternal { result.append(BrowsedStream(stream: stream, syncCount: head.offset)) }
                return result.count < limit
            }
            return result
        }
    }
}

extension Ledger {
    /// The sync count of `stream` (the offset of its last entry).
    /// - Throws: ``LedgerError`` `.notFound` when the dataset has no entries.
    public func browseStreamHead(_ stream: StreamName) throws -> UInt64 {
        try existingHead(stream).offset
    }
}
