import SyncLedger

/// Where a reader of the change feed stands on a cluster, the same on every node: per shard,
/// the last message of the shard's log it has passed (and, inside a message that carried
/// several entries, how many of them). A change-feed position (a single node's) means nothing
/// on another node; these do, so a reader whose node dies goes on at any other.
///
/// Written `c:<shard>=<sequence>[.<entries>],…`. An event stream's id names every shard of its
/// scope: the identity's shard for a stream of one identity (`c:5=1042`), every shard for an
/// admin's wider stream. A device-message consumer's positions name the shards it has moved
/// in; a shard not named is at its start.
struct ShardPositions: Sendable, Equatable {
    /// One shard's position: message `sequence` fully sent (`entries` nil), or its first
    /// `entries` entries.
    struct Position: Sendable, Equatable {
        var sequence: UInt64
        var entries: Int?

        /// Whether the entry at `index` (1-based) of message `message` is at or before this.
        func covers(message: UInt64, index: Int) -> Bool {
            message < sequence || (message == sequence && (entries.map { index <= $0 } ?? true))
        }
    }

    /// By shard, for the shards of the scope.
    private(set) var positions: [Int: Position]

    /// The shards `scope` covers on `map`.
    static func shards(of scope: EventScope, on map: ShardMap) -> [Int] {
        if let pool = scope.pool, let identity = scope.identity { return [map.shard(pool: pool.rawValue, identity: identity.rawValue)] }
        return Array(0..<map.count)
    }

    /// The positions of a stream that starts at the end of `ledger`'s feed, `local`.
    static func start(scope: EventScope, map: ShardMap, ledger: Ledger, at local: UInt64) throws -> ShardPositions {
        var positions: [Int: Position] = [:]
        for shard in shards(of: scope, on: map) {
            positions[shard] = Position(sequence: try ledger.shardSequence(shard, appliedThrough: local), entries: nil)
        }
        return ShardPositions(positions: positions)
    }

    /// Positions from shard to position (shards not named are at their start).
    init(positions: [Int: Position] = [:]) { self.positions = positions }

    /// Reads an event id; it must name exactly the shards `scope` covers.
    /// - Throws: ``WireError`` InvalidParameterException (400) naming what is wrong.
    static func parse(_ text: String, from source: String, scope: EventScope, map: ShardMap) throws -> ShardPositions {
        try parse(text, from: source, map: map, shards: Set(shards(of: scope, on: map)),
                  what: "an event id this cluster sent (c:<shard>=<sequence>[.<entries>],… for every shard of the stream's scope)")
    }

    /// Reads positions written by ``text``: naming exactly `required` when given, else one or
    /// more shards of `map`. `what` says what they must be, for the error.
    /// - Throws: ``WireError`` InvalidParameterException (400) naming what is wrong.
    static func parse(_ text: String, from source: String, map: ShardMap, shards required: Set<Int>?, what: String) throws -> ShardPositions {
        func refuse(_ why: String) -> WireError {
            WireError.invalidParameter("\(source) must be \(what): \(why), in \"\(text.prefix(60))\"")
        }
        guard text.utf8.count <= 16 + map.count * 32, text.hasPrefix("c:") else {
            throw refuse(text.hasPrefix("c:") ? "too long" : "a cluster node's ids start with c: (a single node's change-feed position means nothing here)")
        }
        var positions: [Int: Position] = [:]
        for element in text.dropFirst(2).split(separator: ",", omittingEmptySubsequences: false) {
            let parts = element.split(separator: "=", omittingEmptySubsequences: false)
            guard parts.count == 2, let shard = digits(parts[0]).flatMap({ Int(exactly: $0) }), shard < map.count else {
                throw refuse("\"\(element.prefix(30))\" is not <shard>=<sequence> with a shard below \(map.count)")
            }
            let numbers = parts[1].split(separator: ".", omittingEmptySubsequences: false)
            guard (1...2).contains(numbers.count), let sequence = digits(numbers[0]) else { throw refuse("shard \(shard)'s sequence is not a whole number") }
            var entries: Int?
            if numbers.count == 2 {
                guard let n = digits(numbers[1]).flatMap({ Int(exactly: $0) }), n >= 1, n < 1 << 32 else { throw refuse("shard \(shard)'s entry count is not a whole number from 1") }
                entries = n
            }
            guard positions.updateValue(Position(sequence: sequence, entries: entries), forKey: shard) == nil else { throw refuse("shard \(shard) is named twice") }
        }
        guard let expected = required else { return ShardPositions(positions: positions) }
        guard Set(positions.keys) == expected else {
            throw refuse(expected.count == 1 ? "the stream's identity is on shard \(expected.first!), and the id must name it alone" : "the stream's scope spans every shard, 0 to \(map.count - 1), and the id must name each")
        }
        return ShardPositions(positions: positions)
    }

    /// 1-20 ASCII digits that fit 64 bits (no sign, space or fraction).
    private static func digits(_ text: Substring) -> UInt64? {
        guard (1...20).contains(text.utf8.count), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt64(text)
    }

    /// The position of `shard` (nil: at its start).
    subscript(shard: Int) -> Position? { positions[shard] }

    /// Whether entry `index` (from 1) of `shard`'s message `message` is at or before these positions.
    func covers(shard: Int, message: UInt64, index: Int) -> Bool {
        positions[shard]?.covers(message: message, index: index) ?? false
    }

    /// Each shard at the further of its positions here and in `other`.
    func joined(_ other: ShardPositions) -> ShardPositions {
        var result = self
        for (shard, p) in other.positions where !covers(shard: shard, message: p.sequence, index: p.entries ?? Int.max) {
            result.positions[shard] = p
        }
        return result
    }

    /// Each shard at the nearer of its positions here and in `other` (a shard at its start in
    /// either is at its start).
    func met(_ other: ShardPositions) -> ShardPositions {
        var result = ShardPositions()
        for (shard, p) in positions {
            guard let q = other.positions[shard] else { continue }
            result.positions[shard] = p.covers(message: q.sequence, index: q.entries ?? Int.max) ? q : p
        }
        return result
    }

    /// The id: shards in order.
    var text: String {
        "c:" + positions.keys.sorted().map { shard in
            let p = positions[shard]!
            return "\(shard)=\(p.sequence)" + (p.entries.map { ".\($0)" } ?? "")
        }.joined(separator: ",")
    }

    /// The change-feed position on `ledger` from which reading finds every event after these
    /// positions (the earliest over the shards; what comes before a shard's own position is
    /// passed over by ``take(shard:message:index:)``).
    /// `shards`: the shards to consider, those named when nil (a shard not named is at its start).
    func feedStart(on ledger: Ledger, over shards: [Int]? = nil) throws -> UInt64 {
        var start = UInt64.max
        for shard in shards ?? Array(positions.keys) {
            let p = positions[shard] ?? Position(sequence: 0, entries: nil)
            start = min(start, try ledger.feedPosition(shard: shard, sequence: p.sequence, entries: p.entries ?? Int.max))
        }
        return start == .max ? try ledger.lastSequence : start
    }

    /// Waits, `timeout` at most in all, until this replica applied every shard's position; the
    /// first shard still behind then, if any.
    func waitForReplica(_ ledger: Ledger, timeout: Duration) async throws -> (shard: Int, wanted: UInt64, applied: UInt64)? {
        let deadline = ContinuousClock.now + timeout
        for item in try ahead(of: ledger) {
            _ = try await ledger.waitForShard(item.shard, atLeast: item.wanted, timeout: max(.zero, deadline - .now))
        }
        return try ahead(of: ledger).first
    }

    /// Shards whose position this replica has not applied yet, with how far it got.
    func ahead(of ledger: Ledger) throws -> [(shard: Int, wanted: UInt64, applied: UInt64)] {
        try positions.sorted { $0.key < $1.key }.compactMap { shard, p in
            let applied = try ledger.shardCheckpoint(shard)
            return p.sequence > applied ? (shard, p.sequence, applied) : nil
        }
    }

    /// Moves past the entry at `index` of `message` (`count` entries) of `shard`: false (nothing
    /// changes) when it was sent before — the stream drops it.
    mutating func take(shard: Int, message: AppliedShardMessage, index: Int) -> Bool {
        guard let p = positions[shard], !p.covers(message: message.sequence, index: index) else { return false }
        positions[shard] = Position(sequence: message.sequence, entries: index >= message.count ? nil : index)
        return true
    }

    /// Moves every shard past the messages this replica applied up to feed position `local`
    /// (every event up to there was sent). - Returns: whether any moved.
    /// `shards`: the shards to move, those named when nil.
    mutating func pass(through local: UInt64, on ledger: Ledger, over shards: [Int]? = nil) throws -> Bool {
        var moved = false
        for shard in shards ?? Array(positions.keys) {
            let p = positions[shard] ?? Position(sequence: 0, entries: nil)
            guard let message = try ledger.lastShardMessage(shard, appliedThrough: local) else { continue }
            // `local` may fall inside that message (the hub reads the feed in batches).
            var next = Position(sequence: message.sequence, entries: nil)
            if message.firstLocal + UInt64(message.count) - 1 > local { next.entries = Int(local - message.firstLocal + 1) }
            if !p.covers(message: next.sequence, index: next.entries ?? Int.max) {
                positions[shard] = next
                moved = true
            }
        }
        return moved
    }
}
