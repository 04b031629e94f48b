import Foundation
import LedgerStorage
import SyncLedgerWire

/// The body of `POST /segments?mode=offline`: a device's changes on top of sync count `base`
/// as a stream segment of one entry (docs/segment-format.md, format version 2), written here
/// rather than by the domain's `Segment` so that the client links only the wire vocabulary and
/// the storage layer (for zstd and the hashes).
///
/// The server takes only the events of such a segment and writes its own entries (its time, the
/// authenticated caller), so the entry is the simplest the server reads: a body of version 1
/// (no device) or 2 (a device) with its values inline, hashed as it is, chained from the zero
/// hash (the server then applies the Cognito rule per record rather than a fast-forward).
enum OfflineSegment {
    /// The zstd level (zstd's default).
    static let compressionLevel: Int32 = 3

    /// The segment of `patches` as one entry at offset `base + 1` (a nil value removes its
    /// record; a patch's device time goes with its event).
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` for a name the server would refuse;
    ///   a `ZstdError` when compressing fails.
    static func encode(stream: StreamName, base: UInt64, patches: [RecordPatch], author: String, device: String?, time: Timestamp) throws -> [UInt8] {
        let offset = base + 1
        var body = ByteWriter(capacity: 64 + patches.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.utf8.count ?? 0) + 16 })
        body.byte(device == nil ? 1 : 2)
        body.varint(offset)
        body.signed(time.milliseconds)
        body.string(author)
        if let device { body.string(device) }
        body.varint(UInt64(patches.count))
        for patch in patches {
            let deviceTime = patch.deviceLastModified.map(Timestamp.init)
            if let value = patch.value {
                body.byte(deviceTime == nil ? 1 : 4)  // a put
                body.string(patch.key)
                body.string(value)
            } else {
                body.byte(deviceTime == nil ? 2 : 5)  // a removal
                body.string(patch.key)
            }
            if let deviceTime { body.signed(deviceTime.milliseconds) }
        }
        let genesis = [UInt8](repeating: 0, count: 32)
        var chain = ConcatenatingSHA256()
        let hash = chain.digest(genesis, lengthPrefixed: stream.key, body.bytes[...])

        // A stream segment's entries: sequence, body length, body.
        var plain = ByteWriter(capacity: body.bytes.count + 12)
        plain.varint(1)
        plain.varint(UInt64(body.bytes.count))
        plain.raw(body.bytes)
        let frame = try Zstd.compress(plain.bytes, level: compressionLevel)

        let name = stream.key
        var w = ByteWriter(capacity: frame.count + 128 + name.count)
        w.raw(Array("SLSEG01\n".utf8))
        w.byte(0); w.byte(2)                 // format version 2
        w.byte(1)                            // scope: one stream
        w.byte(UInt8(compressionLevel))
        w.byte(1)                            // flags: the previous hash is zeros (not written)
        for field: UInt64 in [0, offset, offset, 1, 1, 1, UInt64(plain.bytes.count), UInt64(frame.count), UInt64(name.count)] {
            w.varint(field)                  // dictionary, offsets, sequences, entries, sizes, name length
        }
        w.raw(name)
        w.raw(hash)                          // the hash of the last entry
        w.raw(frame)
        w.raw(ConcatenatingSHA256.digest(w.bytes[...]))
        return w.bytes
    }
}
