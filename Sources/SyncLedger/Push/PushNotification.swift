import Foundation

/// One pending silent push: "dataset D of identity I changed; its sync count is now N", for
/// one device. The outbox keeps at most one per device and dataset (the newest sync count).
public struct PushNotification: Sendable, Hashable, Codable {
    /// The identity pool.
    public var pool: String
    /// The identity whose dataset changed.
    public var identity: String
    /// The dataset.
    public var dataset: String
    /// The device to notify (its RegisterDevice id).
    public var deviceID: String
    /// The device's platform, which picks the transport.
    public var platform: Platform
    /// The device's token when the notification was made (the deliverer uses the device's
    /// token at sending time; this one names it in status and dead letters).
    public var token: String
    /// The dataset's sync count after the change (the newest one pending).
    public var syncCount: UInt64
    /// The change-feed position of that change.
    public var sequence: UInt64
    /// When that change was committed: the start of the time-to-live and of the measured
    /// commit-to-delivery latency.
    public var committed: Timestamp
    /// Delivery attempts so far.
    public var attempts: Int = 0
    /// The earliest time of the next attempt.
    public var nextAttempt: Timestamp
    /// Whether an attempt is under way. Such a row is due only at the end of time; a server
    /// that starts releases the rows a killed one left in flight
    /// (``PushOutbox/releaseLeases(now:)``).
    public var inFlight: Bool = false
    /// What the last failed attempt was told.
    public var lastError: String?
    /// When it went to the dead-letter list (dead letters only).
    public var deadSince: Timestamp?
    /// When `syncledger push retry` took it back from the dead letters: its time-to-live
    /// starts again from here.
    public var retried: Timestamp?
    /// The data of a custom notification (`POST /devices/notify`), sent instead of Cognito's
    /// five keys; nil for a dataset's change. Its ``dataset`` then names the notification.
    public var custom: [String: String]?

    /// A notification of the change at `sequence`, due at once.
    public init(pool: String, identity: String, dataset: String, deviceID: String, platform: Platform, token: String,
                syncCount: UInt64, sequence: UInt64, committed: Timestamp) {
        self.pool = pool
        self.identity = identity
        self.dataset = dataset
        self.deviceID = deviceID
        self.platform = platform
        self.token = token
        self.syncCount = syncCount
        self.sequence = sequence
        self.committed = committed
        self.nextAttempt = committed
    }

    /// The transport family the platform is delivered by when no webhook is configured for it.
    public var transport: PushTransportKind { PushTransportKind(platform: platform) }

    /// The data Cognito's clients parse — `source`, `identityPoolId`, `identityId`,
    /// `datasetName`, `syncCount` — every value a string (Android's SDK parses `syncCount`
    /// from a string and ignores a push missing any of the five).
    public var data: [String: String] {
        if let custom { return custom }
        return ["source": "cognito-sync", "identityPoolId": pool, "identityId": identity, "datasetName": dataset, "syncCount": String(syncCount)]
    }

    /// The outbox key: one row per device and dataset, so a newer change replaces an older one.
    var key: [UInt8] {
        Array("\(pool)\u{0}\(identity)\u{0}\(dataset)\u{0}\(deviceID)\(custom == nil ? "" : "\u{0}custom")".utf8)
    }
}

/// How a platform's notifications travel.
public enum PushTransportKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// Apple's HTTP/2 provider API (`APNS`, `APNS_SANDBOX`).
    case apns
    /// Firebase Cloud Messaging's HTTP v1 API (`GCM`).
    case fcm
    /// A signed HTTPS POST to an address the operator configured (`ADM`, or any platform).
    case webhook

    /// The default transport of a platform.
    public init(platform: Platform) {
        switch platform {
        case .apns, .apnsSandbox: self = .apns
        case .gcm: self = .fcm
        case .adm, .webhook: self = .webhook
        }
    }
}

/// What one delivery attempt came to, as the transport judged it by its service's rules.
public enum PushOutcome: Sendable, Equatable {
    /// The service accepted it.
    case delivered
    /// Try again later: after `after` when the service said so (`Retry-After`), else after
    /// the outbox's backoff.
    case retry(reason: String, after: Duration? = nil)
    /// The service says the token is dead: disable it (unless it was registered after
    /// `reportedAt`) and drop the notification.
    case tokenDead(reason: String, reportedAt: Timestamp? = nil)
    /// Never retry (the request or the configuration is wrong): straight to the dead letters.
    case failed(reason: String)
    /// Nobody to send it to any more (the device logged out, moved to another identity, or
    /// lost its token): dropped and counted, not a dead letter.
    case unrouted(reason: String)
}

/// How the outbox retries, expires and gives up.
public struct PushPolicy: Sendable, Equatable {
    /// The first retry's delay; each further one doubles it.
    public var initialBackoff: Duration = .seconds(1)
    /// The longest delay between attempts.
    public var maxBackoff: Duration = .seconds(300)
    /// After this many failed attempts a notification goes to the dead letters.
    public var maxAttempts: Int = 12
    /// The time-to-live of a pool with none of its own (Cognito users expect a day).
    public var defaultTimeToLive: Duration = .seconds(86_400)
    /// A `Retry-After` longer than this is not waited for: the notification is dead (FCM's
    /// guidance: give up past 2 minutes).
    public var maxRetryAfter: Duration = .seconds(120)

    /// The defaults: 1 s doubling to 5 min, 12 attempts, 24 h to live, `Retry-After` up to 2 min.
    public init() {}

    /// The delay before attempt `attempts + 1`, after `attempts` failures: exponential with
    /// full jitter in its upper half (`d/2 ... d`), so retries of many devices spread out.
    public func backoff(afterAttempts attempts: Int, random: Double = Double.random(in: 0...1)) -> Duration {
        let exponent = min(max(attempts - 1, 0), 30)
        let base = initialBackoff * (1 << exponent)
        let capped = min(base, maxBackoff)
        return capped * (0.5 + 0.5 * random)
    }
}
