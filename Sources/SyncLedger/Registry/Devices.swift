import Foundation
import LedgerStorage
import Synchronization

extension Ledger {
    // MARK: Devices

    /// An APNs token is hex and case-insensitive (iOS registers it in upper case): it is kept in
    /// lower case, so both spellings are one device. Other tokens are kept as given.
    static func normalizedToken(_ token: String, platform: Platform) -> String {
        guard platform == .apns || platform == .apnsSandbox, token.allSatisfy(\.isHexDigit) else { return token }
        return token.lowercased()
    }

    /// Registers a device for push sync and returns its id.
    ///
    /// The same token registered again for the same identity and platform returns the same id
    /// (and revives it if a push service had reported the token dead). A fresh token on a
    /// platform where the identity has a device whose token was reported dead takes that
    /// device's place: its id and subscriptions come back with the new token.
    public func registerDevice(pool: IdentityPoolID, identity: IdentityID, platform: Platform, token rawToken: String) async throws -> String {
        try Self.requireUserIdentity(identity)
        guard !rawToken.isEmpty, rawToken.utf8.count <= 4096 else {
            throw LedgerError(.invalidParameter, "a push token must be 1-4096 bytes, not \(rawToken.utf8.count)")
        }
        let token = Self.normalizedToken(rawToken, platform: platform)
        let stream = Self.systemStream(pool, "devices")
        let platformPrefix = "token/\(identity)/\(platform.rawValue)/"
        let tokenKey = platformPrefix + token
        let fresh = UUID().uuidString.lowercased()
        let id = Mutex<String>(fresh)
        let maxDevices = options.limits.maxDevicesPerIdentity
        let now = options.clock()
        try await appendSystem(stream, author: identity.rawValue) { view in
            func load(_ deviceID: String) throws -> Device? {
                try view.record("device/\(deviceID)")?.value.map { try Self.decode(Device.self, $0, stream: stream) }
            }
            if let existing = try view.record(tokenKey)?.value {
                id.withLock { $0 = existing }
                guard var device = try load(existing), !device.isEnabled else { return [] }
                device.disabledAt = nil
                device.disabledReason = nil
                device.registered = now
                return [.put(key: "device/\(existing)", value: Self.json(device), deviceModified: nil)]
            }
            // A device of this identity and platform whose token was reported dead: revive it.
            for (key, deviceID) in try view.storedRecords(prefix: platformPrefix) {
                guard var device = try load(deviceID), !device.isEnabled else { continue }
                id.withLock { $0 = deviceID }
                device.token = token
                device.registered = now
                device.disabledAt = nil
                device.disabledReason = nil
                return [
                    .remove(key: key, deviceModified: nil),
                    .put(key: "device/\(deviceID)", value: Self.json(device), deviceModified: nil),
                    .put(key: tokenKey, value: deviceID, deviceModified: nil),
                ]
            }
            let registered = try view.countStored(prefix: "token/\(identity)/", limit: maxDevices)
            guard registered < maxDevices else {
                throw LedgerError(.limitExceeded, "identity \(identity) already has \(registered) registered devices; the limit is \(maxDevices)")
            }
            let device = Device(id: fresh, identity: identity.rawValue, platform: platform, token: token, registered: now)
            return [
                .put(key: "device/\(fresh)", value: Self.json(device), deviceModified: nil),
                .put(key: tokenKey, value: fresh, deviceModified: nil),
            ]
        }
        return id.withLock { $0 }
    }

    /// Records that a push service reported `token` of device `deviceID` dead (APNs 410 or
    /// `BadDeviceToken`, FCM `UNREGISTERED`): pushes to it stop; its id and subscriptions stay.
    /// Nothing happens when the device has another token by now, or — with `reportedAt`, APNs's
    /// timestamp of when the token stopped being valid — when the token was registered after that.
    /// - Returns: whether the device was disabled.
    @discardableResult
    public func disableToken(pool: IdentityPoolID, deviceID: String, token: String, reason: String, reportedAt: Timestamp? = nil) async throws -> Bool {
        let stream = Self.systemStream(pool, "devices")
        let now = options.clock()
        let disabled = Mutex(false)
        try await appendSystem(stream, author: "syncledger-push") { view in
            guard let text = try view.record("device/\(deviceID)")?.value else { return [] }
            var device = try Self.decode(Device.self, text, stream: stream)
            guard device.token == token, device.isEnabled else { return [] }
            if let reportedAt, let registered = device.registered, registered >= reportedAt { return [] }
            device.disabledAt = now
            device.disabledReason = String(reason.prefix(200))
            disabled.withLock { $0 = true }
            return [.put(key: "device/\(deviceID)", value: Self.json(device), deviceModified: nil)]
        }
        return disabled.withLock { $0 }
    }

    /// The device registered in `pool` under `id`, or nil.
    public func device(pool: IdentityPoolID, id: String) throws -> Device? {
        let stream = Self.systemStream(pool, "devices")
        return try recordValue(stream, key: "device/\(id)").map { try Self.decode(Device.self, $0, stream: stream) }
    }

    /// Subscribes a device of the dataset's identity to the dataset's changes.
    /// - Throws: `.notFound` when the device is not registered to that identity.
    public func subscribe(_ dataset: StreamName, deviceID: String) async throws {
        try await setSubscription(dataset, deviceID: deviceID, on: true)
    }

    /// Ends a subscription.
    /// - Throws: `.notFound` when the device is not registered to that identity.
    public func unsubscribe(_ dataset: StreamName, deviceID: String) async throws {
        try await setSubscription(dataset, deviceID: deviceID, on: false)
    }

    private func setSubscription(_ dataset: StreamName, deviceID: String, on: Bool) async throws {
        try Self.requireUserIdentity(dataset.identity)
        guard let device = try device(pool: dataset.pool, id: deviceID), device.identity == dataset.identity.rawValue else {
            throw LedgerError(.notFound, "device \(quoted(deviceID)) is not registered to identity \(dataset.identity)", stream: dataset)
        }
        let key = "\(dataset.identity)/\(dataset.dataset)/\(deviceID)"
        try await appendSystem(Self.systemStream(dataset.pool, "subscriptions"), author: dataset.identity.rawValue) { view in
            let subscribed = try view.record(key)?.value != nil
            if subscribed == on { return [] }
            return [on ? .put(key: key, value: device.platform.rawValue, deviceModified: nil) : .remove(key: key, deviceModified: nil)]
        }
    }

    /// The devices subscribed to `dataset`.
    public func subscribers(of dataset: StreamName) throws -> [Device] {
        let rows = try records(Self.systemStream(dataset.pool, "subscriptions"), prefix: "\(dataset.identity)/\(dataset.dataset)/")
        return try rows.compactMap { key, _ in
            try device(pool: dataset.pool, id: String(key.split(separator: "/").last ?? ""))
        }
    }
}
