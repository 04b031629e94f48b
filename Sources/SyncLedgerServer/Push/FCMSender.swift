import AsyncHTTPClient
import Foundation
import JWTKit
import NIOCore
import NIOHTTP1
import SyncLedger
import Synchronization

/// Firebase Cloud Messaging's HTTP v1 API with a service-account OAuth grant.
///
/// The access token comes from the key file's `token_uri` (an RS256 JWT bearer grant, made by
/// jwt-kit: ``PushTokens/googleGrant(key:keyID:clientEmail:scope:tokenURI:now:)``, with
/// `iss` = `client_email`, scope `firebase.messaging`, one hour) and is reused until a minute
/// before it expires, or until FCM answers 401. The message is data-only (the five Cognito
/// keys, all strings) with `android.priority` NORMAL, `android.ttl` and
/// `android.collapse_key`, plus an `apns` block for iOS devices registered through FCM.
///
/// Answers: `UNREGISTERED` and `SENDER_ID_MISMATCH` mean the token is dead; 429, 500 and 503
/// are retried with backoff, honouring `Retry-After` (the outbox gives up past 2 minutes);
/// other errors are not retried.
final class FCMSender: PushSender {
    let account: FCMServiceAccount
    let key: Insecure.RSA.PrivateKey
    let sendURL: String
    let client: HTTPClient
    private let access = Mutex<(token: String, expires: ContinuousClock.Instant)?>(nil)

    init(configuration c: PushTransportConfiguration, baseURL: String, client: HTTPClient) throws {
        guard let json = c.fcmServiceAccount, let account = FCMServiceAccount(json: json) else {
            throw PushSenderError("the FCM transport of \(c.arn) has no usable service-account file")
        }
        do { key = try Insecure.RSA.PrivateKey(pem: account.privateKey) } catch {
            throw PushSenderError("the service-account key of \(c.arn) is not an RSA private key of at least 2048 bits")
        }
        self.account = account
        let base = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        let project = account.projectID.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? account.projectID
        self.sendURL = "\(base)/v1/projects/\(project)/messages:send"
        self.client = client
    }

    /// The OAuth access token, from the cache or a new grant.
    private func accessToken() async -> Result<String, OAuthFailure> {
        if let current = access.withLock({ $0 }), ContinuousClock.now < current.expires { return .success(current.token) }
        let assertion: String
        do {
            assertion = try await PushTokens.googleGrant(key: key, keyID: account.privateKeyID, clientEmail: account.clientEmail,
                                                         scope: "https://www.googleapis.com/auth/firebase.messaging", tokenURI: account.tokenURI)
        } catch { return .failure(.permanent("cannot sign the OAuth grant: \(error)")) }
        var request = HTTPClientRequest(url: account.tokenURI)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(Array("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)".utf8))
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: .seconds(20)) } catch {
            return .failure(.transient("the OAuth token endpoint is unreachable: \(error)", nil))
        }
        let body = await PushHTTP.body(response)
        let status = response.status.code
        guard status == 200, let json = PushHTTP.json(body), let token = json["access_token"] as? String, !token.isEmpty else {
            if status == 429 || status >= 500 {
                return .failure(.transient("OAuth token endpoint HTTP \(status)", PushHTTP.retryAfter(response.headers.first(name: "retry-after"))))
            }
            return .failure(.permanent("the OAuth grant was refused (HTTP \(status)): \(PushHTTP.snippet(body))"))
        }
        let lifetime = max(((json["expires_in"] as? NSNumber)?.int64Value ?? 3600) - 60, 1)
        access.withLock { $0 = (token, ContinuousClock.now + .seconds(lifetime)) }
        return .success(token)
    }

    private enum OAuthFailure: Error {
        case transient(String, Duration?)
        case permanent(String)
    }

    /// The `{"message": …}` body.
    static func message(_ delivery: PushDelivery, now: Timestamp = .now) -> [UInt8] {
        let n = delivery.notification
        let ttl = max(0, (delivery.expiry.milliseconds - now.milliseconds) / 1000)
        let collapse = PushHTTP.collapseID(n.dataset)
        let message: [String: Any] = [
            "token": delivery.token,
            "data": n.data,
            "android": ["priority": "NORMAL", "ttl": "\(ttl)s", "collapse_key": collapse],
            "apns": [
                "headers": ["apns-push-type": "background", "apns-priority": "5", "apns-collapse-id": collapse,
                            "apns-expiration": String(max(0, delivery.expiry.milliseconds / 1000))],
                "payload": ["aps": ["content-available": 1]],
            ],
        ]
        return Array((try? JSONSerialization.data(withJSONObject: ["message": message], options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data())
    }

    func send(_ delivery: PushDelivery) async -> PushOutcome {
        let first = await attempt(delivery)
        if case .retry(let reason, _) = first, reason.hasPrefix("FCM 401") {
            access.withLock { $0 = nil }  // the token was refused: one new grant, then try again
            return await attempt(delivery)
        }
        return first
    }

    private func attempt(_ delivery: PushDelivery) async -> PushOutcome {
        let token: String
        switch await accessToken() {
        case .success(let t): token = t
        case .failure(.transient(let reason, let after)): return .retry(reason: reason, after: after)
        case .failure(.permanent(let reason)): return .failed(reason: reason)
        }
        var request = HTTPClientRequest(url: sendURL)
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(token)")
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(Self.message(delivery))
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: .seconds(20)) } catch {
            return .retry(reason: "FCM unreachable: \(error)")
        }
        let status = response.status.code
        let body = await PushHTTP.body(response)
        if status == 200 { return .delivered }
        let error = PushHTTP.json(body)?["error"] as? [String: Any]
        let details = (error?["details"] as? [[String: Any]]) ?? []
        let code = details.compactMap { $0["errorCode"] as? String }.first ?? (error?["status"] as? String) ?? "HTTP \(status)"
        let message = (error?["message"] as? String).map { ": \($0.prefix(200))" } ?? ""
        switch (status, code) {
        case (_, "UNREGISTERED"), (_, "SENDER_ID_MISMATCH"):
            return .tokenDead(reason: "FCM \(status) \(code)")
        case (401, _):
            return .retry(reason: "FCM 401 \(code)\(message)")
        case (429, _), (500, _), (503, _):
            return PushHTTP.transient(status, "FCM \(code)", response.headers)
        default:
            return .failed(reason: "FCM \(status) \(code)\(message)")
        }
    }
}
