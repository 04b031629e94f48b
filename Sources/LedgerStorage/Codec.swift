/// Appends the binary forms used on disk: fixed big-endian integers (keys, so that byte order is
/// numeric order), LEB128 varints and length-prefixed UTF-8 strings (values).
package struct ByteWriter {
    package var bytes: [UInt8]

    package init(capacity: Int = 64) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    package mutating func byte(_ value: UInt8) { bytes.append(value) }

    package mutating func fixed64(_ value: UInt64) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    package mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    /// A signed value as a zig-zag varint.
    package mutating func signed(_ value: Int64) {
        varint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    package mutating func string(_ value: String) {
        var s = value
        s.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    package mutating func raw(_ value: some Sequence<UInt8>) { bytes.append(contentsOf: value) }
}

/// Why a stored or received byte string could not be decoded.
package struct DecodeFailure: Error, CustomStringConvertible {
    package let description: String
    package init(description: String) { self.description = description }
}

/// Reads what ``ByteWriter`` wrote; every read checks bounds and throws ``DecodeFailure``.
/// It reads an array or a slice of one (an entry inside a decompressed segment) without
/// copying; ``position`` counts from the start of what it reads.
package struct ByteReader {
    package let bytes: ArraySlice<UInt8>
    private var index: Int

    package init(_ bytes: [UInt8], position: Int = 0) {
        self.init(bytes[...], position: position)
    }

    package init(_ bytes: ArraySlice<UInt8>, position: Int = 0) {
        self.bytes = bytes
        self.index = bytes.startIndex + position
    }

    /// Bytes read so far.
    package var position: Int { index - bytes.startIndex }
    package var isAtEnd: Bool { index == bytes.endIndex }
    /// The bytes read from position `mark` up to the current one.
    package func slice(from mark: Int) -> ArraySlice<UInt8> { bytes[(bytes.startIndex + mark)..<index] }
    package var remaining: Int { bytes.endIndex - index }

    package mutating func byte() throws(DecodeFailure) -> UInt8 {
        guard index < bytes.endIndex else { throw DecodeFailure(description: "truncated at byte \(position)") }
        defer { index += 1 }
        return bytes[index]
    }

    package mutating func fixed64() throws(DecodeFailure) -> UInt64 {
        guard remaining >= 8 else { throw DecodeFailure(description: "truncated 64-bit integer at byte \(position)") }
        var value: UInt64 = 0
        for i in 0..<8 { value = value << 8 | UInt64(bytes[index + i]) }
        index += 8
        return value
    }

    package mutating func varint() throws(DecodeFailure) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let b = try byte()
            if shift == 63 && b > 1 { throw DecodeFailure(description: "varint overflows 64 bits at byte \(position - 1)") }
            result |= UInt64(b & 0x7f) << shift
            if b & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { throw DecodeFailure(description: "varint too long at byte \(position - 1)") }
        }
    }

    package mutating func signed() throws(DecodeFailure) -> Int64 {
        let raw = try varint()
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    package mutating func raw(_ count: Int) throws(DecodeFailure) -> ArraySlice<UInt8> {
        guard count >= 0, remaining >= count else {
            throw DecodeFailure(description: "truncated: \(count) bytes wanted at byte \(position), \(remaining) left")
        }
        defer { index += count }
        return bytes[index..<index + count]
    }

    package mutating func string() throws(DecodeFailure) -> String {
        let slice = try stringBytes()
        guard let s = utf8String(slice) else {
            throw DecodeFailure(description: "invalid UTF-8 at byte \(position - slice.count)")
        }
        return s
    }

    /// Checks a string as ``string()`` would read it, without making it: ASCII (the common
    /// case) in one pass, anything else by full UTF-8 validation.
    package mutating func skipString() throws(DecodeFailure) {
        let slice = try stringBytes()
        if !Bytes.isASCII(slice), String(validating: slice, as: UTF8.self) == nil {
            throw DecodeFailure(description: "invalid UTF-8 at byte \(position - slice.count)")
        }
    }

    /// The bytes of a string, checked as ``skipString()`` checks them.
    package mutating func checkedStringBytes() throws(DecodeFailure) -> ArraySlice<UInt8> {
        let slice = try stringBytes()
        if !Bytes.isASCII(slice), String(validating: slice, as: UTF8.self) == nil {
            throw DecodeFailure(description: "invalid UTF-8 at byte \(position - slice.count)")
        }
        return slice
    }

    private mutating func stringBytes() throws(DecodeFailure) -> ArraySlice<UInt8> {
        let count = try varint()
        guard count <= UInt64(remaining) else {
            throw DecodeFailure(description: "string of \(count) bytes overruns the buffer at byte \(position)")
        }
        return try raw(Int(count))
    }

    package func expectEnd() throws(DecodeFailure) {
        if !isAtEnd { throw DecodeFailure(description: "\(remaining) trailing bytes at byte \(position)") }
    }
}

/// `bytes` as a string if they are valid UTF-8: ASCII (the common case) by a word-at-a-time
/// check and no further validation, anything else validated in full.
package func utf8String(_ bytes: ArraySlice<UInt8>) -> String? {
    Bytes.isASCII(bytes) ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
}

extension Array where Element == UInt8 {
    /// `value` as 8 big-endian bytes.
    package static func bigEndian(_ value: UInt64) -> [UInt8] {
        var w = ByteWriter(capacity: 8)
        w.fixed64(value)
        return w.bytes
    }

    /// The first 8 bytes read as a big-endian integer (0 when shorter).
    package func bigEndianUInt64(at offset: Int = 0) -> UInt64 {
        guard count >= offset + 8 else { return 0 }
        var value: UInt64 = 0
        for i in 0..<8 { value = value << 8 | UInt64(self[offset + i]) }
        return value
    }
}
