// syncledger-load --messages: device-to-server messages (POST /messages) against UpdateRecords
// of the same payload, in the same run, against the same server.
//
//   syncledger-load --messages --endpoint URL --credentials FILE [--bytes 256] [--seconds 5]
//                   [--rounds 3] [--warmup-seconds 1] [--server-pid PID]
//
// FILE is a JSON array of identity credentials (`syncledger credentials create` output:
// AccessKeyId, SecretAccessKey, IdentityPoolId, IdentityId), one per virtual device; each gets
// one keep-alive connection. Every identity first creates its device (POST /devices/sync) and
// takes a sync session token for its dataset `bench` (ListRecords); then the phases run, every
// identity back to back with one request in flight:
//
//   U: UpdateRecords of one record, key `payload`, a value of B bytes (the session token is
//      reused; the record's sync count comes from the previous answer);
//   M: POST /messages with Data {"payload": the same B bytes}, a new MessageId each time (a
//      random UUID, as apps make them: the idempotency keys land all over their B-tree).
//
// Phases alternate U M M U U M … (ABBA: a drift of the machine's speed hits both alike), each
// `--seconds` long after an uncounted warm-up of each; rates are medians over the rounds, the
// latencies p50/p99 of every request of a kind. With --server-pid the server's CPU time per
// request is reported too (from /proc), and from /metrics the callers per group commit.
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncLedger
import SyncLedgerServer
import Synchronization

struct MessageBenchOptions: Sendable {
    var host = "127.0.0.1"
    var port = 8080
    var credentials = ""
    var bytes = 256
    var seconds = 5.0
    var rounds = 3
    var warmupSeconds = 1.0
    var serverPID: Int32?
    var timeToLive = 86_400
    /// Only this kind of phase (for profiling one of them).
    var only: PhaseKind?

    init(_ args: [String]) {
        var i = 1
        func next() -> String {
            i += 1
            guard i < args.count else { fail("missing value for \(args[i - 1])") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--messages": break
            case "--endpoint":
                guard let url = URL(string: next()) else { fail("--endpoint needs a URL") }
                host = url.host ?? host
                port = url.port ?? 80
            case "--credentials": credentials = next()
            case "--bytes": bytes = Int(next()) ?? 0
            case "--seconds": seconds = Double(next()) ?? 0
            case "--rounds": rounds = Int(next()) ?? 0
            case "--warmup-seconds": warmupSeconds = Double(next()) ?? 0
            case "--server-pid": serverPID = Int32(next())
            case "--only":
                let kind = next()
                guard let k = kind == "updates" ? PhaseKind.updates : kind == "messages" ? PhaseKind.messages : nil else { fail("--only updates|messages") }
                only = k
            default: fail("unknown option \(args[i]) for --messages")
            }
            i += 1
        }
        guard !credentials.isEmpty else { fail("--messages needs --credentials FILE") }
        guard (1...4000).contains(bytes) else { fail("--bytes must be 1-4000 (a message carries at most 4,096 bytes of keys and values)") }
        guard seconds > 0, rounds > 0 else { fail("--seconds and --rounds must be positive") }
    }
}

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("syncledger-load: \(text)\n".utf8))
    exit(2)
}

func progress(_ text: String) {
    FileHandle.standardError.write(Data("syncledger-load: \(text)\n".utf8))
}

/// One identity's credential, from the credentials file.
struct IdentityCredential: Sendable {
    let accessKeyID: String
    let secret: String
    let pool: String
    let identity: String
}

/// The two kinds of phase.
enum PhaseKind: String, Sendable {
    case updates = "U"
    case messages = "M"
}

/// Requests and responses, one at a time, over one keep-alive connection (inside
/// `executeThenClose`).
struct Exchange: ~Copyable {
    var responses: NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator
    let outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>
    let hostHeader: String
    let signer: SigV4Signer?

    mutating func send(_ method: HTTPMethod, _ path: String, _ query: String? = nil, _ body: [UInt8] = []) async throws -> (Int, [UInt8]) {
        var headers = [("content-type", "application/json")]
        if let signer { headers += signer.sign(method: method.rawValue, host: hostHeader, rawPath: path, rawQuery: query, body: body) }
        return try await raw(method, path, query, headers: headers, body)
    }

    /// Sends a request with exactly these headers (plus host and content-length) and reads
    /// the answer.
    mutating func raw(_ method: HTTPMethod, _ path: String, _ query: String?, headers extra: [(String, String)], _ body: [UInt8]) async throws -> (Int, [UInt8]) {
        var headers = HTTPHeaders()
        headers.add(name: "host", value: hostHeader)
        headers.add(name: "content-length", value: "\(body.count)")
        for (name, value) in extra { headers.add(name: name, value: value) }
        let uri = query.map { "\(path)?\($0)" } ?? path
        var parts: [HTTPClientRequestPart] = [.head(HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: headers))]
        if !body.isEmpty { parts.append(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
        parts.append(.end(nil))
        try await outbound.write(contentsOf: parts)
        var status = 0
        var data: [UInt8] = []
        while let part = try await responses.next() {
            switch part {
            case .head(let head): status = Int(head.status.code)
            case .body(let buffer): data += buffer.readableBytesView
            case .end: return (status, data)
            }
        }
        throw Failure(description: "the server closed the connection")
    }
}

/// A JSON string literal (quotes included).
func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 { out += String(format: "\\u%04x", scalar.value) } else { out.unicodeScalars.append(scalar) }
        }
    }
    return out + "\""
}

/// What one worker did in one phase.
struct WorkerPhase: Sendable {
    var latencies: [Double] = []
    var lastCompletion: ContinuousClock.Instant
}

/// Starts phases for all workers together and collects what each did.
actor PhaseControl {
    let workers: Int
    private var ready = 0
    private var readyWaiter: CheckedContinuation<Void, any Error>?
    private var deadlines: [Int: ContinuousClock.Instant] = [:]
    private var startWaiters: [Int: [CheckedContinuation<ContinuousClock.Instant, any Error>]] = [:]
    private var results: [Int: [WorkerPhase]] = [:]
    private var finishWaiters: [Int: CheckedContinuation<[WorkerPhase], any Error>] = [:]
    private var failure: (any Error)?

    init(workers: Int) { self.workers = workers }

    /// A worker is set up.
    func arrive() {
        ready += 1
        if ready == workers { readyWaiter?.resume(); readyWaiter = nil }
    }

    /// Waits until every worker is set up.
    func allReady() async throws {
        if let failure { throw failure }
        if ready == workers { return }
        try await withCheckedThrowingContinuation { readyWaiter = $0 }
    }

    /// Lets phase `index` run until `deadline`.
    func start(_ index: Int, deadline: ContinuousClock.Instant) {
        deadlines[index] = deadline
        for waiter in startWaiters.removeValue(forKey: index) ?? [] { waiter.resume(returning: deadline) }
    }

    /// Waits for phase `index` to start; returns its deadline.
    func waitStart(_ index: Int) async throws -> ContinuousClock.Instant {
        if let failure { throw failure }
        if let deadline = deadlines[index] { return deadline }
        return try await withCheckedThrowingContinuation { startWaiters[index, default: []].append($0) }
    }

    /// A worker finished phase `index`.
    func finish(_ index: Int, _ result: WorkerPhase) {
        results[index, default: []].append(result)
        if results[index]!.count == workers, let waiter = finishWaiters.removeValue(forKey: index) {
            waiter.resume(returning: results[index]!)
        }
    }

    /// Waits until every worker finished phase `index`.
    func waitFinished(_ index: Int) async throws -> [WorkerPhase] {
        if let failure { throw failure }
        if let done = results[index], done.count == workers { return done }
        return try await withCheckedThrowingContinuation { finishWaiters[index] = $0 }
    }

    /// A worker failed: every waiter gets the error.
    func fail(_ error: any Error) {
        guard failure == nil else { return }
        failure = error
        readyWaiter?.resume(throwing: error)
        readyWaiter = nil
        for (_, waiters) in startWaiters { for w in waiters { w.resume(throwing: error) } }
        startWaiters = [:]
        for (_, w) in finishWaiters { w.resume(throwing: error) }
        finishWaiters = [:]
    }
}

func seconds(_ d: Duration) -> Double { d.inSeconds }

/// One virtual device: sets up, then runs every phase of `schedule` when the control starts it.
func messageWorker(number: Int, credential: IdentityCredential, options: MessageBenchOptions, schedule: [PhaseKind],
                   group: any EventLoopGroup, control: PhaseControl) async throws {
    let connection = try await Connection.open(host: options.host, port: options.port, group: group)
    try await connection.channel.executeThenClose { inbound, outbound in
        var exchange = Exchange(responses: inbound.makeAsyncIterator(), outbound: outbound, hostHeader: "\(options.host):\(options.port)",
                                signer: SigV4Signer(accessKeyID: credential.accessKeyID, secretAccessKey: credential.secret))
        // The device.
        let sync = #"{"Platform":"APNS","OsVersion":"17.4","AppVersion":"2.3.1","Model":"iPhone15,2","Locale":"en_US"}"#
        let (status, body) = try await exchange.send(.POST, "/devices/sync", nil, Array(sync.utf8))
        guard status == 200, let code = (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["DeviceCode"] as? String else {
            throw Failure(description: "POST /devices/sync answered \(status): \(String(decoding: body, as: UTF8.self))")
        }
        // The dataset and its session token.
        let path = "/identitypools/\(SigV4.uriEncode(credential.pool))/identities/\(SigV4.uriEncode(credential.identity))/datasets/bench"
        var token = ""
        var tokenTaken = ContinuousClock.now
        var syncCount: Int64 = 0
        func takeToken(_ exchange: inout Exchange) async throws {
            let (status, body) = try await exchange.send(.GET, path + "/records", "lastSyncCount=0", [])
            guard status == 200, let list = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
                  let t = list["SyncSessionToken"] as? String else {
                throw Failure(description: "ListRecords answered \(status): \(String(decoding: body, as: UTF8.self))")
            }
            token = t
            tokenTaken = .now
            for case let record as [String: Any] in list["Records"] as? [Any] ?? [] where record["Key"] as? String == "payload" {
                syncCount = (record["SyncCount"] as? NSNumber)?.int64Value ?? syncCount
            }
        }
        try await takeToken(&exchange)
        await control.arrive()

        // The payload: B bytes, different for every request (a counter, then filler).
        let letters = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        let filler = String(repeating: letters[number % letters.count], count: options.bytes)
        var counter = 0
        func payload() -> String {
            counter += 1
            let head = "\(number)-\(counter)-"
            return head.count >= options.bytes ? String(head.prefix(options.bytes)) : head + filler.prefix(options.bytes - head.count)
        }
        let deviceJSON = jsonString(code)
        for (index, kind) in schedule.enumerated() {
            let deadline = try await control.waitStart(index)
            var result = WorkerPhase(lastCompletion: .now)
            result.latencies.reserveCapacity(4096)
            if kind == .updates, ContinuousClock.now - tokenTaken > .seconds(300) { try await takeToken(&exchange) }
            while ContinuousClock.now < deadline {
                let value = jsonString(payload())
                let start = ContinuousClock.now
                switch kind {
                case .updates:
                    let body = #"{"SyncSessionToken":\#(jsonString(token)),"DeviceId":\#(deviceJSON),"RecordPatches":[{"Op":"replace","Key":"payload","Value":\#(value),"SyncCount":\#(syncCount)}]}"#
                    let (status, response) = try await exchange.send(.POST, path, nil, Array(body.utf8))
                    guard status == 200, let answer = try JSONSerialization.jsonObject(with: Data(response)) as? [String: Any],
                          let records = answer["Records"] as? [[String: Any]], let count = (records.first?["SyncCount"] as? NSNumber)?.int64Value else {
                        throw Failure(description: "UpdateRecords answered \(status): \(String(decoding: response, as: UTF8.self))")
                    }
                    syncCount = count
                case .messages:
                    let body = #"{"DeviceCode":\#(deviceJSON),"MessageId":"\#(UUID().uuidString.lowercased())","TimeToLive":\#(options.timeToLive),"Data":{"payload":\#(value)}}"#
                    let (status, response) = try await exchange.send(.POST, "/messages", nil, Array(body.utf8))
                    guard status == 200, let answer = try JSONSerialization.jsonObject(with: Data(response)) as? [String: Any],
                          answer["Sequence"] is NSNumber else {
                        throw Failure(description: "POST /messages answered \(status): \(String(decoding: response, as: UTF8.self))")
                    }
                }
                let end = ContinuousClock.now
                result.latencies.append(seconds(end - start))
                result.lastCompletion = end
            }
            await control.finish(index, result)
        }
    }
}

/// What one phase measured.
struct MeasuredPhase: Sendable {
    let kind: PhaseKind
    let requests: Int
    let seconds: Double
    let latencies: [Double]
    let serverCPU: Double?
    let loadCPU: Double
    let perCommit: Double?
    /// CPU seconds of everything but the server and this tool during the phase, per second.
    let otherCores: Double?
    /// CPU stolen by the hypervisor during the phase, in cores.
    let stolenCores: Double?
    /// Bytes the server wrote (write calls) during the phase.
    let serverWritten: Double?
    var rate: Double { Double(requests) / seconds }
}

func median(_ values: [Double]) -> Double {
    let s = values.sorted()
    guard !s.isEmpty else { return 0 }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func runMessageBenchmark() async throws {
    let options = MessageBenchOptions(CommandLine.arguments)
    guard let data = FileManager.default.contents(atPath: options.credentials),
          let list = try JSONSerialization.jsonObject(with: data) as? [[String: Any]] else {
        fail("\(options.credentials) is not a JSON array of credentials")
    }
    let credentials = list.compactMap { c -> IdentityCredential? in
        guard let key = c["AccessKeyId"] as? String, let secret = c["SecretAccessKey"] as? String,
              let pool = c["IdentityPoolId"] as? String, let identity = c["IdentityId"] as? String else { return nil }
        return IdentityCredential(accessKeyID: key, secret: secret, pool: pool, identity: identity)
    }
    guard !credentials.isEmpty, credentials.count == list.count else { fail("\(options.credentials): every entry needs AccessKeyId, SecretAccessKey, IdentityPoolId, IdentityId") }

    // Warm-up U and M, then ABBA rounds.
    var phases: [PhaseKind] = [.updates, .messages]
    for round in 0..<options.rounds { phases += round % 2 == 0 ? [.updates, .messages] : [.messages, .updates] }
    let schedule = options.only.map { kind in phases.map { _ in kind } } ?? phases
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let control = PhaseControl(workers: credentials.count)
    progress("\(credentials.count) devices: creating devices and taking session tokens")
    let measured = try await withThrowingTaskGroup(of: [MeasuredPhase].self) { tasks in
        for (n, credential) in credentials.enumerated() {
            tasks.addTask {
                do {
                    try await messageWorker(number: n, credential: credential, options: options, schedule: schedule, group: group, control: control)
                } catch {
                    await control.fail(error)
                    throw error
                }
                return []
            }
        }
        tasks.addTask {
            try await control.allReady()
            var phases: [MeasuredPhase] = []
            for (index, kind) in schedule.enumerated() {
                let warmup = index < 2
                let length = warmup ? options.warmupSeconds : options.seconds
                let counters = try await writerCounters(options, group: group)
                let cpu = options.serverPID.flatMap(processCPUSeconds)
                let own = ownCPUSeconds()
                let busy = machineBusySeconds()
                let steal = machineCPU()?.steal
                let written = options.serverPID.flatMap(processWrittenBytes)
                let start = ContinuousClock.now
                await control.start(index, deadline: start + .milliseconds(Int(length * 1000)))
                let results = try await control.waitFinished(index)
                let end = results.map(\.lastCompletion).max() ?? start
                let cpuAfter = options.serverPID.flatMap(processCPUSeconds)
                let ownAfter = ownCPUSeconds()
                let busyAfter = machineBusySeconds()
                let stealAfter = machineCPU()?.steal
                let writtenAfter = options.serverPID.flatMap(processWrittenBytes)
                let countersAfter = try await writerCounters(options, group: group)
                let latencies = results.flatMap(\.latencies).sorted()
                let commits = countersAfter.commits - counters.commits
                let phase = MeasuredPhase(kind: kind, requests: latencies.count, seconds: seconds(end - start), latencies: latencies,
                                          serverCPU: cpu.flatMap { c in cpuAfter.map { $0 - c } }, loadCPU: ownAfter - own,
                                          perCommit: commits > 0 ? (countersAfter.writes - counters.writes) / commits : nil,
                                          otherCores: busy.flatMap { b in busyAfter.flatMap { a in cpu.flatMap { c in cpuAfter.map { ca in
                                              max(0, (a - b) - (ca - c) - (ownAfter - own)) / seconds(end - start) } } } },
                                          stolenCores: steal.flatMap { b in stealAfter.map { ($0 - b) / seconds(end - start) } },
                                          serverWritten: written.flatMap { w in writtenAfter.map { $0 - w } })
                progress(String(format: "%@ %@: %.0f/s (%d in %.1f s), p50 %.1f ms, p99 %.1f ms; server %.0f µs/request; other processes %@ cores, stolen %@",
                                warmup ? "warm-up" : "phase \(index - 1) of \(schedule.count - 2)",
                                kind == .updates ? "UpdateRecords" : "messages", phase.rate, phase.requests, phase.seconds,
                                percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000,
                                (phase.serverCPU ?? 0) / Double(max(phase.requests, 1)) * 1e6,
                                phase.otherCores.map { String(format: "%.2f", $0) } ?? "?",
                                phase.stolenCores.map { String(format: "%.2f", $0) } ?? "?"))
                if !warmup { phases.append(phase) }
            }
            return phases
        }
        var all: [MeasuredPhase] = []
        for try await phases in tasks { all += phases }
        return all
    }
    try await group.shutdownGracefully()

    let updates = measured.filter { $0.kind == .updates }, messages = measured.filter { $0.kind == .messages }
    let u = median(updates.map(\.rate)), m = median(messages.map(\.rate))
    func row(_ name: String, _ phases: [MeasuredPhase]) -> String {
        let lat = phases.flatMap(\.latencies).sorted()
        let requests = Double(phases.map(\.requests).reduce(0, +))
        let cpu = phases.allSatisfy({ $0.serverCPU != nil }) ? String(format: "%.0f", phases.compactMap(\.serverCPU).reduce(0, +) / requests * 1e6) : "-"
        let load = String(format: "%.0f", phases.map(\.loadCPU).reduce(0, +) / requests * 1e6)
        let group = phases.compactMap(\.perCommit)
        let other = phases.compactMap(\.otherCores)
        let written = phases.allSatisfy({ $0.serverWritten != nil }) ? String(format: "%.0f", phases.compactMap(\.serverWritten).reduce(0, +) / requests) : "-"
        return String(format: "| %@ | %.0f (%@) | %.2f | %.2f | %@ | %@ | %@ | %@ | %@ |", name, median(phases.map(\.rate)),
                      phases.map { String(format: "%.0f", $0.rate) }.joined(separator: ", "),
                      percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000, cpu, written, load,
                      group.isEmpty ? "-" : String(format: "%.1f", median(group)),
                      other.isEmpty ? "-" : other.map { String(format: "%.2f", $0) }.joined(separator: ", "))
    }
    // Each round's U and M phases are next to each other in time: their ratio cancels a slow
    // drift of the machine, so the headline is the median of the rounds' ratios.
    let pairs = zip(messages, updates).map { $0.rate / $1.rate }
    let cpuRatio = zip(messages, updates).compactMap { m, u in m.serverCPU.flatMap { mc in u.serverCPU.map { uc in (mc / Double(m.requests)) / (uc / Double(u.requests)) } } }
    print("| \(credentials.count) devices, \(options.bytes)-byte payload, durable | per s, median (each round) | p50 ms | p99 ms | server CPU µs/request | server bytes written/request | load tool CPU µs/request | callers per commit | other processes, cores busy (each round) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(row("UpdateRecords, 1 record of \(options.bytes) B", updates))
    print(row("POST /messages, Data of \(options.bytes) B", messages))
    print(String(format: "| messages ÷ UpdateRecords (goal ≥ 0.9): median of the rounds' ratios | **%.2f** (rounds: %@; ratio of the medians above %.2f) | | | %@ | | | | |",
                 median(pairs), pairs.map { String(format: "%.2f", $0) }.joined(separator: ", "), m / u,
                 cpuRatio.isEmpty ? "" : String(format: "× %.2f (median of rounds)", median(cpuRatio))))
    let stolen = measured.compactMap(\.stolenCores)
    if let most = stolen.max(), most > 0.05 { print(String(format: "(CPU stolen by the hypervisor: up to %.2f cores in a phase)", most)) }
}
