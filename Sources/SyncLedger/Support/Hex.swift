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
