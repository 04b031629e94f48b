import Crypto
import LedgerStorage

extension Segment {
    /// The largest uncompressed body a segment may declare (a decoder refuses more; a server
    /// sets a lower bound per caller).
    public static let maxUncompressedSize: UInt64 = 256 << 20

    /// What a segment's header says, read without checking the checksum and without
    /// decompressing anything: enough to decide whether to read the rest — who may send a
    /// segment of this scope, and how large it unpacks.
    public struct Header: Sendable {
        /// The file format version (1 or 2).
        public let version: UInt16
        /// What it covers.
        public let scope: Scope
        /// The zstd level it was compressed with.
        public let compressionLevel: Int32
        /// The zstd dictionary it names (0: none).
        public let dictionaryID: UInt64
        /// First and last entries' offsets and commit sequences, and the entry count.
        public let firstOffset: UInt64, lastOffset: UInt64, firstSequence: UInt64, lastSequence: UInt64, count: UInt64
        /// The size of the entries once decompressed, as declared.
        public let uncompressedSize: UInt64
        /// The size of the compressed entries.
        public let compressedSize: UInt64
        /// The hash before its first entry (a stream segment), and the hash its chain ends at.
        public let previousHash: [UInt8], lastHash: [UInt8]
        /// Where the compressed entries start in the file.
        let payloadStart: Int
    }

    private static func failure(_ message: String) -> LedgerError { LedgerError(.invalidParameter, "segment refused: \(message)") }

    /// Reads a segment's header: magic, version, and every field up to the compressed entries.
    ///
    /// - Throws: ``LedgerError`` `.invalidParameter` saying what is wrong; `.unsupportedFormat`
    ///   for a format version this code does not read.
    public static func readHeader(_ bytes: [UInt8]) throws -> Header {
        let fail = failure
        guard bytes.count >= magic.count + 2 + 32 + 32 else { throw fail("truncated: \(bytes.count) bytes is shorter than any segment") }
        guard bytes.prefix(magic.count).elementsEqual(magic) else { throw fail("not a SyncLedger segment (bad magic)") }
        var r = ByteReader(bytes[..<(bytes.count - 32)], position: magic.count)
        do {
            let version = UInt16(try r.byte()) << 8 | UInt16(try r.byte())
            guard version == 1 || version == formatVersion else {
                throw LedgerError(.unsupportedFormat, "segment refused: format version \(version); this SyncLedger reads versions 1 to \(formatVersion)")
            }
            let scopeKind = try r.byte()
            let level = Int32(Int8(bitPattern: try r.byte()))
            let flags = version == 1 ? 0 : try r.byte()
            guard flags & ~1 == 0 else { throw fail("unknown header flags \(flags)") }
            // Version 1: fixed 8-byte big-endian fields and a 2-byte name length; version 2:
            // varints, and no previous hash when it is zeros.
            func number() throws(DecodeFailure) -> UInt64 { version == 1 ? try r.fixed64() : try r.varint() }
            let dictionaryID = try number()
            guard dictionaryID <= UInt64(UInt32.max) else { throw fail("it names zstd dictionary \(dictionaryID), which no ledger has") }
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
            return Header(version: version, scope: scope, compressionLevel: level, dictionaryID: dictionaryID,
                          firstOffset: firstOffset, lastOffset: lastOffset, firstSequence: firstSequence, lastSequence: lastSequence, count: count,
                          uncompressedSize: plainSize, compressedSize: compressedSize, previousHash: previous, lastHash: lastHash, payloadStart: r.position)
        } catch let failure as DecodeFailure {
            throw fail("malformed: \(failure)")
        }
    }

    /// Decodes and checks a segment: magic, version, checksum, sizes, every entry, and every
    /// hash chain inside it (a stream segment's first entry against ``previousHash``).
    ///
    /// - Parameters:
    ///   - dictionaries: finds a zstd dictionary by the id a segment names.
    ///   - maxUncompressedSize: refuse a segment that declares more (at most
    ///     ``maxUncompressedSize``), before decompressing anything.
    ///   - admit: sees the header first — before the checksum is computed or anything is
    ///     decompressed — and may refuse (who may send this scope).
    /// - Throws: ``LedgerError`` `.invalidParameter` saying which check failed and where;
    ///   `.unsupportedFormat` for a newer format version; what `admit` throws.
    public static func decode(_ bytes: [UInt8], dictionaries: (UInt32) -> [UInt8]? = { _ in nil },
                              maxUncompressedSize limit: UInt64 = Segment.maxUncompressedSize,
                              admit: (Header) throws -> Void = { _ in }) throws -> Segment {
        let fail = failure
        let header = try readHeader(bytes)
        try admit(header)
        let bound = min(limit, maxUncompressedSize)
        guard header.uncompressedSize <= bound else { throw fail("declares \(header.uncompressedSize) uncompressed bytes, over the limit \(bound)") }
        guard ConcatenatingSHA256.digest(bytes[..<(bytes.count - 32)]).elementsEqual(bytes.suffix(32)) else {
            throw fail("checksum mismatch: the file is damaged or truncated")
        }
        var dictionary: [UInt8]?
        if header.dictionaryID != 0 {
            guard let found = dictionaries(UInt32(header.dictionaryID)) else {
                throw fail("it names zstd dictionary \(header.dictionaryID), which this ledger does not have")
            }
            dictionary = found
        }
        let plainSize = Int(header.uncompressedSize)
        let plain: [UInt8]
        do {
            let frame = bytes[header.payloadStart..<(bytes.count - 32)]
            plain = try dictionary.map { try Zstd.decompress(frame, limit: plainSize, dictionary: $0) } ?? Zstd.decompress(frame, limit: plainSize)
        } catch let error as LedgerError {
            throw error
        } catch {
            throw fail("the compressed entries do not decompress: \(error)")
        }
        guard plain.count == plainSize else { throw fail("decompressed to \(plain.count) bytes, the header says \(plainSize)") }
        let entries: [Entry]
        do {
            entries = try decodeEntries(plain, scope: header.scope, previous: header.previousHash, firstOffset: header.firstOffset, count: header.count, fail: fail)
        } catch let failure as DecodeFailure {
            throw fail("malformed: \(failure)")
        }
        guard (entries.last?.hash ?? header.previousHash) == header.lastHash else {
            throw fail("the hash chain of its entries does not end at the hash its header names")
        }
        if let first = entries.first, let last = entries.last {
            guard first.sequence == header.firstSequence, last.sequence == header.lastSequence else { throw fail("the sequence range in the header does not match its entries") }
            guard first.offset == header.firstOffset, last.offset == header.lastOffset else {
                throw fail("the offset range in the header does not match its entries")
            }
        }
        var segment = Segment(scope: header.scope, previousHash: header.previousHash, entries: entries, compressionLevel: header.compressionLevel)
        segment.dictionary = dictionary.map { (UInt32(header.dictionaryID), $0) }
        segment.uncompressedSize = header.uncompressedSize
        segment.compressedSize = header.compressedSize
        return segment
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
            let (offset, _, canonical) = try LogEntry.checkBody(&br)
            try br.expectEnd()
            let chain = chains[c]
            if let head = chain.offset, offset != head &+ 1 {
                throw fail("entry \(index) of \(chain.stream) has offset \(offset) after \(head): a gap")
            }
            if offset == 1, chain.hash != LogEntry.genesisHash {
                throw fail("entry \(index) (\(chain.stream) offset 1) does not start from the empty chain")
            }
            // The chain commits to the canonical bytes: each value present through its commitment.
            let hash = hasher.digest(chain.hash, lengthPrefixed: chain.stream.key, canonical[...])
            if let expected = anchor {
                guard expected == hash else { throw fail("entry \(index) (\(chain.stream) offset \(offset)): the hash chain breaks") }
                anchor = nil
            }
            entries.append(Entry(stream: chain.stream, sequence: sequence, offset: offset, previous: chain.hash, hash: hash, body: entryBody))
            chains[c].offset = offset
            chains[c].hash = hash
        }
        guard UInt64(entries.count) == count else { throw fail("holds \(entries.count) entries; its header says \(count)") }
        if case .feed = scope, chains.contains(where: { !$0.anchored }) {
            throw fail("a stream's chain in it has no anchoring last hash")
        }
        return entries
    }
}
