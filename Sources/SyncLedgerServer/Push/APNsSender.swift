import AsyncHTTPClient
import Crypto
import Foundation
import JWTKit
import NIOCore
import NIOHTTP1
import SyncLedger
import Synchronization

/// Apple's HTTP/2 provider API with token-based authentication.
///
/// `POST /3/device/<token>` with a background push (`apns-push-type: background`,
/// `apns-priority: 5`, `content-available: 1` and the five Cognito keys under `data`), an
/// `apns-expiration` at the notification's time-to-live and an `apns-collapse-id` of the
/// dataset. The provider token (ES256 JWT with `kid`, `iss`, `iat`, made by jwt-kit:
/// ``PushTokens/apns(key:keyID:teamID:now:)``) is made once and reused
/// for 50 minutes — Apple wants one at least every 60 and at most every 20 minutes — and made
/// again at once when APNs answers `ExpiredProviderToken`.
///
/// Apple's rules for answers: 410 `Unregistered`/`ExpiredToken` and 400 `BadDeviceToken`/
/// `DeviceTokenNotForTopic` mean the token is dead; other 400s, 403s, 404, 405 and 413 are
/// never retried; 429 and 5xx are retried with backoff.
final class APNsSender: PushSender {
    let keyID: String
    let teamID: String
    let topic: String
    let key: ES256PrivateKey
    let baseURL: String
    let client: HTTPClient
    /// How long a provider token is reused.
    static let tokenLifetime: Duration = .seconds(50 * 60)
    private let token = Mutex<(jwt: String, issued: ContinuousClock.Instant)?>(nil)

    init(configuration c: PushTransportConfiguration, baseURL: String, client: HTTPClient) throws {
        guard let pem = c.apnsKey, let keyID = c.apnsKeyID, let teamID = c.apnsTeamID, let topic = c.apnsTopic else {
            throw PushSenderError("the APNs transport of \(c.arn) lacks its key, key id, team id or topic")
        }
        do { key = try ES256PrivateKey(backing: P256.Signing.PrivateKey(pemRepresentation: pem)) } catch {
            throw PushSenderError("the APNs key of \(c.arn) is not a P-256 .p8 key")
        }
        self.keyID = keyID
        self.teamID = teamID
        self.topic = topic
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.client = client
    }

    /// The current provider token, made when there is none or it is `tokenLifetime` old.
    func providerToken(renew: Bool = false) async throws -> String {
        let now = ContinuousClock.now
        if !renew, let current = token.withLock({ $0 }), now - current.issued < Self.tokenLifetime { return current.jwt }
        let jwt = try await PushTokens.apns(key: key, keyID: keyID, teamID: teamID)
        token.withLock { $0 = (jwt, now) }
        return jwt
    }

    /// The request body: a silent push with the five Cognito keys under `data`.
    static func payload(_ n: PushNotification) -> [UInt8] {
        let object: [String: Any] = ["aps": ["content-available": 1], "data": n.data]
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data())
    }

    func send(_ delivery: PushDelivery) async -> PushOutcome {
        let outcome = await attempt(delivery, renew: false)
        if case .retry(let reason, _) = outcome, reason.contains("ExpiredProviderToken") {
            return await attempt(delivery, renew: true)
        }
        return outcome
    }

    private func attempt(_ delivery: PushDelivery, renew: Bool) async -> PushOutcome {
        let jwt: String
        do { jwt = try await providerToken(renew: renew) } catch { return .failed(reason: "cannot sign the APNs provider token: \(error)") }
        guard delivery.token.utf8.allSatisfy({ $0 < 0x80 && Character(Unicode.Scalar($0)).isHexDigit }) else {
            return .tokenDead(reason: "BadDeviceToken (not hex; APNs tokens are hex)")
        }
        var request = HTTPClientRequest(url: "\(baseURL)/3/device/\(delivery.token)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(jwt)")
        request.headers.add(name: "apns-push-type", value: "background")
        request.headers.add(name: "apns-priority", value: "5")
        request.headers.add(name: "apns-topic", value: topic)
        request.headers.add(name: "apns-expiration", value: String(max(0, delivery.expiry.milliseconds / 1000)))
        request.headers.add(name: "apns-collapse-id", value: PushHTTP.collapseID(delivery.notification.dataset))
        request.headers.add(name: "apns-id", value: UUID().uuidString.lowercased())
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(Self.payload(delivery.notification))
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: .seconds(20)) } catch {
            return .retry(reason: "APNs unreachable: \(error)")
        }
        let status = response.status.code
        if status == 200 {
            _ = await PushHTTP.body(response)
            return .delivered
        }
        let body = await PushHTTP.body(response)
        let json = PushHTTP.json(body)
        let reason = (json?["reason"] as? String) ?? "HTTP \(status)"
        switch (status, reason) {
        case (410, _):
            let reported = (json?["timestamp"] as? NSNumber).map { Timestamp(milliseconds: $0.int64Value) }
            return .tokenDead(reason: "APNs 410 \(reason)", reportedAt: reported)
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
            return .tokenDead(reason: "APNs 400 \(reason)")
        case (403, "ExpiredProviderToken"):
            return .retry(reason: "APNs 403 ExpiredProviderToken")
        case (429, _), (500..., _):
            return PushHTTP.transient(status, "APNs \(reason)", response.headers)
        default:
            return .failed(reason: "APNs \(status) \(reason)")
        }
    }
}
