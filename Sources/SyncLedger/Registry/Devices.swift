import Foundation
import LedgerStorage
import Synchronization

/// The device registry: records of each pool's `devices` system stream.
///
/// - `device/<code>` → the ``Device`` as JSON
/// - `tokens/<PLATFORM>/<token>` → the code of the one device that has the token
/// - `linked/<identity>/<code>` → `1` while the device is logged in as the identity
/// - `owned/<identity>/<code>` → `1` for the devices the identity created
/// - `token/<identity>/<PLATFORM>/<token>` → code: the index of versions before the registry,
///   read by RegisterDevice and replaced by the two above when it sees one
///
/// Subscriptions (`<identity>/<dataset>/<code>` in the `subscriptions` stream) belong to the
/// link: a logout takes the identity's away in the same transaction.
extension Ledger {
    static func devicesStream(_ pool: IdentityPoolID) -> StreamName { systemStream(pool, "devices") }

    /// An APNs token is hex and case-insensitive (iOS registers it in upper case): it is kept in
    /// lower case, so both spellings are one device. Other tokens are kept as given.
    static func normalizedToken(_ token: String, platform: Platform) -> String {
        guard platform == .apns || platform == .apnsSandbox, token.allSatisfy(\.isHexDigit) else { return token }
        return token.lowercased()
    }

    /// Checks a push token: 1-4096 bytes of printable ASCII; a webhook address is an http(s)
    /// URL of at most 2048 bytes (where it may point is the transport's rule).
    static func validateToken(_ token: String, platform: Platform) throws(LedgerError) {
        guard !token.isEmpty, token.utf8.count <= 4096 else {
            throw LedgerError(.invalidParameter, "a push token must be 1-4096 bytes, not \(token.utf8.count)")
        }
        guard token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw LedgerError(.invalidParameter, "a push token must be printable ASCII without spaces")
        }
        if platform == .webhook {
            guard token.utf8.count <= 2048, token.hasPrefix("https://") || token.hasPrefix("http://"), URL(string: token)?.host != nil else {
                throw LedgerError(.invalidParameter, "a WEBHOOK token must be an http(s) URL of at most 2048 bytes, not \(quoted(token))")
            }
        }
    }

    static func loadDevice(_ view: StoredDatasetView, _ code: String, stream: StreamName) throws -> Device? {
        try view.record("device/\(code)")?.value.map { try decode(Device.self, $0, stream: stream) }
    }

    /// A device code: a random UUID in lower case (122 random bits, so unique across the whole
    /// installation; creation also checks the pool).
    static func newDeviceCode() -> String { UUID().uuidString.lowercased() }

    /// Checks that a device code has the form codes have (so that a hostile one is refused
    /// before it is looked up): 1-64 characters of `[A-Za-z0-9-]`.
    public static func validateDeviceCode(_ code: String) throws(LedgerError) {
        guard (1...64).contains(code.utf8.count), code.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) || $0 == 0x2d }) else {
            throw LedgerError(.invalidParameter, "DeviceCode \(quoted(code)) must be 1-64 characters of A-Z a-z 0-9 -")
        }
    }

    /// Runs `body` on the pool's `devices` view (and, when it asks, `subscriptions`) in one
    /// write transaction, and appends what it returns: the one way the registry changes.
    func changeRegistry<T: Sendable>(_ pool: IdentityPoolID, author: String,
                                     _ body: @escaping @Sendable (RegistryChange) throws -> T) async throws -> T {
        try await write(on: Self.devicesStream(pool)) { [self] txn in
            let change = try RegistryChange(ledger: self, txn: txn, pool: pool)
            let result = try body(change)
            if !change.deviceEvents.isEmpty {
                _ = try self.append(txn, to: change.devices, author: author, events: change.deviceEvents)
            }
            if !change.subscriptionEvents.isEmpty {
                _ = try self.append(txn, to: Self.systemStream(pool, "subscriptions"), author: author, events: change.subscriptionEvents)
            }
            return result
        }
    }

    // MARK: Reading

    /// The device of `pool` with code `id`, or nil.
    public func device(pool: IdentityPoolID, id: String) throws -> Device? {
        let stream = Self.devicesStream(pool)
        return try recordValue(stream, key: "device/\(id)").map { try Self.decode(Device.self, $0, stream: stream) }
    }

    /// The devices logged in as `identity`, by device code.
    public func devices(pool: IdentityPoolID, identity: IdentityID) throws -> [Device] {
        let stream = Self.devicesStream(pool)
        var codes = Set(try records(stream, prefix: "linked/\(identity)/").map { String($0.0.split(separator: "/").last ?? "") })
        // Devices RegisterDevice made before the registry: linked by their legacy token index.
        for (_, code) in try records(stream, prefix: "token/\(identity)/") { codes.insert(code) }
        return try codes.sorted().compactMap { try device(pool: pool, id: $0) }.filter { $0.identity == identity.rawValue }
    }

    /// What `GET /devices` shows an identity: the devices logged in as it, and those it created
    /// that nobody is logged in on (an app's install identity sees its own device). A device it
    /// created on which another identity is logged in is not shown: that would tell it who.
    public func visibleDevices(pool: IdentityPoolID, identity: IdentityID) throws -> [Device] {
        let stream = Self.devicesStream(pool)
        var found = Dictionary(uniqueKeysWithValues: try devices(pool: pool, identity: identity).map { ($0.id, $0) })
        for (key, _) in try records(stream, prefix: "owned/\(identity)/") {
            let code = String(key.split(separator: "/").last ?? "")
            if found[code] == nil, let device = try device(pool: pool, id: code), device.identity == nil { found[code] = device }
        }
        return found.keys.sorted().map { found[$0]! }
    }

    /// Every device of `pool` (at most `limit`), by device code.
    public func allDevices(pool: IdentityPoolID, limit: Int = .max) throws -> [Device] {
        let stream = Self.devicesStream(pool)
        return try records(stream, prefix: "device/").prefix(limit).map { try Self.decode(Device.self, $0.1, stream: stream) }
    }

    /// The devices subscribed to `dataset`: those logged in as its identity that receive every
    /// dataset, and those that subscribed to this one (Cognito's SubscribeToDataset).
    public func subscribers(of dataset: StreamName) throws -> [Device] {
        var found: [String: Device] = [:]
        for device in try devices(pool: dataset.pool, identity: dataset.identity) where device.subscribesAll == true {
            found[device.id] = device
        }
        let rows = try records(Self.systemStream(dataset.pool, "subscriptions"), prefix: "\(dataset.identity)/\(dataset.dataset)/")
        for (key, _) in rows {
            let code = String(key.split(separator: "/").last ?? "")
            guard found[code] == nil, let device = try device(pool: dataset.pool, id: code), device.identity == dataset.identity.rawValue else { continue }
            found[code] = device
        }
        return found.keys.sorted().map { found[$0]! }
    }
}

/// One change of a pool's registry in progress: the views as they are, and the events to
/// append. Only ``Ledger/changeRegistry(_:author:_:)`` makes one.
final class RegistryChange: @unchecked Sendable {
    let ledger: Ledger
    let txn: Transaction
    let pool: IdentityPoolID
    let devices: StreamName
    let view: StoredDatasetView
    private(set) var deviceEvents: [Event] = []
    private(set) var subscriptionEvents: [Event] = []
    /// Device records written so far (the view does not show this change's own events).
    private var written: [String: Device] = [:]
    private var keys: [String: String?] = [:]

    init(ledger: Ledger, txn: Transaction, pool: IdentityPoolID) throws {
        self.ledger = ledger
        self.txn = txn
        self.pool = pool
        devices = Ledger.devicesStream(pool)
        view = try StoredDatasetView(txn: txn, schema: ledger.schema, stream: devices, streamID: try ledger.head(txn, devices)?.id ?? 0)
    }

    /// The value under `key` as this change leaves it.
    func value(_ key: String) throws -> String? {
        if let pending = keys[key] { return pending }
        return try view.record(key)?.value
    }

    func device(_ code: String) throws -> Device? {
        if let pending = written[code] { return pending }
        return try Ledger.loadDevice(view, code, stream: devices)
    }

    func put(_ device: Device) {
        written[device.id] = device
        setKey("device/\(device.id)", Ledger.json(device))
    }

    func setKey(_ key: String, _ value: String?) {
        keys[key] = .some(value)
        deviceEvents.removeAll { $0.key == key }
        deviceEvents.append(value.map { .put(key: key, value: $0, deviceModified: nil) } ?? .remove(key: key, deviceModified: nil))
    }

    func liveKeys(prefix: String) throws -> [(String, String)] {
        var rows: [String: String?] = [:]
        for (key, value) in try view.storedRecords(prefix: prefix) { rows[key] = .some(value) }
        for (key, value) in keys where key.hasPrefix(prefix) { rows[key] = value }
        var live: [(String, String)] = []
        for (key, value) in rows { if let value { live.append((key, value)) } }
        return live.sorted { $0.0 < $1.0 }
    }

    /// Removes the device's subscriptions to `identity`'s datasets.
    func dropSubscriptions(identity: String, code: String) throws {
        let stream = Ledger.systemStream(pool, "subscriptions")
        let subs = try StoredDatasetView(txn: txn, schema: ledger.schema, stream: stream, streamID: try ledger.head(txn, stream)?.id ?? 0)
        for (key, _) in try subs.storedRecords(prefix: "\(identity)/") where key.hasSuffix("/\(code)") {
            subscriptionEvents.append(.remove(key: key, deviceModified: nil))
        }
    }

    func subscribe(_ key: String, platform: Platform, on: Bool) throws {
        let stream = Ledger.systemStream(pool, "subscriptions")
        let subs = try StoredDatasetView(txn: txn, schema: ledger.schema, stream: stream, streamID: try ledger.head(txn, stream)?.id ?? 0)
        let subscribed = try subs.record(key)?.value != nil
        guard subscribed != on else { return }
        subscriptionEvents.append(on ? .put(key: key, value: platform.rawValue, deviceModified: nil) : .remove(key: key, deviceModified: nil))
    }

    /// A new device with a fresh code, created by `owner` (at most `limit` per owner).
    /// - Throws: `.limitExceeded` when the owner already created `limit` devices.
    func createDevice(owner: String, platform: Platform, now: Timestamp, limit: Int) throws -> Device {
        let owned = try view.countStored(prefix: "owned/\(owner)/", limit: limit)
        guard owned < limit else {
            throw LedgerError(.limitExceeded, "identity \(owner) already registered \(owned) devices; the limit is \(limit)")
        }
        var code = Ledger.newDeviceCode()
        while try device(code) != nil { code = Ledger.newDeviceCode() }
        var device = Device(id: code, identity: nil, platform: platform, token: nil)
        device.owner = owner
        device.created = now
        setKey("owned/\(owner)/\(code)", "1")
        return device
    }

    /// Links `device` to `identity` (after unlinking it from anyone else).
    func link(_ device: inout Device, to identity: String, subscribesAll: Bool?, now: Timestamp) throws {
        if device.identity == identity, subscribesAll == nil || device.subscribesAll == subscribesAll { return }  // as it is
        if let previous = device.identity, previous != identity { try unlink(&device, now: now) }
        if device.identity == nil { device.linkedAt = now }
        device.identity = identity
        if let subscribesAll { device.subscribesAll = subscribesAll }
        device.updated = now
        setKey("linked/\(identity)/\(device.id)", "1")
    }

    /// Unlinks `device` from its identity: that identity's notifications stop reaching it.
    func unlink(_ device: inout Device, now: Timestamp) throws {
        guard let identity = device.identity else { return }
        setKey("linked/\(identity)/\(device.id)", nil)
        if let platform = device.platform, let token = device.token {
            let legacy = "token/\(identity)/\(platform.rawValue)/\(token)"
            if try value(legacy) != nil { setKey(legacy, nil) }
        }
        try dropSubscriptions(identity: identity, code: device.id)
        device.identity = nil
        device.updated = now
    }

    /// Gives `device` the token (nil: none), taking it from any other device that had it.
    func setToken(_ device: inout Device, _ token: String?, now: Timestamp) throws {
        guard let platform = device.platform else { return }
        if let old = device.token {
            if old == token, device.disabledAt == nil { return }
            if old != token {
                setKey("tokens/\(platform.rawValue)/\(old)", nil)
                if let identity = device.identity {
                    let legacy = "token/\(identity)/\(platform.rawValue)/\(old)"
                    if try value(legacy) != nil { setKey(legacy, nil) }
                }
            }
        }
        if let token {
            let key = "tokens/\(platform.rawValue)/\(token)"
            if let holder = try value(key), holder != device.id, var other = try self.device(holder) {
                // A token belongs to one device: the other one loses it.
                other.token = nil
                other.registered = nil
                other.disabledAt = nil
                other.disabledReason = nil
                other.updated = now
                put(other)
            }
            setKey(key, device.id)
        }
        device.token = token
        device.registered = token == nil ? nil : now
        device.disabledAt = nil
        device.disabledReason = nil
        device.updated = now
    }
}
