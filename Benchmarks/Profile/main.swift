import BenchSupport
import Foundation
import LedgerStorage
import SyncLedger

// One replication phase in a loop, for perf record (tools/profile); or, with `bigledger DIR MB`,
// a ledger of at least MB megabytes of log for the export/import memory check
// (tools/export-memory).
let phase = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "all"
if phase == "write1" || phase == "write1fast" {
    // One caller's updateRecords of one record, each acknowledged before the next.
    let n = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2])! : 2000
    let dir = "/tmp/slprof-write1"
    try? FileManager.default.removeItem(atPath: dir)
    var writeOptions = LedgerOptions()
    writeOptions.durable = phase == "write1"
    let w = try Ledger(directory: dir, options: writeOptions)
    let stream = try StreamName(pool: EventData.pool, identity: EventData.identity(1), dataset: "bench")
    let token = try w.listRecords(stream).syncSessionToken
    var count: UInt64 = 0
    let start = ContinuousClock.now
    for _ in 0..<n {
        count = try await w.updateRecords(stream, patches: [RecordPatch(op: .replace, key: "item", value: String(repeating: "v", count: 64), syncCount: count)], sessionToken: token).syncCount
    }
    let elapsed = ContinuousClock.now - start
    print("\(phase): \(n) updates, \(elapsed / n) each")
    w.close()
    try? FileManager.default.removeItem(atPath: dir)
    exit(0)
}
if phase == "bigledger" {
    let directory = CommandLine.arguments[2]
    let megabytes = Int(CommandLine.arguments[3])!
    var bigOptions = LedgerOptions()
    bigOptions.durable = false
    bigOptions.initialMapSize = 2 << 30
    let big = try Ledger(directory: directory, options: bigOptions)
    // Entries of five 20 KB JSON-ish values (about 100 KB each) over 100 datasets of 10 identities.
    var random = SplitMix64(seed: 42)
    let entries = megabytes * 10
    for i in 0..<entries {
        let stream = try StreamName(pool: EventData.pool, identity: EventData.identity(i % 10), dataset: "big-\((i / 10) % 10)")
        let page = try big.listRecords(stream)
        let counts = Dictionary(uniqueKeysWithValues: page.records.map { ($0.key, $0.syncCount) })
        let patches = (0..<5).map { k -> RecordPatch in
            var value = ""
            while value.utf8.count < 19_500 { value += EventData.value(key: k + i, time: Int64(i), random: &random) }
            return RecordPatch(op: .replace, key: "blob-\(k)", value: value, syncCount: counts["blob-\(k)"] ?? 0)
        }
        _ = try await big.updateRecords(stream, patches: patches, deviceID: "generator", sessionToken: page.syncSessionToken)
        if i % 1000 == 999 { print("bigledger: \(i + 1) of \(entries) entries") }
    }
    big.close()
    exit(0)
}
let rounds = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2])! : 20
let dir = "/tmp/slprof-source"
let exists = FileManager.default.fileExists(atPath: dir)
var options = LedgerOptions(); options.durable = false; options.initialMapSize = 1 << 30
let ledger: Ledger
if exists {
    ledger = try Ledger(directory: dir, options: options)
} else {
    ledger = try await buildSourceLedger(directory: dir, spec: SourceSpec(entries: 50_000, streams: 64)).ledger
}
func time(_ name: String, _ n: Int, _ body: () async throws -> Int) async rethrows {
    let start = ContinuousClock.now
    var bytes = 0
    for _ in 0..<n { bytes += try await body() }
    let s = Double((ContinuousClock.now - start).components.attoseconds) / 1e18 + Double((ContinuousClock.now - start).components.seconds)
    print(name, String(format: "%.2f ms/iter  %.1f MB/s", s * 1000 / Double(n), Double(bytes) / s / 1e6))
}
let seg = try ledger.feedSegment(after: 0)!
let enc = try seg.encoded()
let plainSize = Int(try Segment.decode(enc).uncompressedSize)
print("entries", seg.entries.count, "plain", plainSize, "compressed", enc.count)
if phase == "all" || phase == "pull" {
    let pullEnc = try ledger.feedSegment(after: 16_000, level: 1)!.encoded()
    let pullSeg = try Segment.decode(pullEnc)
    let pullFrame = pullEnc[(pullEnc.count - 32 - Int(pullSeg.compressedSize))..<(pullEnc.count - 32)]
    let pullPlain = try Zstd.decompress(pullFrame, limit: Int(pullSeg.uncompressedSize))
    try await time("raw zstd1 (pull plain)", rounds) { _ = try Zstd.compress(pullPlain, level: 1); return pullPlain.count }
    try await time("pull L1", rounds) { let s = try ledger.feedSegment(after: 16_000, level: 1)!; return try s.encoded().count * 0 + pullPlain.count }
}
if phase == "all" || phase == "encode" {
    try await time("encode", rounds) { _ = try seg.encoded(); return plainSize }
    try await time("encode again", rounds) { _ = try seg.encoded(); return plainSize }
    let decodedForEncode = try Segment.decode(enc)
    try await time("encode decoded", rounds) { _ = try decodedForEncode.encoded(); return plainSize }
    let frame = Array(enc[(enc.count - 32 - Int(try Segment.decode(enc).compressedSize))..<(enc.count - 32)])
    let plain = try Zstd.decompress(frame, limit: plainSize)
    try await time("raw zstd3", rounds) { _ = try Zstd.compress(plain, level: 3); return plainSize }
    try await time("stream zstd3 128K pieces", rounds) {
        let w = try ZstdFrameWriter(level: 3, contentSize: plain.count)
        var at = 0
        while at < plain.count { let n = min(128 << 10, plain.count - at); try w.compress(Array(plain[at..<at + n])); at += n }
        _ = try w.finish()
        return plainSize
    }
    try await time("stream zstd3 1 piece", rounds) {
        let w = try ZstdFrameWriter(level: 3, contentSize: plain.count)
        _ = try w.finish(plain)
        return plainSize
    }
    try await time("raw unzstd", rounds) { _ = try Zstd.decompress(frame, limit: plainSize); return plainSize }
}
if phase == "sha" {
    let decodedSeg = try Segment.decode(enc)
    try await time("sha chain only", rounds) {
        var h = ConcatenatingSHA256()
        for e in decodedSeg.entries { _ = h.digest(e.previous, lengthPrefixed: Array(e.stream.description.utf8), e.body) }
        return plainSize
    }
    let keyBytes = decodedSeg.entries.map { Array($0.stream.description.utf8) }
    try await time("sha chain, keys ready", rounds) {
        var h = ConcatenatingSHA256()
        for (i, e) in decodedSeg.entries.enumerated() { _ = h.digest(e.previous, lengthPrefixed: keyBytes[i], e.body) }
        return plainSize
    }
    let blob = [UInt8](repeating: 7, count: 380)
    try await time("sha 19172 x 380B one-shot", rounds) {
        for _ in 0..<19172 { _ = ConcatenatingSHA256.digest(blob[...]) }
        return plainSize
    }
}
if phase == "all" || phase == "decode" || phase == "sha" {
    try await time("decode", rounds) { _ = try Segment.decode(enc); return plainSize }
}
if phase == "all" || phase == "merge" {
    let all = try ledger.feedSegment(after: 0, maxBytes: 256 << 20)!
    var segs = stride(from: 0, to: 48_000, by: 1000).map { Segment(scope: .feed, entries: Array(all.entries[$0..<$0 + 1000])) }
    if CommandLine.arguments.count > 3, CommandLine.arguments[3] == "decoded" {
        segs = try segs.map { try Segment.decode(try $0.encoded()) }  // as the merge benchmark has them
    }
    for r in 0..<max(1, rounds / 10) {
        let mdir = "/tmp/slprof-merge-\(r)"
        try? FileManager.default.removeItem(atPath: mdir)
        let target = try Ledger(directory: mdir, options: options)
        try await time("merge 48k", 1) { for s in segs { _ = try await target.merge(s) }; return 48_000 }
        target.close()
        try? FileManager.default.removeItem(atPath: mdir)
    }
}
ledger.close()
