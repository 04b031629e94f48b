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
    /// Whether a line was drawn (so `finish` ends it).
    var drawn = false
    /// Seconds before ``update(_:done:of:unit:)`` draws its first bar.
    var delay = 0.5

    init(total: UInt64?, delay: Double = 0.5) {
        self.total = total
        self.delay = delay
    }

    mutating func update(entries: UInt64, bytes: UInt64, force: Bool = false) {
        guard enabled, force || Date().timeIntervalSince(lastDraw) > 0.2 else { return }
        lastDraw = Date()
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        let rate = Double(entries) / elapsed
        var line = "\r\(entries) entries, \(bytes / 1024) KiB, \(Int(rate)) entries/s"
        if let total, total > entries, rate > 0 { line += ", ETA \(Int(Double(total - entries) / rate)) s" }
        FileHandle.standardError.write(Data((line + "   ").utf8))
        drawn = true
    }

    /// A bar for work of known size, `label [#####-----] 45% 9000/20000 entries, ETA 2 s`,
    /// drawn after ``delay`` (half a second: a quick command draws nothing), at most 5 times a second.
    mutating func update(_ label: String, done: UInt64, of total: UInt64, unit: String) {
        let now = Date()
        guard enabled, now.timeIntervalSince(started) >= delay, done >= total || now.timeIntervalSince(lastDraw) > 0.2 else { return }
        lastDraw = now
        let fraction = total == 0 ? 1 : min(1, Double(done) / Double(total))
        let width = 24
        let filled = Int(fraction * Double(width))
        var line = "\r\(label) [" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "]"
        line += " \(Int(fraction * 100))% \(done)/\(total) \(unit)"
        let rate = Double(done) / max(now.timeIntervalSince(started), 0.001)
        if total > done, rate > 0 { line += ", ETA \(Int(Double(total - done) / rate)) s" }
        FileHandle.standardError.write(Data((line + "   ").utf8))
        drawn = true
    }

    func finish() {
        if enabled, drawn { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
