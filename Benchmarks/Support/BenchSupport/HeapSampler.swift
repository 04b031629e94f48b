import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Samples the process's anonymous resident memory (`RssAnon` in `/proc/self/status`: heap,
/// stacks, anonymous maps) every couple of milliseconds on a thread of its own, and keeps the
/// largest value seen.
///
/// Resident memory as a whole (`VmRSS`, what the benchmark package's built-in peak measures) also
/// counts the pages of LMDB's memory-mapped data file that a scan touched: page cache, not memory
/// the process allocated, and it grows with the size of the ledger read. Anonymous memory is what
/// "bounded memory" is about. On systems without `/proc` every reading is 0.
public final class HeapSampler: Sendable {
    private let peak = Atomic<Int>(0)
    private let running = Atomic<Bool>(true)
    private let stopped = DispatchSemaphore(value: 0)
    /// Anonymous resident bytes when sampling started.
    public let startBytes: Int

    /// Starts sampling every `intervalMicroseconds`.
    public init(intervalMicroseconds: UInt32 = 2_000) {
        let start = Self.anonymousResidentBytes()
        startBytes = start
        peak.store(start, ordering: .relaxed)
        let thread = Thread { [self] in
            while running.load(ordering: .relaxed) {
                let now = Self.anonymousResidentBytes()
                if now > peak.load(ordering: .relaxed) { peak.store(now, ordering: .relaxed) }
                usleep(intervalMicroseconds)
            }
            stopped.signal()
        }
        thread.name = "bench-heap-sampler"
        thread.start()
    }

    /// Takes a last sample, stops the thread and returns the peak in bytes.
    public func stop() -> Int {
        running.store(false, ordering: .relaxed)
        stopped.wait()
        let now = Self.anonymousResidentBytes()
        return max(peak.load(ordering: .relaxed), now)
    }

    /// `RssAnon` of this process in bytes, or 0 when it cannot be read.
    public static func anonymousResidentBytes() -> Int {
        let fd = open("/proc/self/status", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return 0 }
        let label = Array("RssAnon:".utf8)
        var i = 0
        while i + label.count < count {
            if buffer[i] == label[0], Array(buffer[i..<i + label.count]) == label {
                var j = i + label.count
                var kilobytes = 0
                while j < count, buffer[j] == 0x20 || buffer[j] == 0x09 { j += 1 }
                while j < count, buffer[j] >= 0x30, buffer[j] <= 0x39 {
                    kilobytes = kilobytes * 10 + Int(buffer[j] - 0x30)
                    j += 1
                }
                return kilobytes * 1024
            }
            // Skip to the next line.
            while i < count, buffer[i] != 0x0A { i += 1 }
            i += 1
        }
        return 0
    }

    /// Hands freed heap memory back to the system where the C library allows it (glibc's
    /// `malloc_trim`), so memory freed by a benchmark's setup does not count as its peak.
    public static func releaseFreedMemory() {
        #if canImport(Glibc)
        // <malloc.h> is not part of the Glibc module: look the function up (RTLD_DEFAULT).
        typealias MallocTrim = @convention(c) (Int) -> Int32
        if let symbol = dlsym(nil, "malloc_trim") {
            _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
        }
        #endif
    }
}
