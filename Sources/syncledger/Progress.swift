import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Progress on a terminal (entries, bytes, rate, ETA); nothing when standard error is piped.
struct Progress {
    let total: UInt64?
    let started = Date()
    let enabled = isatty(STDERR_FILENO) == 1
    var lastDraw = Date.distantPast

    mutating func update(entries: UInt64, bytes: UInt64, force: Bool = false) {
        guard enabled, force || Date().timeIntervalSince(lastDraw) > 0.2 else { return }
        lastDraw = Date()
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        let rate = Double(entries) / elapsed
        var line = "\r\(entries) entries, \(bytes / 1024) KiB, \(Int(rate)) entries/s"
        if let total, total > entries, rate > 0 { line += ", ETA \(Int(Double(total - entries) / rate)) s" }
        FileHandle.standardError.write(Data((line + "   ").utf8))
    }

    func finish() {
        if enabled { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
