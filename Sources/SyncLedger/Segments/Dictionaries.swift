import Foundation
import LedgerStorage
import Synchronization

/// A trained zstd dictionary of one identity pool.
public struct PoolDictionary: Sendable, Equatable {
    /// The id segments name in their header.
    public let id: UInt32
    /// The pool it was trained on.
    public let pool: IdentityPoolID
    /// The dictionary.
    public let bytes: [UInt8]
}

/// Dictionaries looked up by id, remembered once read — and ids that no pool has, so that a
/// segment naming an unknown dictionary costs one lookup, not a read of every pool, on every
/// request. A miss is forgotten when a pool's configuration changes.
final class DictionaryCache: Sendable {
    private struct State {
        var byID: [UInt32: [UInt8]] = [:]
        var misses: Set<UInt32> = []
        /// Bumped after every commit that changed a pool's configuration stream.
        var generation: UInt64 = 0
    }
    private let state = Mutex(State())
    /// The most misses remembered; past it the set starts over.
    static let maxMisses = 4096

    func dictionary(_ id: UInt32) -> [UInt8]? { state.withLock { $0.byID[id] } }
    func isKnownMiss(_ id: UInt32) -> Bool { state.withLock { $0.misses.contains(id) } }
    /// Read before a lookup; a miss is remembered only if no configuration changed since.
    var generation: UInt64 { state.withLock { $0.generation } }

    func remember(_ id: UInt32, _ bytes: [UInt8]) { state.withLock { $0.byID[id] = bytes } }

    func rememberMiss(_ id: UInt32, lookedUpAt generation: UInt64) {
        state.withLock { s in
            guard s.generation == generation else { return }  // a dictionary may have arrived since
            if s.misses.count >= Self.maxMisses { s.misses.removeAll() }
            s.misses.insert(id)
        }
    }

    /// Called after a commit that changed a pool's configuration stream (where dictionaries live).
    func configurationChanged() {
        state.withLock { s in
            s.generation &+= 1
            s.misses.removeAll()
        }
    }
}

/// Small segments compress poorly on their own; a dictionary trained on a pool's entries fixes
/// that. Dictionaries live in the pool's `configuration` system stream (record
/// `zstd-dictionary/<id>`, base64; `zstd-dictionary` names the current one), so they are
/// versioned and replicated like everything else, and a follower can read what it is sent.
extension Ledger {
    /// Segments smaller than this (uncompressed) use their pool's dictionary when it has one.
    public static let dictionaryThreshold = 16 << 10

    /// Trains a dictionary on up to `samples` entry bodies of `pool` and makes it the pool's
    /// current one.
    /// - Throws: `.invalidParameter` when the pool has too few entries to train on.
    @discardableResult
    public func trainDictionary(pool: IdentityPoolID, samples maxSamples: Int = 20_000, capacity: Int = 16 << 10) async throws -> PoolDictionary {
        var samples: [[UInt8]] = []
        for (stream, _) in try streams(pool: pool) where !stream.isInternal {
            guard samples.count < maxSamples else { break }
            guard let segment = try streamSegment(stream, after: 0, maxBytes: 1 << 20) else { continue }
            for e in segment.entries.prefix(maxSamples - samples.count) { samples.append(Segment(scope: segment.scope, entries: [e]).plainBytes()) }
        }
        guard samples.count >= 100 else {
            throw LedgerError(.invalidParameter, "pool \(pool) has \(samples.count) entries; a dictionary needs at least 100 to train on")
        }
        let bytes: [UInt8]
        do { bytes = try Zstd.trainDictionary(samples: samples, capacity: capacity) } catch {
            throw LedgerError(.invalidParameter, "zstd could not train a dictionary for pool \(pool): \(error)")
        }
        let id = Zstd.dictionaryID(bytes)
        let encoded = Data(bytes).base64EncodedString()
        try await appendSystem(Self.systemStream(pool, "configuration"), author: "syncledger-dict") { _ in
            [.put(key: "zstd-dictionary/\(id)", value: encoded, deviceModified: nil),
             .put(key: "zstd-dictionary", value: "\(id)", deviceModified: nil)]
        }
        dictionaries.remember(id, bytes)
        return PoolDictionary(id: id, pool: pool, bytes: bytes)
    }

    /// The pool's current dictionary, if it has one.
    public func currentDictionary(pool: IdentityPoolID) throws -> PoolDictionary? {
        let stream = Self.systemStream(pool, "configuration")
        guard let text = try recordValue(stream, key: "zstd-dictionary"), let id = UInt32(text),
              let bytes = try dictionary(id: id) else { return nil }
        return PoolDictionary(id: id, pool: pool, bytes: bytes)
    }

    /// The dictionary with this id, from any pool (or from `pool` only), or nil.
    ///
    /// With a pool it is one read of that pool's configuration, and a miss is not remembered
    /// (a dictionary trained meanwhile by another process is found); without, every pool is
    /// looked at, and a miss is remembered until a configuration changes in this process.
    public func dictionary(id: UInt32, pool: IdentityPoolID? = nil) throws -> [UInt8]? {
        if let hit = dictionaries.dictionary(id) { return hit }
        if let pool {
            guard let text = try recordValue(Self.systemStream(pool, "configuration"), key: "zstd-dictionary/\(id)"),
                  let data = Data(base64Encoded: text) else { return nil }
            dictionaries.remember(id, Array(data))
            return Array(data)
        }
        if dictionaries.isKnownMiss(id) { return nil }
        let generation = dictionaries.generation
        for stream in try poolsWithStreams().map({ Self.systemStream($0, "configuration") }) {
            if let text = try recordValue(stream, key: "zstd-dictionary/\(id)"), let data = Data(base64Encoded: text) {
                let bytes = Array(data)
                dictionaries.remember(id, bytes)
                return bytes
            }
        }
        dictionaries.rememberMiss(id, lookedUpAt: generation)
        return nil
    }

    /// A decoder's dictionary lookup backed by this ledger.
    var dictionaryLookup: (UInt32) -> [UInt8]? { { [self] id in try? self.dictionary(id: id) } }
}

extension Ledger {
    /// Decodes segment bytes, finding any dictionary they name in this ledger. See
    /// ``Segment/decode(_:dictionaries:maxUncompressedSize:admit:)``.
    ///
    /// A stream segment's dictionary is looked for in its own pool only (one read); a feed
    /// segment's in every pool.
    public func decodeSegment(_ bytes: [UInt8], maxUncompressedSize: UInt64 = Segment.maxUncompressedSize,
                              admit: (Segment.Header) throws -> Void = { _ in }) throws -> Segment {
        var pool: IdentityPoolID?
        return try Segment.decode(bytes, dictionaries: { [self] id in try? self.dictionary(id: id, pool: pool) },
                                  maxUncompressedSize: maxUncompressedSize, admit: { header in
            if case .stream(let stream) = header.scope { pool = stream.pool }
            try admit(header)
        })
    }
}
