public import Foundation
import SyncLedgerWire

/// Which way a named sync moves records (Mobile Sync's `syncType`).
public enum SyncType: String, Sendable, Hashable, Codable, CaseIterable {
    /// Server → device: pull and write locally (``MergeMode`` decides what happens to local changes).
    case syncDown
    /// Device → server: push the dirty records (``MergeMode`` decides which win).
    case syncUp
    /// Both: for each dataset, down then up, with the same merge mode.
    case sync

    /// Whether it pulls (and so ``SyncManager/cleanResyncGhosts(_:)`` applies).
    public var isDown: Bool { self != .syncUp }
    /// Whether it pushes.
    public var isUp: Bool { self != .syncDown }
}

/// What a named sync does with records changed on both sides (Mobile Sync's `MergeMode`).
/// See ``SyncManager`` for the exact semantics of each mode in each direction.
public enum MergeMode: String, Sendable, Hashable, Codable, CaseIterable {
    /// The side the sync moves records *to* loses: down replaces local unsynced changes with
    /// the server's records; up pushes local changes over newer server changes. The default.
    case overwrite = "OVERWRITE"
    /// Records changed on the receiving side are left alone: down skips records dirty locally;
    /// up skips records the server changed since this device last saw them (they stay dirty).
    case leaveIfChanged = "LEAVE_IF_CHANGED"
}

/// A named sync's options (`"options": {"mergeMode": ...}`).
public struct SyncOptions: Sendable, Hashable, Codable {
    /// The merge mode; ``MergeMode/overwrite`` when the config leaves it out.
    public var mergeMode: MergeMode

    /// Options.
    public init(mergeMode: MergeMode = .overwrite) { self.mergeMode = mergeMode }
}

/// One named sync in a config file: its name, direction, datasets and options.
///
/// Decoding validates: a missing or empty `syncName`, an unknown `syncType` or `mergeMode`,
/// and a missing, empty or invalid `datasets` list (names checked with `SyncLedger.DatasetName`,
/// as the server does; a repeated dataset) throw ``SyncClientError/invalidParameter(_:)``
/// naming the sync and the field.
public struct SyncDefinition: Sendable, Hashable, Codable {
    /// The sync's unique name (1-256 bytes of UTF-8).
    public var syncName: String
    /// Its direction.
    public var syncType: SyncType
    /// The datasets it syncs, in order (the analog of Mobile Sync's `target`).
    public var datasets: [String]
    /// Its options.
    public var options: SyncOptions

    /// A definition, validated like a decoded one.
    /// - Throws: ``SyncClientError/invalidParameter(_:)``.
    public init(syncName: String, syncType: SyncType, datasets: [String], options: SyncOptions = SyncOptions()) throws {
        self.syncName = syncName
        self.syncType = syncType
        self.datasets = datasets
        self.options = options
        try validate()
    }

    enum CodingKeys: String, CodingKey { case syncName, syncType, datasets, options }
    enum OptionKeys: String, CodingKey { case mergeMode }

    /// Decodes and validates one entry.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let index = decoder.codingPath.last?.intValue.map { "#\($0 + 1)" } ?? ""
        guard let name = try? c.decodeIfPresent(String.self, forKey: .syncName), !name.isEmpty else {
            throw SyncClientError.invalidParameter("sync \(index): syncName is missing, empty or not a string")
        }
        func bad(_ field: String, _ why: String) -> SyncClientError { .invalidParameter("sync \(Self.quote(name)): \(field) \(why)") }
        guard let type = try? c.decodeIfPresent(String.self, forKey: .syncType) else { throw bad("syncType", "is missing or not a string") }
        guard let syncType = SyncType(rawValue: type) else {
            throw bad("syncType", "\(Self.quote(type)) is not one of \(SyncType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let datasets = try? c.decodeIfPresent([String].self, forKey: .datasets) else { throw bad("datasets", "is missing or not a list of strings") }
        var mergeMode = MergeMode.overwrite
        if c.contains(.options) {
            guard let o = try? c.nestedContainer(keyedBy: OptionKeys.self, forKey: .options) else { throw bad("options", "is not an object") }
            if o.contains(.mergeMode) {
                guard let mode = try? o.decode(String.self, forKey: .mergeMode) else { throw bad("options.mergeMode", "is not a string") }
                guard let m = MergeMode(rawValue: mode) else {
                    throw bad("options.mergeMode", "\(Self.quote(mode)) is not one of \(MergeMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                mergeMode = m
            }
        }
        try self.init(syncName: name, syncType: syncType, datasets: datasets, options: SyncOptions(mergeMode: mergeMode))
    }

    /// Checks the name and the datasets.
    func validate() throws {
        guard (1...256).contains(syncName.utf8.count) else {
            throw SyncClientError.invalidParameter("sync \(Self.quote(String(syncName.prefix(64)))): syncName must be 1-256 bytes of UTF-8")
        }
        guard !datasets.isEmpty else { throw SyncClientError.invalidParameter("sync \(Self.quote(syncName)): datasets is empty") }
        var seen = Set<String>()
        for name in datasets {
            do { _ = try DatasetName(name) } catch {
                throw SyncClientError.invalidParameter("sync \(Self.quote(syncName)): datasets: \(error.message)")
            }
            guard seen.insert(name).inserted else {
                throw SyncClientError.invalidParameter("sync \(Self.quote(syncName)): datasets: \(Self.quote(name)) is listed twice")
            }
        }
    }

    static func quote(_ s: String) -> String { "\"\(s)\"" }
}

/// A named syncs config file, after Mobile Sync's `usersyncs.json`:
///
/// ```json
/// {"syncs":[
///   {"syncName":"prefsDown","syncType":"syncDown","datasets":["prefs","notes"],
///    "options":{"mergeMode":"LEAVE_IF_CHANGED"}},
///   {"syncName":"prefsUp","syncType":"syncUp","datasets":["prefs"]}]}
/// ```
///
/// `syncType` is `syncDown`, `syncUp` or `sync` (both); `options` and `mergeMode` may be left
/// out (``MergeMode/overwrite``). A name repeated *within one file* is refused (it is a mistake
/// in the file, and which entry was meant cannot be known); a name that a ``SyncManager``
/// already has is skipped at load, as Mobile Sync does (see ``SyncManager/load(config:)``).
public struct SyncConfig: Sendable, Hashable, Codable {
    /// The syncs, in file order.
    public var syncs: [SyncDefinition]

    /// A config, checked for repeated names.
    /// - Throws: ``SyncClientError/invalidParameter(_:)``.
    public init(syncs: [SyncDefinition]) throws {
        self.syncs = syncs
        try checkNames()
    }

    enum CodingKeys: String, CodingKey { case syncs }

    /// Decodes and validates a config.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        guard c.contains(.syncs) else { throw SyncClientError.invalidParameter("the config has no \"syncs\" list") }
        syncs = try c.decode([SyncDefinition].self, forKey: .syncs)
        try checkNames()
    }

    /// Parses a config from JSON.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` for JSON that is not a config, naming
    ///   the sync and the field at fault.
    public init(json: Data) throws {
        do {
            self = try JSONDecoder().decode(SyncConfig.self, from: json)
        } catch let error as SyncClientError {
            throw error
        } catch {
            throw SyncClientError.invalidParameter("the config is not valid JSON of the expected shape: \(error)")
        }
    }

    /// Reads and parses a config file.
    /// - Throws: ``SyncClientError/invalidParameter(_:)`` when it cannot be read or parsed.
    public init(contentsOf path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SyncClientError.invalidParameter("cannot read the sync config \(path)")
        }
        try self.init(json: data)
    }

    private func checkNames() throws {
        var seen = Set<String>()
        for s in syncs where !seen.insert(s.syncName).inserted {
            throw SyncClientError.invalidParameter("sync \(SyncDefinition.quote(s.syncName)): syncName is used by more than one sync in the config")
        }
    }
}
