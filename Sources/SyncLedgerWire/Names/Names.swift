import Crypto

/// An identity pool id, e.g. `us-east-1:0f3c…`: `[\w-]+:[0-9a-f-]+`, 1–55 characters.
public struct IdentityPoolID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The id as given.
    public let rawValue: String

    /// Validates `rawValue` against Cognito's pattern and length.
    /// - Throws: ``LedgerError`` `.invalidParameter` naming the value and the rule.
    public init(_ rawValue: String) throws(LedgerError) {
        try validateCognitoID(rawValue, what: "identity pool id")
        self.rawValue = rawValue
    }

    public var description: String { rawValue }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// An identity id, e.g. `us-east-1:1a2b…`: `[\w-]+:[0-9a-f-]+`, 1–55 characters.
public struct IdentityID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The id as given.
    public let rawValue: String

    /// Validates `rawValue` against Cognito's pattern and length.
    /// - Throws: ``LedgerError`` `.invalidParameter` naming the value and the rule.
    public init(_ rawValue: String) throws(LedgerError) {
        try validateCognitoID(rawValue, what: "identity id")
        self.rawValue = rawValue
    }

    public var description: String { rawValue }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A dataset name: 1–128 characters of `[A-Za-z0-9_.:-]`, and not `.` or `..` (which an HTTP
/// path would read as a dot segment).
public struct DatasetName: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The name as given.
    public let rawValue: String

    /// Validates `rawValue` against Cognito's pattern and length, and refuses `.` and `..`.
    /// - Throws: ``LedgerError`` `.invalidParameter` naming the value and the rule.
    public init(_ rawValue: String) throws(LedgerError) {
        try self.init(stored: rawValue)
        guard !isDotSegment else {
            throw LedgerError(.invalidParameter, "dataset name \(quoted(rawValue)) is not allowed: \".\" and \"..\" are path dot segments")
        }
        guard !isReserved else {
            throw LedgerError(.invalidParameter, "dataset name \(quoted(rawValue)) is reserved: names starting with \"_syncledger.\" are SyncLedger's own streams")
        }
    }

    /// The dataset of an identity that holds its device-to-server messages.
    public static let messages = try! DatasetName(stored: "_syncledger.messages")

    /// The dataset of an identity that records its SyncTrigger invocations (record
    /// `last/<dataset>`): in the identity's own shard, beside the writes it audits.
    public static let syncTriggerAudit = try! DatasetName(stored: "_syncledger.sync-trigger")

    /// The dataset of an identity that records the redactions of its values (record
    /// `redaction/<n>`): in the identity's own shard, with the removals a redaction appends.
    public static let redactions = try! DatasetName(stored: "_syncledger.redactions")

    /// The dataset of an identity that records the copies identity merges made into it on a
    /// cluster (record `copied/<dataset>`), in the same commit as each copy.
    public static let merges = try! DatasetName(stored: "_syncledger.merges")

    /// Whether it is one of SyncLedger's records about an identity (its redactions, SyncTrigger
    /// invocations, merge copies) rather than the identity's data (its datasets, its messages).
    public var isAuditRecord: Bool { isReserved && self != DatasetName.messages }

    /// Whether the name is one of SyncLedger's own (`_syncledger.…`), which the Cognito API
    /// neither shows nor writes.
    public var isReserved: Bool { rawValue.hasPrefix("_syncledger.") }

    /// Cognito's pattern and length only: how names already in a ledger (or a segment) are read,
    /// so that a `.` written by an older version stays readable. New writes to a user's dataset
    /// check ``isDotSegment`` as well (the domain's `Ledger.validateChange`).
    package init(stored rawValue: String) throws(LedgerError) {
        let utf8 = rawValue.utf8
        guard (1...128).contains(utf8.count), utf8.allSatisfy({ isWordByte($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: "-") }) else {
            throw LedgerError(.invalidParameter, "dataset name \(quoted(rawValue)) must be 1-128 characters of A-Z a-z 0-9 _ . : -")
        }
        self.rawValue = rawValue
    }

    /// The name of the copy of dataset `name` of identity `source` that an identity merge makes
    /// under the survivor (what ListRecords' `MergedDatasetNames` lists): `<name>.<source>`, or —
    /// when that passes 128 characters — as much of `name` as fits, `-`, 8 hex digits of its
    /// SHA-256 and `.<source>`, so two long names never share a copy.
    public static func mergedCopyName(_ name: String, source: String) -> String {
        let full = "\(name).\(source)"
        if full.utf8.count <= 128 { return full }
        let hash = Hex.encode(SHA256.hash(data: Array(name.utf8)).prefix(4))
        let keep = 128 - source.utf8.count - 1 - 9
        return String(name.utf8.prefix(keep))! + "-" + hash + "." + source
    }

    /// Whether the name is `.` or `..`.
    package var isDotSegment: Bool { rawValue == "." || rawValue == ".." }

    public var description: String { rawValue }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// The name of one log stream: an identity's dataset.
///
/// Copies share one immutable storage object that also holds the storage key, so passing a
/// name around costs one reference count and ``key`` costs nothing — the hot paths (segments,
/// merge, the write path) handle a name per entry.
public struct StreamName: Hashable, Sendable, Comparable, CustomStringConvertible {
    private final class Storage: Sendable {
        let pool: IdentityPoolID
        let identity: IdentityID
        let dataset: DatasetName
        let key: [UInt8]

        init(pool: IdentityPoolID, identity: IdentityID, dataset: DatasetName) {
            self.pool = pool
            self.identity = identity
            self.dataset = dataset
            var bytes = Array(pool.rawValue.utf8)
            bytes.append(0)
            bytes.append(contentsOf: identity.rawValue.utf8)
            bytes.append(0)
            bytes.append(contentsOf: dataset.rawValue.utf8)
            key = bytes
        }
    }

    private let storage: Storage

    /// The identity pool.
    public var pool: IdentityPoolID { storage.pool }
    /// The identity that owns the dataset.
    public var identity: IdentityID { storage.identity }
    /// The dataset.
    public var dataset: DatasetName { storage.dataset }

    /// A stream from already validated parts.
    public init(pool: IdentityPoolID, identity: IdentityID, dataset: DatasetName) {
        storage = Storage(pool: pool, identity: identity, dataset: dataset)
    }

    /// Validates the three parts.
    /// - Throws: ``LedgerError`` `.invalidParameter` for the first part that is invalid.
    public init(pool: String, identity: String, dataset: String) throws(LedgerError) {
        self.init(pool: try IdentityPoolID(pool), identity: try IdentityID(identity), dataset: try DatasetName(dataset))
    }

    /// `pool/identity/dataset`.
    public var description: String { "\(pool)/\(identity)/\(dataset)" }

    public static func == (a: Self, b: Self) -> Bool { a.storage === b.storage || a.storage.key == b.storage.key }
    /// Hashes the three names (equal keys have equal names, as NUL separates them and is in
    /// none), each by `String`'s own hashing, which feeds UTF-8 in bulk.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(storage.pool.rawValue)
        hasher.combine(storage.identity.rawValue)
        hasher.combine(storage.dataset.rawValue)
    }
    public static func < (a: Self, b: Self) -> Bool { a.key.lexicographicallyPrecedes(b.key) }

    /// An identifier of this value's storage, equal for copies of it: a cheap first test where
    /// names mostly come from one source (see `StreamNumbering`).
    package var instanceID: ObjectIdentifier { ObjectIdentifier(storage) }

    /// The storage key and canonical form: the three UTF-8 names separated by NUL bytes
    /// (NUL appears in none of them), so keys of one identity and of one pool are prefixes.
    package var key: [UInt8] { storage.key }

    /// Parses ``key``.
    package init(key: some Collection<UInt8>) throws(LedgerError) {
        let parts = key.split(separator: 0, maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw LedgerError(.corruptData, "stream key of \(key.count) bytes has \(parts.count) parts, not 3")
        }
        self.init(pool: try IdentityPoolID(String(decoding: parts[0], as: UTF8.self)), identity: try IdentityID(String(decoding: parts[1], as: UTF8.self)),
                  dataset: try DatasetName(stored: String(decoding: parts[2], as: UTF8.self)))
    }

    /// The key prefix of every stream of one identity.
    package static func prefix(pool: IdentityPoolID, identity: IdentityID? = nil) -> [UInt8] {
        var bytes = Array(pool.rawValue.utf8)
        bytes.append(0)
        if let identity {
            bytes.append(contentsOf: identity.rawValue.utf8)
            bytes.append(0)
        }
        return bytes
    }
}

@inline(__always)
private func isWordByte(_ b: UInt8) -> Bool {
    (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || b == 0x5f
}

/// `s` in double quotes, cut at 80 characters: how an error message shows a value it refuses.
package func quoted(_ s: String) -> String {
    let shown = s.count > 80 ? String(s.prefix(80)) + "…" : s
    return "\"\(shown)\""
}

/// `[\w-]+:[0-9a-f-]+`, 1–55 characters (Cognito's IdentityId and IdentityPoolId).
private func validateCognitoID(_ s: String, what: String) throws(LedgerError) {
    let utf8 = s.utf8
    var valid = (1...55).contains(utf8.count)
    var seenColon = false, regionLength = 0, idLength = 0
    if valid {
        for b in utf8 {
            if seenColon {
                guard (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) || b == UInt8(ascii: "-") else { valid = false; break }
                idLength += 1
            } else if b == UInt8(ascii: ":") {
                seenColon = true
            } else {
                guard isWordByte(b) || b == UInt8(ascii: "-") else { valid = false; break }
                regionLength += 1
            }
        }
    }
    guard valid, seenColon, regionLength > 0, idLength > 0 else {
        throw LedgerError(.invalidParameter, "\(what) \(quoted(s)) must match [\\w-]+:[0-9a-f-]+ and be 1-55 characters")
    }
}
