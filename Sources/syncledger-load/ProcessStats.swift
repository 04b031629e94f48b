// What a benchmark phase cost: CPU of a process and of the machine from /proc, bytes a process
// wrote, and the server's group-commit counters from /metrics.
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncLedger
import SyncLedgerServer
import Synchronization

/// The server's user + system CPU seconds so far (Linux /proc), nil when unknown.
func processCPUSeconds(_ pid: Int32) -> Double? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// CPU seconds the whole machine spent busy so far (every core: user, nice, system, irq,
/// softirq, steal), from /proc/stat; nil when unknown.
func machineBusySeconds() -> Double? { machineCPU()?.busy }

/// Busy (as above) and stolen (by the hypervisor) CPU seconds of the whole machine so far.
func machineCPU() -> (busy: Double, steal: Double)? {
    guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
          let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return nil }
    let f = line.split(separator: " ").dropFirst().compactMap { Double($0) }
    guard f.count >= 8 else { return nil }
    let tick = Double(sysconf(Int32(_SC_CLK_TCK)))
    return ((f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / tick, f[7] / tick)
}

/// Bytes the server handed to write calls (LMDB's pwrite of dirty pages) so far, from
/// /proc/PID/io `wchar`; nil when unknown.
func processWrittenBytes(_ pid: Int32) -> Double? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix("wchar:") {
        return Double(line.split(separator: " ").last ?? "")
    }
    return nil
}

/// This process's user + system CPU seconds so far.
func ownCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

/// Group commits and the callers they served, from the server's /metrics (signed with the admin
/// credential of SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY: the API's listener
/// answers /metrics to the admin only).
func writerCounters(_ options: MessageBenchOptions, group: any EventLoopGroup) async throws -> (commits: Double, writes: Double) {
    let environment = ProcessInfo.processInfo.environment
    let admin = environment["SYNCLEDGER_ACCESS_KEY_ID"].flatMap { key in
        environment["SYNCLEDGER_SECRET_ACCESS_KEY"].map { SigV4Signer(accessKeyID: key, secretAccessKey: $0) }
    }
    let connection = try await Connection.open(host: options.host, port: options.port, group: group)
    return try await connection.channel.executeThenClose { inbound, outbound in
        var exchange = Exchange(responses: inbound.makeAsyncIterator(), outbound: outbound, hostHeader: "\(options.host):\(options.port)", signer: admin)
        let (status, body) = try await exchange.send(.GET, "/metrics")
        guard status == 200 else { throw Failure(description: "/metrics answered \(status)") }
        var commits = 0.0, writes = 0.0
        for line in String(decoding: body, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2 else { continue }
            if parts[0] == "syncledger_commits_total" { commits = Double(parts[1]) ?? 0 }
            if parts[0] == "syncledger_group_commit_size_sum" { writes = Double(parts[1]) ?? 0 }
        }
        return (commits, writes)
    }
}
