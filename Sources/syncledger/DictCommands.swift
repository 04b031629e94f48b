import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger dict`: zstd dictionaries for small segments.
struct Dict: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "zstd dictionaries for small segments.", subcommands: [Train.self])

    /// `syncledger dict train --pool P`.
    struct Train: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Train a pool's dictionary from its entries; print the compression ratio of small stream segments without any dictionary and with the new one.")
        @OptionGroup var data: DataOptions
        @Option(help: "The identity pool.") var pool: String
        @Option(help: "Size of the small segments to measure, in bytes (at least 64).") var segmentBytes = 1024

        func validate() throws {
            guard segmentBytes >= 64 else { throw ValidationError("--segment-bytes must be at least 64, not \(segmentBytes)") }
        }

        /// How each measurement compresses.
        enum Compression {
            case plain
            case dictionary(id: UInt32, bytes: [UInt8])
        }

        func run() async throws {
            let poolID = try IdentityPoolID(pool)
            let ledger = try data.open(create: false)
            defer { ledger.close() }
            let previous = try ledger.currentDictionary(pool: poolID)
            let (plain, segments) = try ratio(ledger, poolID, .plain)
            let old = try previous.map { try ratio(ledger, poolID, .dictionary(id: $0.id, bytes: $0.bytes)).ratio }
            let dictionary = try await ledger.trainDictionary(pool: poolID)
            let (new, _) = try ratio(ledger, poolID, .dictionary(id: dictionary.id, bytes: dictionary.bytes))
            print("dictionary \(dictionary.id) for pool \(poolID): \(dictionary.bytes.count) bytes")
            var line = String(format: "~%d-byte segments (%d): ratio %.2f without a dictionary, %.2f with the new one (%.2fx)",
                              segmentBytes, segments, plain, new, plain > 0 ? new / plain : 0)
            if let previous, let old { line += String(format: "; %.2f with the previous one (%u)", old, previous.id) }
            print(line)
        }

        /// Uncompressed entry bytes over whole segment files, for up to 200 of the pool's
        /// streams' first segments, each compressed as `compression` says.
        func ratio(_ ledger: Ledger, _ pool: IdentityPoolID, _ compression: Compression) throws -> (ratio: Double, segments: Int) {
            var plain: UInt64 = 0, packed = 0, count = 0
            for (stream, _) in try ledger.streams(pool: pool) where stream.identity != Ledger.systemIdentity && count < 200 {
                guard var segment = try ledger.streamSegment(stream, after: 0, maxBytes: segmentBytes) else { continue }
                switch compression {
                case .plain: segment.dictionary = nil
                case .dictionary(let id, let bytes): segment.dictionary = (id, bytes)
                }
                let bytes = try segment.encoded()
                plain += try Segment.readHeader(bytes).uncompressedSize
                packed += bytes.count
                count += 1
            }
            return (packed == 0 ? 0 : Double(plain) / Double(packed), count)
        }
    }
}
