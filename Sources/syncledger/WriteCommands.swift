import ArgumentParser
import Foundation
import SyncLedger

/// Sets one or more records, as a device would: reads the current records, then updates.
struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Set records as a device would: syncledger put KEY VALUE [KEY VALUE …]",
        discussion: """
            A key that already has the value is left alone, as the Cognito SDKs' local put of an \
            unchanged value is a no-op; when nothing changes, nothing is appended. Makes the ledger \
            when the data directory holds none.
            """)
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Option(help: "The device making the change (recorded with the entry; the author is `cli`).") var device: String?
    @Argument(help: "Alternating keys and values.") var pairs: [String] = []

    func validate() throws {
        guard !pairs.isEmpty, pairs.count % 2 == 0 else { throw ValidationError("give KEY VALUE pairs") }
        if let device, !(1...256).contains(device.utf8.count) {
            throw ValidationError("--device must be 1-256 bytes, not \(device.utf8.count)")
        }
    }

    func run() async throws {
        let stream = try target.stream()
        let ledger = try data.open(create: true)
        defer { ledger.close() }
        let values = stride(from: 0, to: pairs.count, by: 2).map { (key: pairs[$0], value: pairs[$0 + 1]) }
        let outcome = try await writeAsDevice(ledger, stream, device: device) { records in
            values.compactMap { pair in
                let current = records[RecordKey(pair.key)]
                if let current, current.value.map({ $0.utf8.elementsEqual(pair.value.utf8) }) == true { return nil }
                return RecordPatch(op: .replace, key: pair.key, value: pair.value, syncCount: current?.syncCount ?? 0)
            }
        }
        let unchanged = values.map(\.key).filter { key in !outcome.written.contains { RecordKey($0) == RecordKey(key) } }
        if outcome.written.isEmpty {
            print("nothing written: \(unchanged.map(quote).joined(separator: ", ")) already \(unchanged.count == 1 ? "has that value" : "have those values"); \(stream) sync count \(outcome.syncCount)")
        } else {
            print("\(stream) sync count \(outcome.syncCount)" + (unchanged.isEmpty ? "" : " (unchanged: \(unchanged.map(quote).joined(separator: ", ")))"))
        }
    }
}

/// Removes records.
struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove records: syncledger remove KEY [KEY …]",
        discussion: """
            A key with no record (or an already removed one) is left alone, as the Cognito SDKs' \
            local remove of a missing key is a no-op; when no key has a record, nothing is appended \
            and the command says so (exit 0). Refuses a data directory that holds no ledger.
            """)
    @OptionGroup var data: DataOptions
    @OptionGroup var target: StreamOptions
    @Option(help: "The device making the change (recorded with the entry; the author is `cli`).") var device: String?
    @Argument(help: "The keys to remove.") var keys: [String] = []

    func validate() throws {
        guard !keys.isEmpty else { throw ValidationError("give the keys to remove") }
        if let device, !(1...256).contains(device.utf8.count) {
            throw ValidationError("--device must be 1-256 bytes, not \(device.utf8.count)")
        }
    }

    func run() async throws {
        let stream = try target.stream()
        let ledger = try data.open(create: false)
        defer { ledger.close() }
        let outcome = try await writeAsDevice(ledger, stream, device: device) { records in
            keys.compactMap { key in
                guard let current = records[RecordKey(key)], current.value != nil else { return nil }
                return RecordPatch(op: .remove, key: key, syncCount: current.syncCount)
            }
        }
        let missing = keys.filter { key in !outcome.written.contains { RecordKey($0) == RecordKey(key) } }
        let list = missing.map(quote).joined(separator: ", ")
        if outcome.written.isEmpty {
            print("nothing removed: \(stream) has no record \(list); sync count \(outcome.syncCount)")
        } else {
            print("\(stream) sync count \(outcome.syncCount)" + (missing.isEmpty ? "" : " (no record \(list) to remove)"))
        }
    }
}

/// What ``writeAsDevice(_:_:device:_:)`` did: the keys it wrote and the dataset's sync count
/// after.
struct DeviceWrite {
    let written: [String]
    let syncCount: UInt64
}

/// A device's sync step: reads every current record (with a sync session), builds patches from
/// them and updates as `cli` from `device`; retries a conflict with another writer a few
/// times. Patches that come out empty write nothing.
func writeAsDevice(_ ledger: Ledger, _ stream: StreamName, device: String?, _ patches: ([RecordKey: RecordState]) -> [RecordPatch]) async throws -> DeviceWrite {
    var attempt = 0
    while true {
        var records: [RecordKey: RecordState] = [:]
        var token: String?
        var page: RecordsPage
        repeat {
            page = try ledger.listRecords(stream, nextToken: token)
            for record in page.records { records[RecordKey(record.key)] = record.state }
            token = page.nextToken
        } while token != nil
        let changes = patches(records)
        if changes.isEmpty { return DeviceWrite(written: [], syncCount: page.datasetSyncCount) }
        do {
            let result = try await ledger.updateRecords(stream, patches: changes, deviceID: device, caller: "cli", sessionToken: page.syncSessionToken)
            return DeviceWrite(written: changes.map(\.key), syncCount: result.syncCount)
        } catch let error as LedgerError where error.code == .conflict && attempt < 5 {
            attempt += 1
        }
    }
}
