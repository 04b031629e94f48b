import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Temporary directories

/// A new empty directory under the system's temporary directory (`/tmp` unless `TMPDIR` says
/// otherwise), named after `label` so a leftover one says which benchmark made it.
public func makeScratchDirectory(_ label: String) throws -> String {
    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("syncledger-bench-\(label)-\(UUID().uuidString.prefix(8))")
        .path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Removes a directory made by ``makeScratchDirectory(_:)``; failures are ignored (a benchmark's
/// teardown has no one to report them to, and the directory is under the temporary directory).
public func removeScratchDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

// MARK: - Clocks

/// CPU time (user + system) of the whole process so far, in nanoseconds: every thread counts,
/// the ledger's writer thread included.
public func processCPUNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// A duration in seconds, as a `Double`.
public func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
}

/// Runs `body` and returns its result with the wall time it took in seconds.
public func timed<T>(_ body: () async throws -> T) async rethrows -> (T, Double) {
    let start = ContinuousClock.now
    let value = try await body()
    return (value, seconds(ContinuousClock.now - start))
}

// MARK: - Bytes

/// Big-endian bytes of `value`, as the ledger's keys are.
public func bigEndianBytes(_ value: UInt64) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian) { Array($0) }
}

/// Builds byte strings in the encodings of docs/storage-format.md (LEB128 varints, zig-zag
/// signed varints, length-prefixed strings), so raw-LMDB baselines store values of the sizes
/// the ledger stores, without reaching into the library's internals.
public struct ByteBuilder {
    /// The bytes so far.
    public private(set) var bytes: [UInt8]

    /// An empty builder with room for `capacity` bytes.
    public init(capacity: Int = 64) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// One byte.
    public mutating func byte(_ value: UInt8) { bytes.append(value) }

    /// An unsigned LEB128 varint.
    public mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    /// A signed value as a zig-zag varint.
    public mutating func signed(_ value: Int64) {
        varint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    /// A varint byte length followed by the UTF-8 bytes.
    public mutating func string(_ value: String) {
        varint(UInt64(value.utf8.count))
        bytes.append(contentsOf: value.utf8)
    }

    /// Bytes as they are.
    public mutating func raw(_ value: some Sequence<UInt8>) { bytes.append(contentsOf: value) }

    /// 8 big-endian bytes.
    public mutating func fixed64(_ value: UInt64) { raw(bigEndianBytes(value)) }
}

/// The number of bytes of `value` as an unsigned LEB128 varint.
public func varintSize(_ value: UInt64) -> Int {
    var v = value
    var size = 1
    while v >= 0x80 {
        v >>= 7
        size += 1
    }
    return size
}
