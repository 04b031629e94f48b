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
    public private(set) var uncompressedSize: UInt64 = 0
    /// See ``uncompressedSize``.
    public private(set) var compressedSize: UInt64 = 0

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

    /// The largest uncompressed body a segment may declare (a decoder refuses more).
    public static let maxUncompressedSize: UInt64 = 256 << 20

    /// Decodes and checks a segment: magic, version, checksum, sizes, every entry, and every
    /// hash chain inside it (a stream segment's first entry against ``previousHash``).
    ///
    /// - Throws: ``LedgerError`` `.invalidParameter` saying which check failed and where;
    ///   `.unsupportedFormat` for a newer format version.
    ///
    /// - Parameter dictionaries: finds a zstd dictionary by the id a segment names.
    public static func decode(_ bytes: [UInt8], dictionaries: (UInt32) -> [UInt8]? = { _ in nil }) throws -> Segment {
        func fail(_ message: String) -> LedgerError { LedgerError(.invalidParameter, "segment refused: \(message)") }
        guard bytes.count >= magic.count + 2 + 32 + 32 else { throw fail("truncated: \(bytes.count) bytes is shorter than any segment") }
        guard bytes.prefix(magic.count).elementsEqual(magic) else { throw fail("not a SyncLedger segment (bad magic)") }
        let body = bytes[..<(bytes.count - 32)]
        guard ConcatenatingSHA256.digest(body).elementsEqual(bytes.suffix(32)) else {
            throw fail("checksum mismatch: the file is damaged or truncated")
        }
        var r = ByteReader(body, position: magic.count)
        do {
            let version = UInt16(try r.byte()) << 8 | UInt16(try r.byte())
            guard version == 1 || version == formatVersion else {
                throw LedgerError(.unsupportedFormat, "segment format version \(version); this SyncLedger reads versions 1 to \(formatVersion)")
            }
            let scopeKind = try r.byte()
            let level = Int32(Int8(bitPattern: try r.byte()))
            let flags = version == 1 ? 0 : try r.byte()
            guard flags & ~1 == 0 else { throw fail("unknown header flags \(flags)") }
            // Version 1: fixed 8-byte big-endian fields and a 2-byte name length; version 2:
            // varints, and no previous hash when it is zeros.
            func number() throws(DecodeFailure) -> UInt64 { version == 1 ? try r.fixed64() : try r.varint() }
            let dictionaryID = try number()
            var dictionary: [UInt8]?
            if dictionaryID != 0 {
                guard dictionaryID <= UInt64(UInt32.max), let found = dictionaries(UInt32(dictionaryID)) else {
                    throw fail("it names zstd dictionary \(dictionaryID), which this ledger does not have")
                }
                dictionary = found
            }
            let firstOffset = try number(), lastOffset = try number()
            let firstSequence = try number(), lastSequence = try number()
            let count = try number()
            let plainSize = try number(), compressedSize = try number()
            let nameLength = version == 1 ? UInt64(try r.byte()) << 8 | UInt64(try r.byte()) : try r.varint()
            guard nameLength <= 1024 else { throw fail("a stream name of \(nameLength) bytes") }
            let name = Array(try r.raw(Int(nameLength)))
            let previous = flags & 1 != 0 ? LogEntry.genesisHash : Array(try r.raw(32))
            let lastHash = Array(try r.raw(32))
            guard compressedSize == UInt64(r.remaining) else {
                throw fail("the header says \(compressedSize) compressed bytes, the file holds \(r.remaining)")
            }
            guard plainSize <= maxUncompressedSize else { throw fail("declares \(plainSize) uncompressed bytes, over the limit \(maxUncompressedSize)") }
            // Every entry takes at least two bytes (a sequence and a body length).
            guard count <= plainSize / 2 + 1 else { throw fail("declares \(count) entries in \(plainSize) bytes") }
            let scope: Scope
            switch scopeKind {
            case 1:
                do { scope = .stream(try StreamName(key: name)) } catch { throw fail("bad stream name in the header") }
            case 2:
                guard name.isEmpty else { throw fail("a feed segment names a stream") }
                scope = .feed
            default: throw fail("unknown scope \(scopeKind)")
            }
            let plain: [UInt8]
            do {
                let frame = try r.raw(r.remaining)
                plain = try dictionary.map { try Zstd.decompress(frame, limit: Int(plainSize), dictionary: $0) } ?? Zstd.decompress(frame, limit: Int(plainSize))
            } catch let error as LedgerError {
                throw error
            } catch {
                throw fail("the compressed entries do not decompress: \(error)")
            }
            guard plain.count == Int(plainSize) else { throw fail("decompressed to \(plain.count) bytes, the header says \(plainSize)") }
            let entries = try decodeEntries(plain, scope: scope, previous: previous, firstOffset: firstOffset, count: count, fail: fail)
            guard (entries.last?.hash ?? previous) == lastHash else {
                throw fail("the hash chain of its entries does not end at the hash its header names")
            }
            if let first = entries.first, let last = entries.last {
                guard first.sequence == firstSequence, last.sequence == lastSequence else { throw fail("the sequence range in the header does not match its entries") }
                guard first.offset == firstOffset, last.offset == lastOffset else {
                    throw fail("the offset range in the header does not match its entries")
                }
            }
            var segment = Segment(scope: scope, previousHash: previous, entries: entries, compressionLevel: level)
            segment.dictionary = dictionary.map { (UInt32(dictionaryID), $0) }
            segment.uncompressedSize = plainSize
            segment.compressedSize = compressedSize
            return segment
        } catch let failure as DecodeFailure {
            throw fail("malformed: \(failure)")
        }
    }

    /// Reads the decompressed entries: framing, every body (checked, not decoded), and every
    /// hash chain, recomputed from the previous hash (a stream segment's first entry from the
    /// header's) and checked against the anchors it carries.
    private static func decodeEntries(_ plain: [UInt8], scope: Scope, previous: [UInt8], firstOffset: UInt64, count: UInt64,
                                      fail: (String) -> LedgerError) throws -> [Entry] {
        /// What is known of one stream of the segment while reading it.
        struct Chain {
            let stream: StreamName
            var offset: UInt64?
            var hash: [UInt8]
            var anchored = false
            var time: Timestamp?
        }
        var er = ByteReader(plain)
        var entries: [Entry] = []
        entries.reserveCapacity(min(Int(count), plain.count / 7))
        var chains: [Chain] = []
        var chainOfKey: [ByteKey: Int] = [:]
        if case .stream(let s) = scope { chains.append(Chain(stream: s, offset: firstOffset &- 1, hash: previous)) }
        var anchor: [UInt8]?
        var hasher = ConcatenatingSHA256()
        var lastSequence: UInt64?
        while !er.isAtEnd {
            guard UInt64(entries.count) < count else { throw fail("holds more entries than the \(count) its header says") }
            let index = entries.count
            var c = 0
            if case .feed = scope {
                let keyLength = try er.varint()
                guard keyLength <= 512 else { throw fail("entry \(index): stream name of \(keyLength) bytes") }
                let key = try er.raw(Int(keyLength))
                let flags = try er.byte()
                guard flags & ~3 == 0 else { throw fail("entry \(index): bad flags \(flags)") }
                if let known = chainOfKey[ByteKey(key)] {
                    c = known
                    guard flags & 1 == 0 else { throw fail("entry \(index): the previous hash of \(chains[c].stream) is repeated") }
                    guard !chains[c].anchored else { throw fail("entry \(index): \(chains[c].stream) goes on after its last entry") }
                } else {
                    let stream: StreamName
                    do { stream = try StreamName(key: key) } catch { throw fail("entry \(index): bad stream name") }
                    guard flags & 1 != 0 else { throw fail("entry \(index): the previous hash of \(stream) is missing") }
                    c = chains.count
                    chains.append(Chain(stream: stream, offset: nil, hash: Array(try er.raw(32))))
                    chainOfKey[ByteKey(key)] = c
                }
                if flags & 2 != 0 {
                    anchor = Array(try er.raw(32))
                    chains[c].anchored = true
                }
            }
            let sequence = try er.varint()
            if let last = lastSequence, sequence <= last {
                throw fail("entry \(index): commit sequence \(sequence) does not follow \(last)")
            }
            lastSequence = sequence
            let bodyLength = try er.varint()
            guard bodyLength <= UInt64(er.remaining) else { throw fail("entry \(index): body overruns the segment") }
            let entryBody = try er.raw(Int(bodyLength))
            var br = ByteReader(entryBody)
            let (offset, time) = try LogEntry.checkBody(&br)
            try br.expectEnd()
            let chain = chains[c]
            if let head = chain.offset, offset != head &+ 1 {
                throw fail("entry \(index) of \(chain.stream) has offset \(offset) after \(head): a gap")
            }
            if let previous = chain.time, time < previous {
                throw fail("entry \(index) of \(chain.stream) (offset \(offset)): its time is before the previous entry's; time only moves forward in a stream")
            }
            if offset == 1, chain.hash != LogEntry.genesisHash {
                throw fail("entry \(index) (\(chain.stream) offset 1) does not start from the empty chain")
            }
            let hash = hasher.digest(chain.hash, lengthPrefixed: chain.stream.key, entryBody)
            if let expected = anchor {
                guard expected == hash else { throw fail("entry \(index) (\(chain.stream) offset \(offset)): the hash chain breaks") }
                anchor = nil
            }
            entries.append(Entry(stream: chain.stream, sequence: sequence, offset: offset, previous: chain.hash, hash: hash, body: entryBody))
            chains[c].offset = offset
            chains[c].hash = hash
            chains[c].time = time
        }
        guard UInt64(entries.count) == count else { throw fail("holds \(entries.count) entries; its header says \(count)") }
        if case .feed = scope, chains.contains(where: { !$0.anchored }) {
            throw fail("a stream's chain in it has no anchoring last hash")
        }
        return entries
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
