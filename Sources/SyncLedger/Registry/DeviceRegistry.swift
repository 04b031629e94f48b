import Foundation
import LedgerStorage

/// Who asks for a change of the registry: an identity of the pool, or the admin.
public enum RegistryCaller: Sendable, Hashable {
    /// An identity's credentials.
    case identity(IdentityID)
    /// The developer (admin) credential.
    case admin(String)

    /// The author of the entries it makes.
    var author: String {
        switch self {
        case .identity(let id): id.rawValue
        case .admin(let key): "admin:\(key)"
        }
    }

    /// Whether it may read or change `device`: the admin, its owner, or the identity logged in on it.
    public func mayReach(_ device: Device) -> Bool {
        switch self {
        case .admin: true
        case .identity(let id): device.isReachable(by: id.rawValue)
        }
    }

    /// Whether it reaches `device` only as its creator while another identity is logged in on
    /// it: it may then see the device only redacted (no identity, settings or token state) —
    /// for a guest identity, its id is all it takes to get its credentials — and set no token
    /// (the token decides where that identity's notifications, which carry its id, go).
    public func isCreatorOnly(of device: Device) -> Bool {
        switch self {
        case .admin: false
        case .identity(let id): device.identity != nil && device.identity != id.rawValue
        }
    }
}

extension Ledger {
    /// The answer to a device code the caller may not use: the same as for one that does not
    /// exist, so that codes of other identities cannot be probed.
    static func unknownDevice(_ code: String, pool: IdentityPoolID) -> LedgerError {
        LedgerError(.notFound, "no device with code \(quoted(code)) in identity pool \(pool) that these credentials may use")
    }

    /// Creates a device (no `code`) or overwrites its info (latest wins) and returns its code.
    ///
    /// A device needs no login and no token: an app's install identity creates it on first
    /// launch. Later calls with the code, by its owner or the identity logged in on it (or the
    /// admin), overwrite what they send; settings given replace the stored ones. A platform
    /// change drops the token (a token belongs to a platform).
    ///
    /// While another identity is logged in on the device, its creator
    /// (``RegistryCaller/isCreatorOnly(of:)``) may update the hardware info only: not
    /// `Settings` (it may not read them) and not a different `Platform`.
    ///
    /// - Throws: `.notFound` for a code the caller may not use; `.invalidParameter` for bad
    ///   fields or a new device without a platform; `.limitExceeded` when the identity already
    ///   created ``Limits/maxDevicesPerIdentity`` devices; `.notAuthorized` for `Settings` or a
    ///   new `Platform` sent by the creator of a device another identity is logged in on.
    public func syncDevice(pool: IdentityPoolID, caller: RegistryCaller, code: String?, info: DeviceInfo) async throws -> String {
        if case .identity(let id) = caller { try Self.requireUserIdentity(id) }
        try info.validate()
        if let code { try Self.validateDeviceCode(code) }
        let now = options.clock()
        let maxDevices = options.limits.maxDevicesPerIdentity
        return try await changeRegistry(pool, author: caller.author) { change in
            var device: Device
            if let code {
                guard let found = try change.device(code), caller.mayReach(found) else { throw Self.unknownDevice(code, pool: pool) }
                device = found
            } else {
                guard let platform = info.platform else { throw LedgerError(.invalidParameter, "Platform is required when a device is created") }
                guard case .identity(let owner) = caller else {
                    throw LedgerError(.invalidParameter, "a device is created with the credentials of the app's identity, not the admin's")
                }
                device = try change.createDevice(owner: owner.rawValue, platform: platform, now: now, limit: maxDevices)
            }
            let before = device
            if caller.isCreatorOnly(of: device) {
                // Another identity is logged in: the creator may not read its Settings, so it
                // may not replace them either; a new Platform would drop that user's token.
                if info.settings != nil {
                    throw LedgerError(.notAuthorized, "another identity is logged in on device \(device.id): its creator may not set its Settings (only the identity logged in on it does); send the info without Settings, or log the device out first")
                }
                if let platform = info.platform, platform != device.platform {
                    throw LedgerError(.notAuthorized, "another identity is logged in on device \(device.id): its creator may not change its Platform (that would take the user's token away); log the device out first")
                }
            }
            if let platform = info.platform, platform != device.platform {
                try change.setToken(&device, nil, now: now)
                device.platform = platform
            }
            device.osVersion = info.osVersion ?? device.osVersion
            device.appVersion = info.appVersion ?? device.appVersion
            device.model = info.model ?? device.model
            device.locale = info.locale ?? device.locale
            if let settings = info.settings { device.settings = settings }
            if device != before || code == nil {
                device.updated = now
                change.put(device)
            }
            return device.id
        }
    }

    /// Gives a device its push token (nil: takes it away). The code, the link and the
    /// subscriptions stay; the old token stops receiving at once (delivery reads the token
    /// at sending time); a device that had this token loses it. While another identity is
    /// logged in on the device, its creator may only take the token away
    /// (``RegistryCaller/isCreatorOnly(of:)``).
    /// - Throws: `.notFound` for a code the caller may not use; `.invalidParameter` for a bad
    ///   token; `.notAuthorized` for a token set by the creator of a device another identity
    ///   is logged in on.
    public func syncToken(pool: IdentityPoolID, caller: RegistryCaller, code: String, token rawToken: String?) async throws {
        try Self.validateDeviceCode(code)
        let now = options.clock()
        try await changeRegistry(pool, author: caller.author) { change in
            guard var device = try change.device(code), caller.mayReach(device) else { throw Self.unknownDevice(code, pool: pool) }
            if rawToken != nil, caller.isCreatorOnly(of: device) {
                throw LedgerError(.notAuthorized, "another identity is logged in on device \(code): its creator may take its token away (Token null) or log it out, and only the identity logged in on it sets a token")
            }
            guard let platform = device.platform else {
                throw LedgerError(.invalidParameter, "device \(code) has no platform; send it with POST /devices/sync first")
            }
            var token: String?
            if let rawToken {
                try Self.validateToken(rawToken, platform: platform)
                token = Self.normalizedToken(rawToken, platform: platform)
            }
            let before = device
            try change.setToken(&device, token, now: now)
            if device != before { change.put(device) }
        }
    }

    /// Logs `identity` in on the device: links it, so that the identity's changes reach it.
    /// A device logged in as somebody else is logged out of that identity first (its
    /// subscriptions to that identity's datasets go), so nothing of one user reaches the next.
    ///
    /// - Parameter subscribeAll: whether it receives every dataset of the identity (nil keeps
    ///   the device's choice; a device's first login defaults to true).
    /// - Throws: `.notFound` when the pool has no such device.
    @discardableResult
    public func login(pool: IdentityPoolID, identity: IdentityID, code: String, subscribeAll: Bool?) async throws -> Device {
        try Self.requireUserIdentity(identity)
        try Self.validateDeviceCode(code)
        let now = options.clock()
        return try await changeRegistry(pool, author: identity.rawValue) { change in
            guard var device = try change.device(code) else { throw Self.unknownDevice(code, pool: pool) }
            let before = device
            try change.link(&device, to: identity.rawValue, subscribesAll: subscribeAll ?? device.subscribesAll ?? true, now: now)
            if device != before { change.put(device) }
            return device
        }
    }

    /// Logs the device out: it stays registered with its token, and its identity's changes no
    /// longer reach it. Logging out a device nobody is logged in on changes nothing.
    /// - Throws: `.notFound` for a code the caller may not use.
    @discardableResult
    public func logout(pool: IdentityPoolID, caller: RegistryCaller, code: String) async throws -> Device {
        try Self.validateDeviceCode(code)
        let now = options.clock()
        return try await changeRegistry(pool, author: caller.author) { change in
            guard var device = try change.device(code), caller.mayReach(device) else { throw Self.unknownDevice(code, pool: pool) }
            guard device.identity != nil else { return device }
            try change.unlink(&device, now: now)
            change.put(device)
            return device
        }
    }

    /// Removes a device from the registry: logged out, its token, subscriptions and record
    /// gone (the log keeps its history), and it no longer counts in its owner's limit. Its
    /// code is unknown from then on.
    /// - Throws: `.notFound` for a code the caller may not use.
    @discardableResult
    public func removeDevice(pool: IdentityPoolID, caller: RegistryCaller, code: String) async throws -> Device {
        try Self.validateDeviceCode(code)
        let now = options.clock()
        return try await changeRegistry(pool, author: caller.author) { change in
            guard var device = try change.device(code), caller.mayReach(device) else { throw Self.unknownDevice(code, pool: pool) }
            let removed = device
            try change.unlink(&device, now: now)
            try change.setToken(&device, nil, now: now)
            if let owner = device.owner { change.setKey("owned/\(owner)/\(code)", nil) }
            change.setKey("device/\(code)", nil)
            return removed
        }
    }

    /// Cognito's RegisterDevice: the device that has this token (or a new one), logged in as
    /// `identity`, and its code.
    ///
    /// The same token again returns the same code (and revives it if a push service had
    /// reported the token dead). A token that another identity's device has moves that device
    /// to this identity (a token belongs to one device). A fresh token on a platform where the
    /// identity has a device whose token was reported dead takes that device's place: its code
    /// and subscriptions come back with the new token.
    public func registerDevice(pool: IdentityPoolID, identity: IdentityID, platform: Platform, token rawToken: String) async throws -> String {
        try Self.requireUserIdentity(identity)
        try Self.validateToken(rawToken, platform: platform)
        let token = Self.normalizedToken(rawToken, platform: platform)
        let maxDevices = options.limits.maxDevicesPerIdentity
        let now = options.clock()
        let who = identity.rawValue
        return try await changeRegistry(pool, author: who) { change in
            let legacyKey = "token/\(who)/\(platform.rawValue)/\(token)"
            var code = try change.value("tokens/\(platform.rawValue)/\(token)")
            if code == nil, let legacy = try change.value(legacyKey) {
                // A device of the index before the registry: index it the new way.
                code = legacy
                change.setKey(legacyKey, nil)
                change.setKey("tokens/\(platform.rawValue)/\(token)", legacy)
                change.setKey("linked/\(who)/\(legacy)", "1")
            }
            if code == nil {
                // A device of this identity and platform whose token was reported dead: revive it.
                for (key, _) in try change.liveKeys(prefix: "linked/\(who)/") {
                    let candidate = String(key.split(separator: "/").last ?? "")
                    if let d = try change.device(candidate), d.platform == platform, d.disabledAt != nil { code = candidate; break }
                }
            }
            var device: Device
            if let code, let found = try change.device(code) {
                device = found
            } else {
                device = try change.createDevice(owner: who, platform: platform, now: now, limit: maxDevices)
                device.subscribesAll = false
            }
            let before = device
            if device.platform != platform {
                try change.setToken(&device, nil, now: now)
                device.platform = platform
            }
            try change.link(&device, to: who, subscribesAll: device.subscribesAll ?? false, now: now)
            if device.token != token || device.disabledAt != nil { try change.setToken(&device, token, now: now) }
            if device != before { change.put(device) }
            return device.id
        }
    }

    /// Records that a push service reported `token` of device `deviceID` dead (APNs 410 or
    /// `BadDeviceToken`, FCM `UNREGISTERED`): pushes to it stop; its code, link and
    /// subscriptions stay. Nothing happens when the device has another token by now, or — with
    /// `reportedAt`, APNs's time of when the token stopped being valid — when the token was
    /// registered after that.
    /// - Returns: whether the device was disabled.
    @discardableResult
    public func disableToken(pool: IdentityPoolID, deviceID: String, token: String, reason: String, reportedAt: Timestamp? = nil) async throws -> Bool {
        let now = options.clock()
        return try await changeRegistry(pool, author: "syncledger-push") { change in
            guard var device = try change.device(deviceID), device.token == token, device.disabledAt == nil else { return false }
            if let reportedAt, let registered = device.registered, registered >= reportedAt { return false }
            device.disabledAt = now
            device.disabledReason = String(reason.prefix(200))
            change.put(device)
            return true
        }
    }

    /// Subscribes a device logged in as the dataset's identity to the dataset's changes.
    /// - Throws: `.notFound` when the device is not logged in as that identity.
    public func subscribe(_ dataset: StreamName, deviceID: String) async throws {
        try await setSubscription(dataset, deviceID: deviceID, on: true)
    }

    /// Ends a subscription.
    /// - Throws: `.notFound` when the device is not logged in as that identity.
    public func unsubscribe(_ dataset: StreamName, deviceID: String) async throws {
        try await setSubscription(dataset, deviceID: deviceID, on: false)
    }

    private func setSubscription(_ dataset: StreamName, deviceID: String, on: Bool) async throws {
        try Self.requireUserIdentity(dataset.identity)
        try await changeRegistry(dataset.pool, author: dataset.identity.rawValue) { change in
            guard let device = try change.device(deviceID), device.identity == dataset.identity.rawValue, let platform = device.platform else {
                throw LedgerError(.notFound, "device \(quoted(deviceID)) is not registered to identity \(dataset.identity)", stream: dataset)
            }
            try change.subscribe("\(dataset.identity)/\(dataset.dataset)/\(deviceID)", platform: platform, on: on)
        }
    }
}
