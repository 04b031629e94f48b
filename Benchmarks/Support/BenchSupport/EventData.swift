import SyncLedger

/// A small, fast, seedable random number generator (SplitMix64), so every benchmark process
/// generates the same data.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 &+ 0x1234_5678 }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The names and values the replication and read benchmarks write: Cognito-style ids, settings
/// datasets, and JSON-ish values like those an app syncs (preferences, game progress, recent
/// documents) — neither random bytes nor one repeated string, so zstd sees realistic text.
public enum EventData {
    /// The identity pool of every stream.
    public static let pool = "us-east-1:00000000-0000-0000-0000-0000000000b2"
    /// The dataset name of every stream.
    public static let dataset = "settings"

    /// The identity of stream `index`.
    public static func identity(_ index: Int) -> String {
        let hex = String(index, radix: 16)
        return "us-east-1:00000000-0000-0000-0000-" + String(repeating: "0", count: 12 - hex.count) + hex
    }

    /// Stream `index`: its own identity's settings dataset.
    public static func stream(_ index: Int) throws -> StreamName {
        try StreamName(pool: pool, identity: identity(index), dataset: dataset)
    }

    /// The storage key of a stream (pool ␀ identity ␀ dataset), as docs/storage-format.md gives it.
    public static func streamKey(_ stream: StreamName) -> [UInt8] {
        Array(stream.pool.rawValue.utf8) + [0] + Array(stream.identity.rawValue.utf8) + [0] + Array(stream.dataset.rawValue.utf8)
    }

    /// The device that writes stream (or caller) `index`.
    public static func device(_ index: Int) -> String {
        let hex = String(UInt32(truncatingIfNeeded: index &* 2_654_435_761), radix: 16)
        return "device-" + String(repeating: "0", count: 8 - hex.count) + hex
    }

    private static let areas = ["display", "progress", "audio", "library"]
    private static let places = ["main", "phone", "tablet", "tv", "watch", "car", "web", "backup"]

    /// Record key `index` (32 distinct keys, then a numbered suffix): `display.main`,
    /// `progress.phone`, … Each key keeps the same kind of value.
    public static func recordKey(_ index: Int) -> String {
        let base = areas[index % 4] + "." + places[(index / 4) % 8]
        return index < 32 ? base : base + "-\(index / 32)"
    }

    /// A JSON-ish value for record key `key`, about 100–250 characters: the shape is fixed by the
    /// key, the contents drawn from `random`.
    public static func value(key: Int, time: Int64, random: inout SplitMix64) -> String {
        func pick<T>(_ options: [T]) -> T { options[Int(random.next() % UInt64(options.count))] }
        func number(_ range: ClosedRange<Int>) -> Int { range.lowerBound + Int(random.next() % UInt64(range.count)) }
        switch key % 4 {
        case 0:
            return "{\"theme\":\"\(pick(["dark", "light", "system", "sepia"]))\",\"fontSize\":\(number(10...22)),"
                + "\"language\":\"\(pick(["en-GB", "en-US", "de-DE", "fr-FR", "ja-JP", "pt-BR"]))\","
                + "\"notifications\":{\"email\":\(pick(["true", "false"])),\"push\":\(pick(["true", "false"])),"
                + "\"digest\":\"\(pick(["daily", "weekly", "never"]))\"},\"updatedAt\":\(time)}"
        case 1:
            let stars = (0..<number(2...6)).map { _ in String(number(0...3)) }.joined(separator: ",")
            return "{\"level\":\(number(1...80)),\"score\":\(number(0...999_999)),\"stars\":[\(stars)],"
                + "\"checkpoint\":\"world-\(number(1...9))/stage-\(number(1...12))\","
                + "\"inventory\":{\"coins\":\(number(0...99_999)),\"gems\":\(number(0...500)),\"potions\":\(number(0...20))},"
                + "\"playtimeSec\":\(number(60...900_000))}"
        case 2:
            return "{\"volume\":0.\(number(10...99)),\"muted\":\(pick(["true", "false"])),"
                + "\"eq\":{\"bass\":\(number(-6...6)),\"mid\":\(number(-6...6)),\"treble\":\(number(-6...6))},"
                + "\"lastTrack\":\"tr_\(String(random.next() & 0xFF_FFFF, radix: 16))\",\"shuffle\":\(pick(["true", "false"])),"
                + "\"repeat\":\"\(pick(["off", "one", "all"]))\"}"
        default:
            let recent = (0..<number(1...5)).map { _ in "\"doc-\(number(1...9_999))\"" }.joined(separator: ",")
            return "{\"recent\":[\(recent)],\"pinned\":[\"doc-\(number(1...99))\"],"
                + "\"sort\":\"\(pick(["modified-desc", "name-asc", "created-desc"]))\","
                + "\"view\":\"\(pick(["grid", "list", "columns"]))\",\"zoom\":1.\(number(0...9))\(number(0...9))}"
        }
    }
}
