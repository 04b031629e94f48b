import Foundation

/// A push platform a device registers with (Cognito's `Platform`, and `WEBHOOK`).
public enum Platform: String, Sendable, Hashable, Codable, CaseIterable {
    /// Apple Push Notification service.
    case apns = "APNS"
    /// Apple's sandbox.
    case apnsSandbox = "APNS_SANDBOX"
    /// Firebase / Google Cloud Messaging.
    case gcm = "GCM"
    /// Amazon Device Messaging.
    case adm = "ADM"
    /// A device (or its relay) reached by a signed HTTPS POST to an address under the pool's
    /// webhook transport URL: its token is that address. Not a Cognito platform.
    case webhook = "WEBHOOK"

    /// The platforms Cognito's RegisterDevice accepts.
    public static let cognito: [Platform] = [.apns, .apnsSandbox, .gcm, .adm]
}

/// A device in the registry: an installation of an app, known by its device code from its
/// first launch — before anyone logs in and whether or not it ever gets a push token.
///
/// Records of a pool's `devices` system stream hold it, so every change is a log entry.
/// Devices registered by Cognito's RegisterDevice are devices too (their `DeviceId` is the
/// device code); records written before the registry had the first seven fields only.
public struct Device: Sendable, Hashable, Codable {
    /// The device code (Cognito's DeviceId).
    public let id: String
    /// The identity it is linked to (logged in as); nil while nobody is logged in on it.
    public var identity: String?
    /// Its push platform; nil only for a device that never said (records of the registry
    /// always have one).
    public var platform: Platform?
    /// Its push token (an APNs token in lower-case hex, an FCM registration token, a webhook
    /// address); nil while it has none (push refused, or not yet granted).
    public var token: String?
    /// When its current token was registered.
    public var registered: Timestamp?
    /// When a push service reported its token dead (nil: alive). A new token revives it.
    public var disabledAt: Timestamp?
    /// What the push service said.
    public var disabledReason: String?

    /// The identity whose credentials created it (the app's install identity).
    public var owner: String?
    /// The operating system's version (`OsVersion`).
    public var osVersion: String?
    /// The app's version.
    public var appVersion: String?
    /// The hardware model.
    public var model: String?
    /// The device's locale, e.g. `de_CH`.
    public var locale: String?
    /// Free-form per-device settings.
    public var settings: [String: String]?
    /// Whether it receives every dataset of its identity (a login through the device API);
    /// otherwise only the datasets it subscribed to (Cognito's SubscribeToDataset).
    public var subscribesAll: Bool?
    /// When it was created.
    public var created: Timestamp?
    /// When its info, token or link last changed.
    public var updated: Timestamp?
    /// When it was last linked to an identity.
    public var linkedAt: Timestamp?

    /// A device.
    public init(id: String, identity: String?, platform: Platform?, token: String?, registered: Timestamp? = nil, disabledAt: Timestamp? = nil, disabledReason: String? = nil) {
        self.id = id
        self.identity = identity
        self.platform = platform
        self.token = token
        self.registered = registered
        self.disabledAt = disabledAt
        self.disabledReason = disabledReason
    }

    /// Whether it has a token that may receive pushes.
    public var isEnabled: Bool { disabledAt == nil && token != nil }

    /// Whether somebody is logged in on it.
    public var isLoggedIn: Bool { identity != nil }

    /// Whether `identity` may change or read it: its owner or the identity logged in on it.
    public func isReachable(by identity: String) -> Bool {
        owner == identity || self.identity == identity
    }
}

/// What a device says about itself on every launch (`POST /devices/sync`): the latest wins.
public struct DeviceInfo: Sendable, Hashable {
    /// Its push platform.
    public var platform: Platform?
    /// The operating system's version.
    public var osVersion: String?
    /// The app's version.
    public var appVersion: String?
    /// The hardware model.
    public var model: String?
    /// The locale.
    public var locale: String?
    /// Per-device settings; nil keeps the stored ones.
    public var settings: [String: String]?

    /// Device info.
    public init(platform: Platform? = nil, osVersion: String? = nil, appVersion: String? = nil, model: String? = nil, locale: String? = nil, settings: [String: String]? = nil) {
        self.platform = platform
        self.osVersion = osVersion
        self.appVersion = appVersion
        self.model = model
        self.locale = locale
        self.settings = settings
    }

    /// At most this many settings.
    public static let maxSettings = 64
    /// At most this many characters in a descriptive field, a setting's key.
    public static let maxFieldLength = 128
    /// At most this many characters in a setting's value.
    public static let maxSettingValueLength = 1024

    /// Checks the lengths.
    /// - Throws: `.invalidParameter` or `.limitExceeded` naming the field.
    public func validate() throws(LedgerError) {
        for (name, value) in [("OsVersion", osVersion), ("AppVersion", appVersion), ("Model", model), ("Locale", locale)] {
            if let value, value.count > Self.maxFieldLength {
                throw LedgerError(.invalidParameter, "\(name) must be at most \(Self.maxFieldLength) characters, not \(value.count)")
            }
        }
        guard let settings else { return }
        guard settings.count <= Self.maxSettings else {
            throw LedgerError(.limitExceeded, "Settings has \(settings.count) entries; the limit is \(Self.maxSettings)")
        }
        for (key, value) in settings {
            guard (1...Self.maxFieldLength).contains(key.count) else {
                throw LedgerError(.invalidParameter, "Settings key \(quoted(key)) must be 1-\(Self.maxFieldLength) characters")
            }
            guard value.count <= Self.maxSettingValueLength else {
                throw LedgerError(.limitExceeded, "Settings.\(key.prefix(40)) has \(value.count) characters; the limit is \(Self.maxSettingValueLength)")
            }
        }
    }
}
