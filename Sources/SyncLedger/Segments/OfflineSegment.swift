import Foundation

extension Segment {
    /// A device's changes made on top of sync count `base`, as the stream segment
    /// `POST /segments?mode=offline` takes (``Ledger/mergeOffline(_:deviceID:caller:sessionToken:partial:)``):
    /// each batch one entry, at offsets `base + 1`…, chained from `previousHash` (the hash of the
    /// device's entry at `base` if it keeps one; else zeros, and the server applies the Cognito rule
    /// per record instead of a fast-forward). The server takes only the events: it writes its own
    /// entries with its time and the authenticated caller.
    ///
    /// - Parameters:
    ///   - author: what the device calls itself (the server replaces it with the caller).
    ///   - device: the device id.
    ///   - batches: each entry's time (the default device time of its events) and events.
    public static func offlineChanges(stream: StreamName, base: UInt64, author: String, device: String?,
                                      batches: [(time: Timestamp, events: [Event])], previousHash: [UInt8] = LogEntry.genesisHash) -> Segment {
        var previous = previousHash
        var entries: [Entry] = []
        for (i, batch) in batches.enumerated() {
            let offset = base + UInt64(i) + 1
            let body = LogEntry.encodeBody(offset: offset, time: batch.time, author: author, device: device, events: batch.events)
            let hash = LogEntry.chainHash(previous: previous, stream: stream, body: body)
            entries.append(Entry(stream: stream, sequence: UInt64(i) + 1, offset: offset, previous: previous, hash: hash, body: body[...]))
            previous = hash
        }
        return Segment(scope: .stream(stream), previousHash: previousHash, entries: entries)
    }
}
