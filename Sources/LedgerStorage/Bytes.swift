import Crypto
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Byte-string helpers for the hot paths above the storage layer (segments, merge, the change
// feed): hashing byte strings into a `Hasher`, dictionary keys over slices of a larger buffer,
// and SHA-256 over several parts without a copy per part. They live here because they need
// raw buffer access, which only this layer uses.

extension Hasher {
    /// Feeds the bytes of `bytes` (and its length) in one call — `Array`'s own `hash(into:)`
    /// feeds them one element at a time, several times slower for keys of a few dozen bytes.
    @inlinable
    public mutating func combine(contentsOf bytes: ArraySlice<UInt8>) {
        combine(bytes.count)
        bytes.withUnsafeBytes { combine(bytes: $0) }
    }

    /// Feeds the UTF-8 bytes of `string` (and their count) in one call.
    public mutating func combine(utf8Of string: String) {
        var s = string
        s.withUTF8 { utf8 in
            combine(utf8.count)
            combine(bytes: UnsafeRawBufferPointer(utf8))
        }
    }

    /// See ``combine(contentsOf:)-(ArraySlice<UInt8>)``.
    @inlinable
    public mutating func combine(contentsOf bytes: [UInt8]) {
        combine(bytes.count)
        bytes.withUnsafeBytes { combine(bytes: $0) }
    }
}

/// Comparisons of byte strings at memory speed.
public enum Bytes {
    /// Whether `a` and `b` hold the same bytes (`memcmp`).
    public static func equal(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 }
        }
    }

    /// Whether `a` and `b` have the same UTF-8 bytes (unlike `==` on `String`, which also
    /// equates canonically equivalent strings).
    public static func equalUTF8(_ a: String, _ b: String) -> Bool {
        var x = a, y = b
        return x.withUTF8 { p in
            y.withUTF8 { q in p.count == q.count && (p.count == 0 || memcmp(p.baseAddress!, q.baseAddress!, p.count) == 0) }
        }
    }

    /// Whether the UTF-8 bytes of `a` sort before those of `b` (byte order, shorter first on a
    /// common prefix).
    public static func lessUTF8(_ a: String, _ b: String) -> Bool {
        var x = a, y = b
        return x.withUTF8 { p in
            y.withUTF8 { q in
                let common = min(p.count, q.count)
                let order = common == 0 ? 0 : memcmp(p.baseAddress!, q.baseAddress!, common)
                return order != 0 ? order < 0 : p.count < q.count
            }
        }
    }

    /// Whether every byte of `bytes` is ASCII (below 0x80), eight bytes at a time.
    public static func isASCII(_ bytes: ArraySlice<UInt8>) -> Bool {
        bytes.withUnsafeBytes { raw in
            var i = 0
            var any: UInt64 = 0
            while i + 8 <= raw.count {
                any |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                i += 8
            }
            while i < raw.count {
                any |= UInt64(raw[i])
                i += 1
            }
            return any & 0x8080_8080_8080_8080 == 0
        }
    }
}

/// A dictionary key over bytes — typically a slice of a larger buffer, so a lookup allocates
/// nothing — compared byte for byte and hashed in one call.
public struct ByteKey: Hashable, Sendable {
    /// The bytes.
    public let bytes: ArraySlice<UInt8>

    /// A key over `bytes`.
    @inlinable
    public init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    /// A key over all of `bytes`.
    @inlinable
    public init(_ bytes: [UInt8]) { self.bytes = bytes[...] }

    @inlinable
    public static func == (a: ByteKey, b: ByteKey) -> Bool { Bytes.equal(a.bytes, b.bytes) }

    @inlinable
    public func hash(into hasher: inout Hasher) { hasher.combine(contentsOf: bytes) }
}

/// SHA-256 over several byte strings as if concatenated, through one reusable buffer: one hash
/// call per digest however many parts, and no allocation but the returned digest once the
/// buffer has grown.
public struct ConcatenatingSHA256: Sendable {
    private var buffer: [UInt8] = []

    /// A hasher with an empty buffer.
    public init() {}

    /// The 32-byte SHA-256 digest of `a ‖ varint(b.count) ‖ b ‖ c`: the shape of a hash-chain
    /// link (previous hash, length-prefixed name, body).
    public mutating func digest(_ a: [UInt8], lengthPrefixed b: [UInt8], _ c: ArraySlice<UInt8>) -> [UInt8] {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(contentsOf: a)
        var length = UInt64(b.count)
        while length >= 0x80 {
            buffer.append(UInt8(truncatingIfNeeded: length) | 0x80)
            length >>= 7
        }
        buffer.append(UInt8(length))
        buffer.append(contentsOf: b)
        buffer.append(contentsOf: c)
        return Self.digest(buffer[...])
    }

    /// The 32-byte SHA-256 digest of `bytes`.
    public static func digest(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        bytes.withUnsafeBytes { raw in
            var hasher = SHA256()
            hasher.update(bufferPointer: raw)
            return hasher.finalize().withUnsafeBytes { Array($0) }
        }
    }
}
