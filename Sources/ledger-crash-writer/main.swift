// A test helper for the crash and full-disk tests: writes acknowledged updates to a ledger
// until it is killed or the disk refuses.
//
//   ledger-crash-writer DIR WRITERS [FILE_SIZE_LIMIT VALUE_BYTES]
//
// Each of WRITERS tasks updates its own dataset `crash-N` in a loop (keys k0…k19), and after
// each update returns — i.e. after the commit is durable — prints
// `ACK crash-N OFFSET KEY VALUE-LENGTH VALUE-PREFIX` on one line. Whatever it printed must be
// there after a crash. With FILE_SIZE_LIMIT, the process may not grow files beyond that many
// bytes (RLIMIT_FSIZE, like a full disk); each task stops at its first error and prints
// `ERR crash-N CODE MESSAGE`.
import Foundation
import SyncLedger
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

let arguments = CommandLine.arguments
guard arguments.count == 3 || arguments.count == 5, let writers = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: ledger-crash-writer DIR WRITERS [FILE_SIZE_LIMIT VALUE_BYTES]\n".utf8))
    exit(2)
}
let valueBytes = arguments.count == 5 ? Int(arguments[4]) ?? 8 : 8
if arguments.count == 5, let limit = UInt64(arguments[3]) {
    signal(SIGXFSZ, SIG_IGN)
    var rl = rlimit(rlim_cur: rlim_t(limit), rlim_max: rlim_t(limit))
    setrlimit(Int32(RLIMIT_FSIZE.rawValue), &rl)
}
let ledger = try Ledger(directory: arguments[1])
let output = Mutex(FileHandle.standardOutput)

func say(_ line: String) {
    output.withLock { $0.write(Data((line + "\n").utf8)) }
}

await withTaskGroup(of: Void.self) { group in
    for n in 0..<writers {
        group.addTask {
            do {
                let stream = try StreamName(pool: "crash:0", identity: "crash:1", dataset: "crash-\(n)")
                var counts: [String: UInt64] = [:]
                var page = try ledger.listRecords(stream)
                for record in page.records { counts[record.key] = record.syncCount }
                while let token = page.nextToken {
                    page = try ledger.listRecords(stream, nextToken: token)
                    for record in page.records { counts[record.key] = record.syncCount }
                }
                let session = page.syncSessionToken
                var i = Int(page.datasetSyncCount)
                while true {
                    i += 1
                    let key = "k\(i % 20)"
                    let prefix = "v\(i)-\(n)-"
                    let value = prefix + String(repeating: "x", count: max(0, valueBytes - prefix.utf8.count))
                    let result = try await ledger.updateRecords(stream, patches: [RecordPatch(op: .replace, key: key, value: value, syncCount: counts[key] ?? 0)], sessionToken: session)
                    counts[key] = result.syncCount
                    say("ACK crash-\(n) \(result.syncCount) \(key) \(value.utf8.count) \(prefix)")
                }
            } catch let error as LedgerError {
                say("ERR crash-\(n) \(error.code) \(error.message)")
            } catch {
                say("ERR crash-\(n) other \(error)")
            }
        }
    }
}
exit(3)
