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

    /// One entry as carried in a segment.
    public struct Entry: Sendable, Equatable {
        /// The stream it belongs to.
        public let stream: StreamName
        /// Its commit sequence in the ledger that wrote the segment.
        public let sequence: UInt64
        /// The hash of the entry before it in its stream (zeros before offset 1).
        public let previous: [UInt8]
        /// Its hash (the chain link): `SHA-256(previous ‖ stream ‖ body)`, not carried on the
        /// wire but recomputed from ``previous`` and the body.
        public let hash: [UInt8]
        /// The canonical body (offset, time, author, events) exactly as hashed.
        public let body: [UInt8]
        /// The decoded entry.
        public let entry: LogEntry
    }

    /// The file format version this code reads and writes.
    public static let formatVersion: UInt16 = 1
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

    /// An entry's wire form. Hashes are not carried — each one follows from the previous hash
    /// and the body — so a segment holds no incompressible bytes but the bodies' own. A stream
    /// segment's entries are `seq, body`; a feed segment's name their stream and, the first
    /// time a stream appears, the hash before that entry.
    static func entryBytes(_ e: Entry, feed: Bool, firstOfStream: Bool, lastOfStream: Bool = false) -> [UInt8] {
        var w = ByteWriter(capacity: e.body.count + 96)
        if feed {
            let name = e.stream.key
            w.varint(UInt64(name.count))
            w.raw(name)
            w.byte((firstOfStream ? 1 : 0) | (lastOfStream ? 2 : 0))
            if firstOfStream { w.raw(e.previous) }
            if lastOfStream { w.raw(e.hash) }  // the anchor its recomputed chain must reach
        }
        w.varint(e.sequence)
        w.varint(UInt64(e.body.count))
        w.raw(e.body)
        return w.bytes
    }

    /// The file bytes: header, zstd-compressed entries, SHA-256 of everything before it.
    public func encoded() throws -> [UInt8] {
        var plain = ByteWriter(capacity: entries.reduce(0) { $0 + $1.body.count + 80 })
        var seen = Set<StreamName>()
        let isFeed = scope == .feed
        var lastIndex: [StreamName: Int] = [:]
        if isFeed { for (i, e) in entries.enumerated() { lastIndex[e.stream] = i } }
        for (i, e) in entries.enumerated() {
            plain.raw(Self.entryBytes(e, feed: isFeed, firstOfStream: seen.insert(e.stream).inserted, lastOfStream: lastIndex[e.stream] == i))
        }
        let compressed: [UInt8]
        do {
            if let dictionary {
                compressed = try Zstd.compress(plain.bytes, level: compressionLevel, dictionary: dictionary.bytes)
            } else {
                compressed = try Zstd.compress(plain.bytes, level: compressionLevel)
            }
        } catch {
            throw LedgerError(.storage, "zstd could not compress a segment: \(error)", underlying: error)
        }
        var w = ByteWriter(capacity: compressed.count + 200)
        w.raw(Self.magic)
        w.byte(UInt8(Self.formatVersion >> 8)); w.byte(UInt8(Self.formatVersion & 0xFF))
        let name: [UInt8]
        switch scope {
        case .stream(let s): w.byte(1); name = s.key
        case .feed: w.byte(2); name = []
        }
        w.byte(UInt8(bitPattern: Int8(clamping: compressionLevel)))
        w.fixed64(UInt64(dictionary?.id ?? 0))  // dictionary id (0: none), 8 bytes
        w.fixed64(entries.first?.entry.offset ?? 0)
        w.fixed64(entries.last?.entry.offset ?? 0)
        w.fixed64(entries.first?.sequence ?? 0)
        w.fixed64(entries.last?.sequence ?? 0)
        w.fixed64(UInt64(entries.count))
        w.fixed64(UInt64(plain.bytes.count))
        w.fixed64(UInt64(compressed.count))
        w.byte(UInt8(name.count >> 8)); w.byte(UInt8(name.count & 0xFF))
        w.raw(name)
        w.raw(previousHash)
        w.raw(entries.last?.hash ?? previousHash)
        w.raw(compressed)
        w.raw(SHA256.hash(data: w.bytes))
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
        guard bytes.count >= magic.count + 100 + 32 else { throw fail("truncated: \(bytes.count) bytes is shorter than any segment") }
        guard Array(bytes.prefix(magic.count)) == magic else { throw fail("not a SyncLedger segment (bad magic)") }
        let body = bytes.prefix(bytes.count - 32)
        guard Array(SHA256.hash(data: body)) == Array(bytes.suffix(32)) else {
            throw fail("checksum mismatch: the file is damaged or truncated")
        }
        var r = ByteReader(Array(body), position: magic.count)
        do {
            let version = UInt16(try r.byte()) << 8 | UInt16(try r.byte())
            guard version == formatVersion else {
                throw LedgerError(.unsupportedFormat, "segment format version \(version); this SyncLedger reads version \(formatVersion)")
            }
            let scopeKind = try r.byte()
            let level = Int32(Int8(bitPattern: try r.byte()))
            let dictionaryID = try r.fixed64()
            var dictionary: [UInt8]?
            if dictionaryID != 0 {
                guard dictionaryID <= UInt64(UInt32.max), let found = dictionaries(UInt32(dictionaryID)) else {
                    throw fail("it names zstd dictionary \(dictionaryID), which this ledger does not have")
                }
                dictionary = found
            }
            let firstOffset = try r.fixed64(), lastOffset = try r.fixed64()
            let firstSequence = try r.fixed64(), lastSequence = try r.fixed64()
            let count = try r.fixed64()
            let plainSize = try r.fixed64(), compressedSize = try r.fixed64()
            let nameLength = Int(try r.byte()) << 8 | Int(try r.byte())
            let name = Array(try r.raw(nameLength))
            let previous = Array(try r.raw(32))
            let lastHash = Array(try r.raw(32))
            guard compressedSize == UInt64(r.remaining) else {
                throw fail("the header says \(compressedSize) compressed bytes, the file holds \(r.remaining)")
            }
            guard plainSize <= maxUncompressedSize else { throw fail("declares \(plainSize) uncompressed bytes, over the limit \(maxUncompressedSize)") }
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
                let frame = Array(try r.raw(r.remaining))
                plain = try dictionary.map { try Zstd.decompress(frame, limit: Int(plainSize), dictionary: $0) } ?? Zstd.decompress(frame, limit: Int(plainSize))
            } catch let error as LedgerError {
                throw error
            } catch {
                throw fail("the compressed entries do not decompress: \(error)")
            }
            guard plain.count == Int(plainSize) else { throw fail("decompressed to \(plain.count) bytes, the header says \(plainSize)") }
            var er = ByteReader(plain)
            var entries: [Entry] = []
            var heads: [StreamName: (offset: UInt64?, hash: [UInt8])] = [:]
            if case .stream(let s) = scope { heads[s] = (firstOffset &- 1, previous) }
            var anchored = Set<StreamName>()
            var anchor: [UInt8]?
            while !er.isAtEnd {
                guard UInt64(entries.count) < count else { throw fail("holds more entries than the \(count) its header says") }
                let index = entries.count
                let stream: StreamName
                if case .stream(let s) = scope {
                    stream = s
                } else {
                    let keyLength = try er.varint()
                    guard keyLength <= 512 else { throw fail("entry \(index): stream name of \(keyLength) bytes") }
                    do { stream = try StreamName(key: Array(try er.raw(Int(keyLength)))) } catch { throw fail("entry \(index): bad stream name") }
                    let flags = try er.byte()
                    guard flags & ~3 == 0, !anchored.contains(stream) else { throw fail("entry \(index): bad flags, or \(stream) goes on after its last entry") }
                    switch (flags & 1, heads[stream]) {
                    case (1, nil): heads[stream] = (nil, Array(try er.raw(32)))
                    case (0, .some): break
                    default: throw fail("entry \(index): the previous hash of \(stream) is missing or repeated")
                    }
                    if flags & 2 != 0 {
                        anchor = Array(try er.raw(32))
                        anchored.insert(stream)
                    }
                }
                let sequence = try er.varint()
                if let last = entries.last, sequence <= last.sequence {
                    throw fail("entry \(index): commit sequence \(sequence) does not follow \(last.sequence)")
                }
                let bodyLength = try er.varint()
                guard bodyLength <= UInt64(er.remaining) else { throw fail("entry \(index): body overruns the segment") }
                let entryBody = Array(try er.raw(Int(bodyLength)))
                var br = ByteReader(entryBody)
                let decoded = try LogEntry.decodeBody(&br)
                try br.expectEnd()
                let head = heads[stream]!
                if let offset = head.offset, decoded.offset != offset &+ 1 {
                    throw fail("entry \(index) of \(stream) has offset \(decoded.offset) after \(offset): a gap")
                }
                if decoded.offset == 1, head.hash != LogEntry.genesisHash {
                    throw fail("entry \(index) (\(stream) offset 1) does not start from the empty chain")
                }
                let hash = LogEntry.chainHash(previous: head.hash, stream: stream, body: entryBody)
                if let expected = anchor {
                    guard expected == hash else { throw fail("entry \(index) (\(stream) offset \(decoded.offset)): the hash chain breaks") }
                    anchor = nil
                }
                heads[stream] = (decoded.offset, hash)
                let entry = LogEntry(stream: stream, offset: decoded.offset, sequence: sequence, time: decoded.time, author: decoded.author, events: decoded.events, hash: hash)
                entries.append(Entry(stream: stream, sequence: sequence, previous: head.hash, hash: hash, body: entryBody, entry: entry))
            }
            guard UInt64(entries.count) == count else { throw fail("holds \(entries.count) entries; its header says \(count)") }
            if case .feed = scope, anchored.count != heads.count {
                throw fail("a stream's chain in it has no anchoring last hash")
            }
            guard (entries.last?.hash ?? previous) == lastHash else {
                throw fail("the hash chain of its entries does not end at the hash its header names")
            }
            if let first = entries.first, let last = entries.last {
                guard first.sequence == firstSequence, last.sequence == lastSequence else { throw fail("the sequence range in the header does not match its entries") }
                guard first.entry.offset == firstOffset, last.entry.offset == lastOffset else {
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
}
