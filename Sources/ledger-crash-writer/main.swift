// A test helper for the crash test: writes acknowledged updates to a ledger until it is killed.
//
//   ledger-crash-writer DIR WRITERS
//
// Each of WRITERS tasks updates its own dataset `crash-N` in a loop (key k0…k19, value
// "v<offset>"), and after each update returns — i.e. after the commit is durable — prints
// `ACK crash-N OFFSET KEY VALUE` on one line. Whatever it printed must be there after a crash.
import Foundation
import SyncLedger
import Synchronization

let arguments = CommandLine.arguments
guard arguments.count == 3, let writers = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: ledger-crash-writer DIR WRITERS\n".utf8))
    exit(2)
}
let ledger = try Ledger(directory: arguments[1])
let output = Mutex(FileHandle.standardOutput)

func say(_ line: String) {
    output.withLock { $0.write(Data((line + "\n").utf8)) }
}

await withThrowingTaskGroup(of: Void.self) { group in
    for n in 0..<writers {
        group.addTask {
            let stream = try StreamName(pool: "crash:0", identity: "crash:1", dataset: "crash-\(n)")
            var counts: [String: UInt64] = [:]
            var page = try ledger.listRecords(stream)
            var token = page.nextToken
            for record in page.records { counts[record.key] = record.syncCount }
            while token != nil {
                page = try ledger.listRecords(stream, nextToken: token)
                for record in page.records { counts[record.key] = record.syncCount }
                token = page.nextToken
            }
            let session = page.syncSessionToken
            var i = Int(page.datasetSyncCount)
            while true {
                i += 1
                let key = "k\(i % 20)"
                let value = "v\(i)-\(n)"
                let result = try await ledger.updateRecords(stream, patches: [RecordPatch(op: .replace, key: key, value: value, syncCount: counts[key] ?? 0)], sessionToken: session)
                counts[key] = result.syncCount
                say("ACK crash-\(n) \(result.syncCount) \(key) \(value)")
            }
        }
    }
}
