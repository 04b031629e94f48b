import Crypto
import LedgerStorage

/// The stored entry body and what the hash chain commits to (docs/storage-format.md).
///
/// Bodies of versions 1 and 2 (formats 1-2) carry values inline and are hashed as stored.
/// Versions 3 (no device) and 4 (device), written since format 3, are hashed in a *canonical*
/// form where each put's value is replaced by its salted commitment `SHA-256(salt ‖ value)`; the
/// stored form carries the salts and values, so a redaction can erase a value — keeping its
/// commitment — and the chain still verifies. Salts come from one random 16-byte seed per entry
/// (`salt_i = SHA-256(seed ‖ varint i)[0..<16]` for the entry's i-th put, so an entry costs 17
/// bytes, not 16 per value); an entry with an erased value stores each put's salt, or the
/// commitment of an erased one, instead of the seed.
extension LogEntry {
    /// Body versions this code reads.
    static let bodyVersions: ClosedRange<UInt8> = 1...4

    /// Bytes of an entry's seed and of a value's salt.
    static let saltLength = 16

    /// The salted commitment of a value: `SHA-256(salt ‖ UTF-8 value)`.
    static func commitment(salt: some Collection<UInt8>, value: some Collection<UInt8>) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: Array(salt))
        hasher.update(data: Array(value))
        return Array(hasher.finalize())
    }

    /// The salt of an entry's `index`-th put (from 0) under its seed.
    static func salt(seed: some Collection<UInt8>, index: Int) -> [UInt8] {
        var w = ByteWriter(capacity: 10)
        w.varint(UInt64(index))
        var hasher = SHA256()
        hasher.update(data: Array(seed))
        hasher.update(data: w.bytes)
        return Array(hasher.finalize().prefix(saltLength))
    }

    /// The stored body of a new entry (version 3 or 4, seeded with fresh random bytes).
    /// - Precondition: no `.erased` event (a write never holds one; `validateChange` refuses it).
    static func encodeBody(offset: UInt64, time: Timestamp, author: String, device: String? = nil, events: [Event]) -> [UInt8] {
        encodeStoredBody(offset: offset, time: time, author: author, device: device, events: events).body
    }

    /// See ``encodeBody(offset:time:author:device:events:)``; also the canonical bytes the chain
    /// hashes, made on the way.
    static func encodeStoredBody(offset: UInt64, time: Timestamp, author: String, device: String? = nil,
                                 events: [Event]) -> (body: [UInt8], canonical: [UInt8]) {
        var valueBytes = 0
        for case .put(_, let value, _) in events { valueBytes += value.utf8.count + 4 }
        let capacity = 32 + author.utf8.count + (device?.utf8.count ?? 0) + events.count * 24
        var header = ByteWriter(capacity: capacity)
        header.byte(device == nil ? 3 : 4)
        header.varint(offset)
        header.signed(time.milliseconds)
        header.string(author)
        if let device { header.string(device) }
        var random = SystemRandomNumberGenerator()
        var seed = [UInt8](repeating: 0, count: saltLength)
        for i in stride(from: 0, to: saltLength, by: 8) {
            withUnsafeBytes(of: random.next() as UInt64) { seed.replaceSubrange(i..<i + 8, with: $0) }
        }
        var w = ByteWriter(capacity: capacity + valueBytes + 17)
        w.raw(header.bytes)
        w.byte(0)  // seeded
        w.raw(seed)
        var canonical = header
        w.varint(UInt64(events.count))
        canonical.varint(UInt64(events.count))
        var puts = 0
        for event in events {
            switch event {
            case .put(let key, let value, let device):
                let kind: UInt8 = device == nil ? 6 : 7
                w.byte(kind); canonical.byte(kind)
                w.string(key); canonical.string(key)
                w.string(value)
                canonical.raw(commitment(salt: salt(seed: seed, index: puts), value: value.utf8))
                puts += 1
                if let device { w.signed(device.milliseconds); canonical.signed(device.milliseconds) }
            case .remove(let key, let device):
                let kind: UInt8 = device == nil ? 2 : 5
                w.byte(kind); canonical.byte(kind)
                w.string(key); canonical.string(key)
                if let device { w.signed(device.milliseconds); canonical.signed(device.milliseconds) }
            case .deleteDataset:
                w.byte(3); canonical.byte(3)
            case .erased:
                preconditionFailure("an erased value cannot be written; validateChange refuses it")
            }
        }
        return (w.bytes, canonical.bytes)
    }

    /// Decodes a stored body (any version), its values included: an erased value becomes an
    /// ``Event/erased(key:deviceModified:)``.
    static func decodeBody(_ reader: inout ByteReader) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, author: String, device: String?, events: [Event]) {
        var events: [Event]? = []
        var none: ByteWriter?
        let head = try walkBody(&reader, events: &events, canonical: &none)
        return (head.offset, head.time, head.author ?? "", head.device, events ?? [])
    }

    /// The offset of a body, read without checking the rest of it (a stored body, passed through).
    static func peekOffset(_ reader: inout ByteReader) throws(DecodeFailure) -> UInt64 {
        let version = try reader.byte()
        guard bodyVersions.contains(version) else { throw DecodeFailure(description: "unknown entry body version \(version)") }
        return try reader.varint()
    }

    /// The offset and time of a body, read without checking the rest of it.
    static func peekOffsetAndTime(_ body: ArraySlice<UInt8>) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp) {
        var reader = ByteReader(body)
        let offset = try peekOffset(&reader)
        return (offset, Timestamp(milliseconds: try reader.signed()))
    }

    /// The head of a stored body — offset, time, author, device — read without its events.
    static func decodeHead(_ body: ArraySlice<UInt8>) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, author: String, device: String?) {
        var reader = ByteReader(body)
        let version = try reader.byte()
        guard bodyVersions.contains(version) else { throw DecodeFailure(description: "unknown entry body version \(version)") }
        let offset = try reader.varint()
        let time = Timestamp(milliseconds: try reader.signed())
        let author = try reader.string()
        let device = version == 2 || version == 4 ? try reader.string() : nil
        return (offset, time, author, device)
    }

    /// Checks a body as ``decodeBody(_:)`` would decode it — the same checks, every string's
    /// UTF-8 included — without making its strings and events, and returns its offset, time
    /// and the canonical bytes its hash commits to (a value present is bound to the hash
    /// through them: a body whose value was altered no longer chains).
    static func checkBody(_ reader: inout ByteReader) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, canonical: [UInt8]) {
        var none: [Event]?
        var canonical: ByteWriter? = ByteWriter(capacity: 128)
        let start = reader.position
        let head = try walkBody(&reader, events: &none, canonical: &canonical)
        return (head.offset, head.time, canonical.map(\.bytes) ?? Array(reader.slice(from: start)))
    }

    /// What the live event stream needs of a body — its offset, device and whether it deletes
    /// the dataset — read with the same checks as ``decodeBody(_:)``, without making its keys
    /// and values.
    static func summarizeBody(_ reader: inout ByteReader) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, device: String?, deletesDataset: Bool) {
        var none: [Event]?
        var noCanonical: ByteWriter?
        let head = try walkBody(&reader, events: &none, canonical: &noCanonical, readDevice: true)
        return (head.offset, head.time, head.device, head.deletesDataset)
    }

    /// The bytes the chain hashes for a stored body: a version 1-2 body itself, a version 3-4
    /// body's canonical form.
    static func canonicalBytes(_ body: ArraySlice<UInt8>) throws(DecodeFailure) -> ArraySlice<UInt8> {
        guard let version = body.first, version >= 3 else { return body }
        var reader = ByteReader(body)
        return try checkBody(&reader).canonical[...]
    }

    /// `SHA-256(previousHash ‖ len(name) ‖ name ‖ canonical bytes of body)`. A body that does
    /// not decode is hashed as stored (its hash then cannot match; decoding reports why).
    static func chainHash(previous: [UInt8], stream: StreamName, body: ArraySlice<UInt8>) -> [UInt8] {
        chainHash(previous: previous, stream: stream, canonical: (try? canonicalBytes(body)) ?? body)
    }

    /// See ``chainHash(previous:stream:body:)-(_,_,ArraySlice<UInt8>)``.
    static func chainHash(previous: [UInt8], stream: StreamName, body: [UInt8]) -> [UInt8] {
        chainHash(previous: previous, stream: stream, body: body[...])
    }

    /// The chain hash over canonical bytes already made.
    static func chainHash(previous: [UInt8], stream: StreamName, canonical: ArraySlice<UInt8>) -> [UInt8] {
        var hasher = ConcatenatingSHA256()
        return hasher.digest(previous, lengthPrefixed: stream.key, canonical)
    }

    /// A version 3-4 body with the values of the puts whose key `erase` selects erased: each
    /// put then stores its own salt (or, erased, its commitment) instead of the entry's seed,
    /// so its canonical bytes — and its hash — do not change. Nil when nothing new is erased
    /// (no such put, or all already erased).
    /// - Throws: a `DecodeFailure` for a body that does not decode, or one of version 1-2 (its
    ///   hash commits to the values themselves: it cannot be erased in place).
    static func erasingValues(_ body: ArraySlice<UInt8>, where erase: (String) -> Bool) throws(DecodeFailure) -> (body: [UInt8], erased: Int)? {
        guard let version = body.first, version >= 3 else {
            throw DecodeFailure(description: "a body of version \(body.first ?? 0) carries its values inline and cannot be erased in place")
        }
        var reader = ByteReader(body)
        var none: [Event]?
        var noCanonical: ByteWriter?
        var parts: [PutParts]? = []
        let head = try walkBody(&reader, events: &none, canonical: &noCanonical, puts: &parts)
        guard let puts = parts, let header = head.header else { return nil }
        let doomed = puts.map { $0.commitment == nil && erase($0.key) }
        guard doomed.contains(true) else { return nil }
        var w = ByteWriter(capacity: body.count)
        w.raw(header.prefix)
        w.byte(1)  // explicit salts
        var position = header.eventsStart  // from the event count on, copied around the puts
        for (put, doom) in zip(puts, doomed) {
            w.raw(body[position..<put.valueStart])
            if let commitment = put.commitment {
                w.byte(0); w.raw(commitment)
            } else if doom {
                w.byte(0); w.raw(commitment(salt: put.salt!, value: put.value!))
            } else {
                w.byte(1); w.raw(put.salt!); w.varint(UInt64(put.value!.count)); w.raw(put.value!)
            }
            position = put.valueEnd
        }
        w.raw(body[position...])
        return (w.bytes, doomed.filter { $0 }.count)
    }

    /// Where a version 3-4 put sits in its body, for ``erasingValues(_:where:)``.
    struct PutParts {
        var key: String
        /// Its salt and value, when present; its commitment, when erased.
        var salt: [UInt8]?
        var value: ArraySlice<UInt8>?
        var commitment: [UInt8]?
        /// The stored value part: `[flag ‖ salt ‖] value` or `flag ‖ commitment`.
        var valueStart: Int
        var valueEnd: Int
    }

    /// The one reader of the body format. With `events` non-nil it makes the author and every
    /// event; with nil it only checks them (and makes the device if `readDevice`). With
    /// `canonical` non-nil it writes a version 3-4 body's canonical bytes there (and sets it to
    /// nil for a version 1-2 body, which is its own canonical form). With `puts` non-nil it
    /// records where each put is.
    private static func walkBody(_ reader: inout ByteReader, events: inout [Event]?, canonical: inout ByteWriter?, readDevice: Bool = false) throws(DecodeFailure)
        -> (offset: UInt64, time: Timestamp, author: String?, device: String?, deletesDataset: Bool, header: (prefix: ArraySlice<UInt8>, eventsStart: Int)?) {
        var noPuts: [PutParts]?
        return try walkBody(&reader, events: &events, canonical: &canonical, readDevice: readDevice, puts: &noPuts)
    }

    private static func walkBody(_ reader: inout ByteReader, events: inout [Event]?, canonical: inout ByteWriter?, readDevice: Bool = false,
                                 puts: inout [PutParts]?) throws(DecodeFailure)
        -> (offset: UInt64, time: Timestamp, author: String?, device: String?, deletesDataset: Bool, header: (prefix: ArraySlice<UInt8>, eventsStart: Int)?) {
        let start = reader.position
        let version = try reader.byte()
        guard bodyVersions.contains(version) else { throw DecodeFailure(description: "unknown entry body version \(version)") }
        let offset = try reader.varint()
        guard offset >= 1 else { throw DecodeFailure(description: "offset 0") }
        let time = Timestamp(milliseconds: try reader.signed())
        let make = events != nil
        var author: String?
        var device: String?
        if make { author = try reader.string() } else { try reader.skipString() }
        if version == 2 || version == 4 {
            if make || readDevice { device = try reader.string() } else { try reader.skipString() }
        }
        let committed = version >= 3
        if !committed { canonical = nil }
        let prefix = reader.slice(from: start)
        var seed: ArraySlice<UInt8>?
        if committed {
            canonical?.raw(prefix)
            switch try reader.byte() {
            case 0: seed = try reader.raw(saltLength)
            case 1: seed = nil
            case let salting: throw DecodeFailure(description: "unknown salting \(salting)")
            }
        }
        let eventsStart = reader.bytes.startIndex + reader.position
        let countMark = reader.position
        var deletesDataset = false
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw DecodeFailure(description: "event count \(count) exceeds the entry's size") }
        canonical?.raw(reader.slice(from: countMark))
        if make { events!.reserveCapacity(Int(count)) }
        var putIndex = 0
        for _ in 0..<count {
            let eventMark = reader.position
            let kind = try reader.byte()
            switch kind {
            case 1, 4:
                guard !committed else { throw DecodeFailure(description: "an inline value in a body of version \(version)") }
                if make {
                    let key = try reader.string()
                    let value = try reader.string()
                    let device = kind == 4 ? Timestamp(milliseconds: try reader.signed()) : nil
                    events!.append(.put(key: key, value: value, deviceModified: device))
                } else {
                    try reader.skipString()
                    try reader.skipString()
                    if kind == 4 { _ = try reader.signed() }
                }
            case 6, 7:
                guard committed else { throw DecodeFailure(description: "a committed value in a body of version \(version)") }
                let keyMark = reader.position
                let key: String? = make || puts != nil ? try reader.string() : nil
                if key == nil { try reader.skipString() }
                let keyBytes = reader.slice(from: keyMark)
                let valueStart = reader.bytes.startIndex + reader.position
                var salt: [UInt8]?
                var value: ArraySlice<UInt8>?
                var commitment: [UInt8]?
                if let seed {
                    if canonical != nil || puts != nil { salt = LogEntry.salt(seed: seed, index: putIndex) }
                    value = try reader.checkedStringBytes()
                } else {
                    switch try reader.byte() {
                    case 1:
                        salt = Array(try reader.raw(saltLength))
                        value = try reader.checkedStringBytes()
                    case 0:
                        commitment = Array(try reader.raw(32))
                    case let flag:
                        throw DecodeFailure(description: "unknown value flag \(flag) for put \(putIndex + 1)")
                    }
                }
                let valueEnd = reader.bytes.startIndex + reader.position
                let deviceMark = reader.position
                let device = kind == 7 ? Timestamp(milliseconds: try reader.signed()) : nil
                if canonical != nil {
                    canonical!.byte(kind)
                    canonical!.raw(keyBytes)
                    canonical!.raw(commitment ?? LogEntry.commitment(salt: salt!, value: value!))
                    canonical!.raw(reader.slice(from: deviceMark))
                }
                if make {
                    if let value {
                        events!.append(.put(key: key!, value: utf8String(value) ?? "", deviceModified: device))
                    } else {
                        events!.append(.erased(key: key!, deviceModified: device))
                    }
                }
                puts?.append(PutParts(key: key!, salt: salt, value: value, commitment: commitment, valueStart: valueStart, valueEnd: valueEnd))
                putIndex += 1
            case 2, 5:
                if make {
                    let key = try reader.string()
                    let device = kind == 5 ? Timestamp(milliseconds: try reader.signed()) : nil
                    events!.append(.remove(key: key, deviceModified: device))
                } else {
                    try reader.skipString()
                    if kind == 5 { _ = try reader.signed() }
                }
                canonical?.raw(reader.slice(from: eventMark))
            case 3:
                deletesDataset = true
                if make { events!.append(.deleteDataset) }
                canonical?.raw(reader.slice(from: eventMark))
            default:
                throw DecodeFailure(description: "unknown event kind \(kind)")
            }
        }
        return (offset, time, author, device, deletesDataset, committed ? (prefix, eventsStart) : nil)
    }
}
