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

/// Compresses input handed over in pieces into one zstd frame of a size declared up front
/// (`ZSTD_compressStream2`). The caller stages its input in buffers of its own (say 128 KiB, reused) and
/// hands each one over full, so a large frame never needs its whole input in one buffer.
public final class ZstdFrameWriter {
    private let context: OpaquePointer
    private var chunk: [UInt8]
    private var output: [UInt8]
    private let declared: Int
    private var consumed = 0

    /// A writer of a frame of exactly `contentSize` input bytes at `level`, with `dictionary`
    /// if given.
    public init(level: Int32, contentSize: Int, dictionary: [UInt8]? = nil) throws {
        guard let context = ZSTD_createCCtx() else { throw ZstdError(description: "compress: out of memory") }
        self.context = context
        chunk = [UInt8](repeating: 0, count: ZSTD_CStreamOutSize())
        output = []
        output.reserveCapacity(contentSize / 8 + 1024)
        declared = contentSize
        // On a throw from here on, deinit frees the context.
        _ = try checkZstd(ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level), "compression level")
        _ = try checkZstd(ZSTD_CCtx_setPledgedSrcSize(context, UInt64(contentSize)), "content size")
        if let dictionary {
            try dictionary.withUnsafeBytes { dict in
                _ = try checkZstd(ZSTD_CCtx_loadDictionary(context, dict.baseAddress, dict.count), "load dictionary")
            }
        }
    }

    deinit { ZSTD_freeCCtx(context) }

    /// Compresses the next piece of input.
    public func compress(_ input: [UInt8]) throws {
        try compress(input, end: false)
    }

    /// Compresses the last piece of input (possibly empty), ends the frame, and returns it.
    /// - Throws: ``ZstdError`` when the input was not exactly the declared size.
    public func finish(_ input: [UInt8] = []) throws -> [UInt8] {
        try compress(input, end: true)
        defer { output = [] }
        return output
    }

    private func compress(_ piece: [UInt8], end: Bool) throws {
        consumed += piece.count
        guard !end || consumed == declared else {
            throw ZstdError(description: "compress: \(consumed) bytes given for a frame declared as \(declared)")
        }
        let context = self.context
        try piece.withUnsafeBytes { source in
            var input = ZSTD_inBuffer(src: source.baseAddress, size: source.count, pos: 0)
            while true {
                let (remaining, produced) = try chunk.withUnsafeMutableBytes { destination -> (Int, Int) in
                    var out = ZSTD_outBuffer(dst: destination.baseAddress, size: destination.count, pos: 0)
                    let remaining = try checkZstd(ZSTD_compressStream2(context, &out, &input, end ? ZSTD_e_end : ZSTD_e_continue), "compress")
                    return (remaining, out.pos)
                }
                output.append(contentsOf: chunk[..<produced])
                if end ? remaining == 0 : input.pos == input.size { break }
            }
        }
    }
}
