import Crypto
import LedgerStorage

/// A range of log entries packed for another ledger: one stream's entries, or a stretch of the
/// ledger-wide change feed, compressed with zstd and checksummed. See docs/segment-format.md.
///
/// Entries keep their stream name, offset, body and hash, so the receiver recomputes and checks
/// every hash chain; local stream ids and commit sequences are not carried as identities.
public struct Segment: Sendable, Equatable {
    /// What a segment covers.
    public enum Scope: Sendable, Equatable {
        /// Consecutive entries of one stream.
        case stream(StreamName)
        /// Entries of any streams in commit order.
        case feed
    }

    /// One entry as carried in a segment: its stream, offset and sequence, and its body
    /// exactly as hashed. Entries are made only by ``Segment/decode(_:dictionaries:)`` (which
    /// computes every hash from the previous one) and by a ledger's reads (its stored chain),
    /// so ``hash`` always follows from ``previous``, ``stream`` and ``body``.
    public struct Entry: Sendable, Equatable {
        /// The stream it belongs to.
        public let stream: StreamName
        /// Its commit sequence in the ledger that wrote the segment.
        public let sequence: UInt64
        /// Its offset in the stream (the dataset's sync count after it).
        public let offset: UInt64
        /// The hash of the entry before it in its stream (zeros before offset 1).
        public let previous: [UInt8]
        /// Its hash (the chain link): `SHA-256(previous ‖ stream ‖ body)`, not carried on the
        /// wire but recomputed from ``previous`` and the body.
        public let hash: [UInt8]
        /// The canonical body (offset, time, author, events) exactly as hashed — a slice of the
        /// buffer it was read from, which it keeps alive.
        public let body: ArraySlice<UInt8>

        init(stream: StreamName, sequence: UInt64, offset: UInt64, previous: [UInt8], hash: [UInt8], body: ArraySlice<UInt8>) {
            self.stream = stream
            self.sequence = sequence
            self.offset = offset
            self.previous = previous
            self.hash = hash
            self.body = body
        }

        /// The decoded entry (time, author, events), made from ``body`` on each call; its
        /// ``LogEntry/sequence`` is the one in the ledger that wrote the segment.
        ///
        /// - Throws: ``LedgerError`` `.corruptData` when the body does not decode — possible
        ///   only for an entry read from a damaged ledger, as decoding a segment checks every body.
        public var entry: LogEntry {
            get throws {
                var reader = ByteReader(body)
                do {
                    let decoded = try LogEntry.decodeBody(&reader)
                    try reader.expectEnd()
                    return LogEntry(stream: stream, offset: decoded.offset, sequence: sequence, time: decoded.time, author: decoded.author, device: decoded.device, events: decoded.events, hash: hash)
                } catch {
                    throw LedgerError(.corruptData, "the body of the entry at sequence \(sequence) does not decode: \(error)", stream: stream, offset: offset)
                }
            }
        }
    }

    /// Whether an entry belongs to a pool's `configuration` system stream (where dictionaries
    /// and pool settings live).
    var touchesConfiguration: Bool {
        entries.contains { $0.stream.identity == Ledger.systemIdentity && $0.stream.dataset.rawValue == "configuration" }
    }

    /// The file format version this code writes. It reads this one and version 1 (the same
    /// entries under a header of fixed-width fields).
    public static let formatVersion: UInt16 = 2
    static let magic = Array("SLSEG01\n".utf8)

    /// What the segment covers.
    public let scope: Scope
    /// For a stream segment: the hash before its first entry (zeros before offset 1).
    public let previousHash: [UInt8]
    /// The entries, in order.
    public let entries: [Entry]
    /// The zstd level it was (or will be) compressed with.
    public let compressionLevel: Int32
    /// The zstd dictionary to compress with (its id is written in the header), if any.
    public var dictionary: (id: UInt32, bytes: [UInt8])?
    /// Sizes of the encoded entries before and after compression (set by encode/decode).
    public internal(set) var uncompressedSize: UInt64 = 0
    /// See ``uncompressedSize``.
    public internal(set) var compressedSize: UInt64 = 0

    /// A segment of `entries`.
    public init(scope: Scope, previousHash: [UInt8] = LogEntry.genesisHash, entries: [Entry], compressionLevel: Int32 = 3) {
        self.scope = scope
        self.previousHash = previousHash
        self.entries = entries
        self.compressionLevel = compressionLevel
    }

    /// Segments are equal when they carry the same entries in the same scope.
    public static func == (a: Segment, b: Segment) -> Bool {
        a.scope == b.scope && a.previousHash == b.previousHash && a.entries == b.entries
    }

    /// Where each stream of a feed segment starts and ends within it, and the exact size of
    /// the entries' wire form.
    private struct Layout {
        /// Per entry: bit 0 — the first of its stream here; bit 1 — the last.
        var flags: [UInt8]
        var size: Int
    }

    private func layout() -> Layout {
        func varintSize(_ value: Int) -> Int { varintSize(UInt64(value)) }
        func varintSize(_ value: UInt64) -> Int { value < 0x80 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7 }
        var size = 0
        guard case .feed = scope else {
            for i in entries.indices {
                size += varintSize(entries[i].sequence) + varintSize(entries[i].body.count) + entries[i].body.count
            }
            return Layout(flags: [], size: size)
        }
        // Number the streams, then mark each stream's first and last entry.
        var numbering = StreamNumbering()
        var lastEntry: [Int] = []
        var flags = [UInt8](repeating: 0, count: entries.count)
        for i in entries.indices {
            let (ordinal, isNew) = numbering.ordinal(of: entries[i].stream)
            if isNew {
                lastEntry.append(i)
                flags[i] = 1
            }
            lastEntry[ordinal] = i
            let e = entries[i]
            size += varintSize(e.stream.key.count) + e.stream.key.count + 1
                + varintSize(e.sequence) + varintSize(e.body.count) + e.body.count
        }
        for i in lastEntry { flags[i] |= 2 }
        for f in flags { size += (f & 1 != 0 ? 32 : 0) + (f & 2 != 0 ? 32 : 0) }
        return Layout(flags: flags, size: size)
    }

    /// Writes the entries' wire form — the bytes that get compressed. Hashes are not carried
    /// (each one follows from the previous hash and the body), so a segment holds no
    /// incompressible bytes but the bodies' own. A stream segment's entries are `seq, body`; a
    /// feed segment's also name their stream, and carry the hash before the stream's first
    /// entry in the segment and the hash of its last (the anchor its recomputed chain must
    /// reach).
    private func writeEntries<Sink: EntrySink>(_ layout: Layout, to sink: inout Sink) throws {
        guard case .feed = scope else {
            for i in entries.indices {
                try sink.varint(entries[i].sequence)
                try sink.varint(UInt64(entries[i].body.count))
                try sink.raw(entries[i].body)
            }
            return
        }
        for (e, flags) in zip(entries, layout.flags) {
            let key = e.stream.key
            try sink.varint(UInt64(key.count))
            try sink.raw(key[...])
            try sink.byte(flags)
            if flags & 1 != 0 { try sink.raw(e.previous[...]) }
            if flags & 2 != 0 { try sink.raw(e.hash[...]) }
            try sink.varint(e.sequence)
            try sink.varint(UInt64(e.body.count))
            try sink.raw(e.body)
        }
    }

    /// The entries' wire form in one buffer (see ``writeEntries(_:to:)``).
    func plainBytes() -> [UInt8] {
        let layout = layout()
        var writer = ByteWriter(capacity: layout.size)
        try! writeEntries(layout, to: &writer)  // a ByteWriter does not throw
        return writer.bytes
    }

    /// The size of the entries' wire form before compression: the payload a segment carries.
    public var payloadSize: Int { layout().size }

    /// The file bytes: header, zstd-compressed entries, SHA-256 of everything before it. The
    /// entries stream through the compressor; their uncompressed form is never held whole.
    public func encoded() throws -> [UInt8] {
        let layout = layout()
        let frame: [UInt8]
        do {
            var sink = FrameSink(writer: try ZstdFrameWriter(level: compressionLevel, contentSize: layout.size, dictionary: dictionary?.bytes))
            try writeEntries(layout, to: &sink)
            frame = try sink.finish()
        } catch {
            throw LedgerError(.storage, "zstd could not compress a segment: \(error)", underlying: error)
        }
        let name: [UInt8]
        let scopeKind: UInt8
        switch scope {
        case .stream(let s): scopeKind = 1; name = s.key
        case .feed: scopeKind = 2; name = []
        }
        let fromGenesis = previousHash == LogEntry.genesisHash
        var w = ByteWriter(capacity: frame.count + 200 + name.count)
        w.raw(Self.magic)
        w.byte(UInt8(Self.formatVersion >> 8)); w.byte(UInt8(Self.formatVersion & 0xFF))
        w.byte(scopeKind)
        w.byte(UInt8(bitPattern: Int8(clamping: compressionLevel)))
        w.byte(fromGenesis ? 1 : 0)  // flags: 1 = the previous hash is zeros (not written)
        w.varint(UInt64(dictionary?.id ?? 0))
        w.varint(entries.first?.offset ?? 0)
        w.varint(entries.last?.offset ?? 0)
        w.varint(entries.first?.sequence ?? 0)
        w.varint(entries.last?.sequence ?? 0)
        w.varint(UInt64(entries.count))
        w.varint(UInt64(layout.size))
        w.varint(UInt64(frame.count))
        w.varint(UInt64(name.count))
        w.raw(name)
        if !fromGenesis { w.raw(previousHash) }
        w.raw(entries.last?.hash ?? previousHash)
        w.raw(frame)
        w.raw(ConcatenatingSHA256.digest(w.bytes[...]))
        return w.bytes
    }
}

/// Where ``Segment`` writes its entries' wire form: a buffer, or a compressor.
private protocol EntrySink {
    mutating func byte(_ value: UInt8) throws
    mutating func varint(_ value: UInt64) throws
    mutating func raw(_ bytes: ArraySlice<UInt8>) throws
}

extension ByteWriter: EntrySink {
    fileprivate mutating func raw(_ bytes: ArraySlice<UInt8>) throws { self.bytes.append(contentsOf: bytes) }
}

/// Feeds the wire form into a zstd frame through a staging buffer of 128 KiB.
private struct FrameSink: EntrySink {
    let writer: ZstdFrameWriter
    var staging: [UInt8]
    static let stagingSize = 128 << 10

    init(writer: ZstdFrameWriter) {
        self.writer = writer
        staging = []
        staging.reserveCapacity(Self.stagingSize + 1024)
    }

    mutating func byte(_ value: UInt8) throws {
        staging.append(value)
    }

    mutating func varint(_ value: UInt64) throws {
        if value < 0x80 {
            staging.append(UInt8(truncatingIfNeeded: value))
            return
        }
        var v = value
        while v >= 0x80 {
            staging.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        staging.append(UInt8(v))
    }

    mutating func raw(_ bytes: ArraySlice<UInt8>) throws {
        staging.append(contentsOf: bytes)
        if staging.count >= Self.stagingSize {
            try writer.compress(staging)
            staging.removeAll(keepingCapacity: true)
        }
    }

    consuming func finish() throws -> [UInt8] { try writer.finish(staging) }
}

/// Numbers the distinct streams of a run of entries in order of first appearance. Entries of one
/// stream mostly share one `StreamName` instance, so a name's bytes are hashed once per
/// instance, not once per entry.
struct StreamNumbering {
    private var byInstance: [ObjectIdentifier: Int] = [:]
    private var byName: [StreamName: Int] = [:]

    /// The ordinal of `stream`, and whether this is its first appearance.
    mutating func ordinal(of stream: StreamName) -> (ordinal: Int, isNew: Bool) {
        if let known = byInstance[stream.instanceID] { return (known, false) }
        let known = byName[stream]
        let ordinal = known ?? byName.count
        if known == nil { byName[stream] = ordinal }
        byInstance[stream.instanceID] = ordinal
        return (ordinal, known == nil)
    }
}
