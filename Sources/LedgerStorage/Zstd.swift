import CZstd

/// An error reported by zstd, with its message.
public struct ZstdError: Error, Sendable, CustomStringConvertible {
    /// zstd's error text (`ZSTD_getErrorName`) and where it happened.
    public let description: String
}

@inline(__always)
private func checkZstd(_ code: Int, _ what: String) throws(ZstdError) -> Int {
    if ZSTD_isError(code) != 0 {
        throw ZstdError(description: "\(what): \(String(cString: ZSTD_getErrorName(code)))")
    }
    return code
}

/// One-shot zstd compression and decompression of byte arrays, each call with its own context.
public enum Zstd {
    /// Compresses `input` as one zstd frame at `level` (1–19; 3 is zstd's default).
    public static func compress(_ input: [UInt8], level: Int32 = 3) throws -> [UInt8] {
        let bound = ZSTD_compressBound(input.count)
        var output = [UInt8](repeating: 0, count: bound)
        let written = try input.withUnsafeBytes { source in
            try output.withUnsafeMutableBytes { destination in
                try checkZstd(ZSTD_compress(destination.baseAddress, bound, source.baseAddress, source.count, level), "compress")
            }
        }
        output.removeSubrange(written...)
        return output
    }

    /// Decompresses one zstd frame, refusing output larger than `limit` bytes.
    public static func decompress(_ input: [UInt8], limit: Int) throws -> [UInt8] {
        let declared = input.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
        if declared == syncledger_zstd_content_size_error() {
            throw ZstdError(description: "decompress: not a zstd frame")
        }
        if declared == syncledger_zstd_content_size_unknown() || declared > UInt64(limit) {
            throw ZstdError(description: "decompress: frame size \(declared) unknown or over the limit \(limit)")
        }
        var output = [UInt8](repeating: 0, count: Int(declared))
        let written = try input.withUnsafeBytes { source in
            try output.withUnsafeMutableBytes { destination in
                try checkZstd(ZSTD_decompress(destination.baseAddress, destination.count, source.baseAddress, source.count), "decompress")
            }
        }
        output.removeSubrange(written...)
        return output
    }
}
