import CZstd

/// An error reported by zstd, with its message.
public struct ZstdError: Error, Sendable, CustomStringConvertible {
    /// zstd's error text (`ZSTD_getErrorName`) and where it happened.
    public let description: String
}

@inline(__always)
func checkZstd(_ code: Int, _ what: String) throws(ZstdError) -> Int {
    if ZSTD_isError(code) != 0 {
        throw ZstdError(description: "\(what): \(String(cString: ZSTD_getErrorName(code)))")
    }
    return code
}

/// One-shot zstd compression and decompression of byte arrays, each call with its own context.
public enum Zstd {
    /// Compresses `input` as one zstd frame at `level` (1–19; 3 is zstd's default).
    public static func compress(_ input: [UInt8], level: Int32 = 3) throws -> [UInt8] {
        try input.withUnsafeBytes { source in
            let bound = ZSTD_compressBound(source.count)
            return try [UInt8](unsafeUninitializedCapacity: bound) { destination, count in
                count = 0
                count = try checkZstd(ZSTD_compress(destination.baseAddress, bound, source.baseAddress, source.count, level), "compress")
            }
        }
    }

    /// Decompresses one zstd frame, refusing output larger than `limit` bytes.
    public static func decompress(_ input: [UInt8], limit: Int) throws -> [UInt8] {
        try decompress(input[...], limit: limit)
    }

    /// Decompresses one zstd frame held in a slice, refusing output larger than `limit` bytes.
    public static func decompress(_ input: ArraySlice<UInt8>, limit: Int) throws -> [UInt8] {
        try input.withUnsafeBytes { source in
            let size = try declaredSize(source, limit: limit)
            return try [UInt8](unsafeUninitializedCapacity: size) { destination, count in
                count = 0
                count = try checkZstd(ZSTD_decompress(destination.baseAddress, size, source.baseAddress, source.count), "decompress")
            }
        }
    }

    /// The content size a frame declares, checked against `limit`.
    static func declaredSize(_ source: UnsafeRawBufferPointer, limit: Int) throws -> Int {
        let declared = ZSTD_getFrameContentSize(source.baseAddress, source.count)
        if declared == syncledger_zstd_content_size_error() {
            throw ZstdError(description: "decompress: not a zstd frame")
        }
        if declared == syncledger_zstd_content_size_unknown() || declared > UInt64(limit) {
            throw ZstdError(description: "decompress: frame size \(declared) unknown or over the limit \(limit)")
        }
        return Int(declared)
    }
}

extension Zstd {
    /// Trains a dictionary (at most `capacity` bytes) from sample byte strings
    /// (`ZDICT_trainFromBuffer`). zstd wants many small samples: hundreds or more.
    ///
    /// - Throws: ``ZstdError`` when the samples are too few or too alike to train on.
    public static func trainDictionary(samples: [[UInt8]], capacity: Int = 16 << 10) throws -> [UInt8] {
        let joined = samples.flatMap { $0 }
        let sizes = samples.map { $0.count }
        var dictionary = [UInt8](repeating: 0, count: capacity)
        let written = try joined.withUnsafeBytes { source in
            try sizes.withUnsafeBufferPointer { sizePointer in
                try dictionary.withUnsafeMutableBytes { destination in
                    try checkZstd(ZDICT_trainFromBuffer(destination.baseAddress, capacity, source.baseAddress, sizePointer.baseAddress, UInt32(sizes.count)), "train a dictionary")
                }
            }
        }
        dictionary.removeSubrange(written...)
        return dictionary
    }

    /// The id a dictionary carries (0 for raw content that is not a zstd dictionary).
    public static func dictionaryID(_ dictionary: [UInt8]) -> UInt32 {
        dictionary.withUnsafeBytes { ZDICT_getDictID($0.baseAddress, $0.count) }
    }

    /// Compresses `input` as one frame with `dictionary` (`ZSTD_compress_usingDict`).
    public static func compress(_ input: [UInt8], level: Int32 = 3, dictionary: [UInt8]) throws -> [UInt8] {
        guard let context = ZSTD_createCCtx() else { throw ZstdError(description: "compress: out of memory") }
        defer { ZSTD_freeCCtx(context) }
        let bound = ZSTD_compressBound(input.count)
        var output = [UInt8](repeating: 0, count: bound)
        let written = try input.withUnsafeBytes { source in
            try dictionary.withUnsafeBytes { dict in
                try output.withUnsafeMutableBytes { destination in
                    try checkZstd(ZSTD_compress_usingDict(context, destination.baseAddress, bound, source.baseAddress, source.count, dict.baseAddress, dict.count, level), "compress with a dictionary")
                }
            }
        }
        output.removeSubrange(written...)
        return output
    }

    /// Decompresses one frame made with `dictionary`, refusing output over `limit` bytes.
    public static func decompress(_ input: [UInt8], limit: Int, dictionary: [UInt8]) throws -> [UInt8] {
        try decompress(input[...], limit: limit, dictionary: dictionary)
    }

    /// Decompresses one frame, held in a slice, made with `dictionary`, refusing output over
    /// `limit` bytes.
    public static func decompress(_ input: ArraySlice<UInt8>, limit: Int, dictionary: [UInt8]) throws -> [UInt8] {
        guard let context = ZSTD_createDCtx() else { throw ZstdError(description: "decompress: out of memory") }
        defer { ZSTD_freeDCtx(context) }
        return try input.withUnsafeBytes { source in
            let size = try declaredSize(source, limit: limit)
            return try dictionary.withUnsafeBytes { dict in
                try [UInt8](unsafeUninitializedCapacity: size) { destination, count in
                    count = 0
                    count = try checkZstd(ZSTD_decompress_usingDict(context, destination.baseAddress, size, source.baseAddress, source.count, dict.baseAddress, dict.count), "decompress with a dictionary")
                }
            }
        }
    }
}
