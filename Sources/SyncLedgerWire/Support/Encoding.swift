/// The project's one spelling of each encoding of bytes and durations as text and numbers:
/// hexadecimal, unpadded base64url, and durations in seconds or milliseconds.

/// Lower-case hexadecimal, the one spelling of bytes as text across SyncLedger (hashes, MACs,
/// message ids, keys' fingerprints).
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// `bytes` as two lower-case hex digits each.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Unpadded base64url (RFC 4648 §5) over bytes, without Foundation's string machinery: tokens
/// are checked on every write, so this is on the hot path.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    /// `bytes` as unpadded base64url text.
    public static func string(_ bytes: some Collection<UInt8>) -> String { String(decoding: encode(Array(bytes)), as: UTF8.self) }

    public static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= bytes.count {
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out.append(alphabet[Int(v >> 18)]); out.append(alphabet[Int(v >> 12 & 63)])
            out.append(alphabet[Int(v >> 6 & 63)]); out.append(alphabet[Int(v & 63)])
            i += 3
        }
        let rest = bytes.count - i
        if rest == 1 {
            let v = UInt32(bytes[i]) << 16
            out.append(alphabet[Int(v >> 18)]); out.append(alphabet[Int(v >> 12 & 63)])
        } else if rest == 2 {
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out.append(alphabet[Int(v >> 18)]); out.append(alphabet[Int(v >> 12 & 63)]); out.append(alphabet[Int(v >> 6 & 63)])
        }
        return out
    }

    /// Nil for a character outside the alphabet or an impossible length.
    public static func decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 3 / 4)
        var acc: UInt32 = 0
        var bits = 0
        for c in text {
            let v = values[Int(c)]
            guard v != 0xFF else { return nil }
            acc = acc << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero (a canonical encoding), so a token has one spelling.
        guard acc & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}

/// Durations as numbers, for logs, metrics and wire fields.
extension Duration {
    /// Whole milliseconds (saturating at Int64's bounds).
    public var milliseconds: Int64 {
        let c = components
        let (ms, overflow) = c.seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return c.seconds < 0 ? .min : .max }
        let (total, overflow2) = ms.addingReportingOverflow(c.attoseconds / 1_000_000_000_000_000)
        return overflow2 ? .max : total
    }

    /// Seconds, fractions included.
    public var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
