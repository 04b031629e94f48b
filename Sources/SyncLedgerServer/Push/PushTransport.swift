import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
public import SyncLedger
import Synchronization

/// Where the push services are. Each base URL can be changed, so tests and air-gapped
/// installations can point them at local servers that speak the same protocols.
public struct PushEndpoints: Sendable, Equatable {
    /// APNs production (`APNS` devices).
    public var apns = "https://api.push.apple.com"
    /// APNs sandbox (`APNS_SANDBOX` devices).
    public var apnsSandbox = "https://api.sandbox.push.apple.com"
    /// FCM's HTTP v1 API (the OAuth token URL comes from the service-account file's `token_uri`).
    public var fcm = "https://fcm.googleapis.com"
    /// A PEM file of extra certificates to trust for push services and webhooks (`--push-ca`).
    public var caFile: String?

    /// Apple's and Google's addresses.
    public init() {}
}

/// One notification about to be sent: the row, the device's token now, and when it expires.
struct PushDelivery: Sendable {
    let notification: PushNotification
    let token: String
    let expiry: Timestamp
}

/// A transport: sends one notification and judges the answer by its service's rules.
protocol PushSender: Sendable {
    /// Sends, and never throws: every failure is an outcome (retry, token dead, or failed).
    func send(_ delivery: PushDelivery) async -> PushOutcome
}

/// Shared pieces of the transports.
enum PushHTTP {
    /// The value of a `Retry-After` header: delay-seconds or an HTTP date.
    static func retryAfter(_ value: String?, now: Date = Date()) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int64(value), seconds >= 0 { return .seconds(min(seconds, 86_400 * 28)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .milliseconds(max(0, Int64(date.timeIntervalSince(now) * 1000)))
    }

    /// Reads at most `limit` bytes of a response body (an error body is short; a hostile or
    /// broken server's long one is cut).
    static func body(_ response: HTTPClientResponse, limit: Int = 64 << 10) async -> [UInt8] {
        var out: [UInt8] = []
        do {
            for try await var chunk in response.body {
                let take = min(chunk.readableBytes, limit - out.count)
                out += chunk.readBytes(length: take) ?? []
                if out.count >= limit { break }
            }
        } catch {}
        return out
    }

    /// A short, printable description of a body for a reason string (never a secret: these
    /// are the service's answers).
    static func snippet(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(300), as: UTF8.self).replacingOccurrences(of: "\n", with: " ")
    }

    /// The JSON object of a body, or nil.
    static func json(_ bytes: [UInt8]) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    /// A `Retry-After`-aware outcome for statuses every service means the same by.
    static func transient(_ status: UInt, _ reason: String, _ headers: HTTPHeaders) -> PushOutcome {
        .retry(reason: "HTTP \(status) \(reason)", after: retryAfter(headers.first(name: "retry-after")))
    }

    /// `apns-collapse-id` / `collapse_key` for a dataset: its name when it fits in 64 bytes,
    /// else a hash of it.
    static func collapseID(_ dataset: String) -> String {
        dataset.utf8.count <= 64 ? dataset : String(Base64URL.string(Array(dataset.utf8).sha256Prefix(32)).prefix(64))
    }
}

extension Array where Element == UInt8 {
    func sha256Prefix(_ n: Int) -> [UInt8] {
        var hasher = Crypto.SHA256()
        hasher.update(data: self)
        return Array(hasher.finalize().prefix(n))
    }
}

import Crypto

/// The transports of the configured applications, made on first use and remade when the
/// operator configures an application again (`syncledger push configure`).
final class PushSenders: Sendable {
    let client: HTTPClient
    let endpoints: PushEndpoints
    let secrets: SecretStore
    private let cache = Mutex<[String: (configured: Timestamp, checked: ContinuousClock.Instant, sender: any PushSender)]>([:])

    init(client: HTTPClient, endpoints: PushEndpoints, secrets: SecretStore) {
        self.client = client
        self.endpoints = endpoints
        self.secrets = secrets
    }

    /// The transport for a device of `platform` in a pool whose `PushSync.ApplicationArns` are
    /// `arns`, or why there is none (a reason for the dead letters).
    func sender(platform: Platform, arns: [String]) -> Result<any PushSender, PushSenderError> {
        let candidates = arns.filter { PushTransportConfiguration.platform(ofARN: $0) == platform }
        guard !candidates.isEmpty else {
            return .failure(PushSenderError("the pool's PushSync.ApplicationArns has no application for platform \(platform.rawValue)"))
        }
        for arn in candidates {
            // A sender made less than a second ago is used as is; after that the stored
            // configuration is read again, so `push configure` reaches delivery within a second.
            if let cached = cache.withLock({ $0[arn] }), ContinuousClock.now - cached.checked < .seconds(1) { return .success(cached.sender) }
            let configuration: PushTransportConfiguration?
            do { configuration = try secrets.pushTransport(arn: arn) } catch {
                return .failure(PushSenderError("cannot read the push transport of \(arn): \(error)"))
            }
            guard let configuration else { continue }
            if let cached = cache.withLock({ $0[arn] }), cached.configured == configuration.configured {
                cache.withLock { $0[arn]?.checked = .now }
                return .success(cached.sender)
            }
            do {
                let sender = try make(configuration, platform: platform)
                cache.withLock { $0[arn] = (configuration.configured, .now, sender) }
                return .success(sender)
            } catch let error as PushSenderError {
                return .failure(error)
            } catch {
                return .failure(PushSenderError("the push transport of \(arn) is unusable: \(error)"))
            }
        }
        return .failure(PushSenderError("no push transport is configured for \(candidates.joined(separator: ", ")): run `syncledger push configure`"))
    }

    private func make(_ c: PushTransportConfiguration, platform: Platform) throws -> any PushSender {
        switch c.kind {
        case .apns:
            let base = PushTransportConfiguration.platform(ofARN: c.arn) == .apnsSandbox ? endpoints.apnsSandbox : endpoints.apns
            return try APNsSender(configuration: c, baseURL: base, client: client)
        case .fcm:
            return try FCMSender(configuration: c, baseURL: endpoints.fcm, client: client)
        case .webhook:
            return try WebhookSender(configuration: c, client: client)
        }
    }
}

/// Why a notification has no transport.
struct PushSenderError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Checks a push transport's configuration before it is stored (`syncledger push configure`).
public enum PushConfigurationCheck {
    /// Throws ``StartupError`` saying what is wrong: an ARN that is not an SNS platform
    /// application of a platform the kind serves, a key that does not parse, a bad URL.
    public static func validate(_ configuration: PushTransportConfiguration) throws {
        guard let platform = PushTransportConfiguration.platform(ofARN: configuration.arn) else {
            throw StartupError("--arn \(configuration.arn) is not an SNS platform application ARN (arn:aws:sns:REGION:ACCOUNT:app/PLATFORM/NAME with PLATFORM one of APNS, APNS_SANDBOX, GCM, ADM, WEBHOOK)")
        }
        switch (configuration.kind, platform) {
        case (.apns, .apns), (.apns, .apnsSandbox), (.fcm, .gcm), (.webhook, _): break
        default: throw StartupError("a \(configuration.kind.rawValue) transport cannot serve \(platform.rawValue) devices (\(configuration.arn))")
        }
        do {
            switch configuration.kind {
            case .apns: _ = try APNsSender(configuration: configuration, baseURL: "https://localhost", client: HTTPClient.shared)
            case .fcm: _ = try FCMSender(configuration: configuration, baseURL: "https://localhost", client: HTTPClient.shared)
            case .webhook: _ = try WebhookSender(configuration: configuration, client: HTTPClient.shared)
            }
        } catch let error as PushSenderError {
            throw StartupError(error.description)
        }
    }
}
