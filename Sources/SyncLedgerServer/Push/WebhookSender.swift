import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import SyncLedger

/// A signed HTTPS POST of the notification to an address the operator configured: for
/// platforms SyncLedger does not speak (`ADM`, web-push gateways, a customer's own fan-out).
///
/// The body is the notification as JSON: the five Cognito keys (all strings) plus `deviceId`,
/// `platform` and `token`. Two headers sign it (docs/push.md shows how to verify):
///
///     X-SyncLedger-Timestamp: <unix seconds>
///     X-SyncLedger-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
///
/// Answers: 2xx delivered; 410 Gone means the device's address is dead; 408, 429 and 5xx are
/// retried (honouring `Retry-After`); other 4xx are not.
///
/// A device of platform `WEBHOOK` has its own address as its token: the POST goes there, but
/// only when the address lies under the transport's configured URL (same scheme, host and
/// port, the configured path's segments as its first, no dot segment, query or fragment:
/// ``isUnder(_:base:)``), so a device cannot point the server anywhere else. Other platforms' notifications go to the configured URL.
final class WebhookSender: PushSender {
    let url: String
    let secret: SymmetricKey
    let client: HTTPClient

    init(configuration c: PushTransportConfiguration, client: HTTPClient) throws {
        guard let url = c.webhookURL, let secret = c.webhookSecret, !secret.isEmpty else {
            throw PushSenderError("the webhook transport of \(c.arn) lacks its URL or secret")
        }
        if let problem = Self.problem(with: url) { throw PushSenderError("the webhook URL of \(c.arn) \(problem)") }
        self.url = url
        self.secret = SymmetricKey(data: Array(secret.utf8))
        self.client = client
    }

    /// Why `url` may not be a webhook address (nil when it may): HTTPS anywhere, plain HTTP
    /// only on loopback, no user name or password.
    static func problem(with url: String) -> String? {
        guard let parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(), let host = parts.host, !host.isEmpty else {
            return "is not an absolute http(s) URL"
        }
        if parts.user != nil || parts.password != nil { return "must not carry a user name or password" }
        switch scheme {
        case "https": return nil
        case "http": return ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host.lowercased()) ? nil : "must be https (plain http only on loopback)"
        default: return "must be https (plain http only on loopback)"
        }
    }

    /// The signature header's value for `body` sent at `timestamp`.
    static func signature(secret: SymmetricKey, timestamp: String, body: [UInt8]) -> String {
        var mac = HMAC<SHA256>(key: secret)
        mac.update(data: Array(timestamp.utf8))
        mac.update(data: [0x2E])
        mac.update(data: body)
        return "v1=" + Hex.encode(mac.finalize())
    }

    static func body(_ delivery: PushDelivery) -> [UInt8] {
        var object = delivery.notification.data
        object["deviceId"] = delivery.notification.deviceID
        object["platform"] = delivery.notification.platform.rawValue
        object["token"] = delivery.token
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data())
    }

    /// Whether a device's own address lies under the configured URL: same scheme, host and
    /// port, no query and no fragment, and the configured path's segments as the first
    /// segments of its path. A path with a segment that is a dot segment (`.` or `..`, also
    /// percent-encoded in any case, or before a `;` parameter) or that decodes to something
    /// holding `/` or `\`, or a malformed percent-escape, is never under it: a client, proxy or
    /// server resolving or decoding it on the way could take the request out of the configured
    /// path.
    static func isUnder(_ address: String, base: String) -> Bool {
        guard problem(with: address) == nil, isWellEncoded(Substring(address).utf8),
              let a = URLComponents(string: address), let b = URLComponents(string: base) else { return false }
        guard a.scheme?.lowercased() == b.scheme?.lowercased(), a.host?.lowercased() == b.host?.lowercased(), a.port == b.port,
              a.percentEncodedQuery == nil, a.percentEncodedFragment == nil,
              let path = safeSegments(a.percentEncodedPath), let prefix = safeSegments(b.percentEncodedPath) else { return false }
        // A trailing `/` of the base ends its last segment; it is no segment of its own.
        let required = prefix.last == "" ? Array(prefix.dropLast()) : prefix
        return path.count >= required.count && Array(path.prefix(required.count)) == required
    }

    /// The decoded segments of a percent-encoded absolute path (an empty last one for a path
    /// ending in `/`), or nil when it is not absolute, does not decode, or has a segment that
    /// could move it elsewhere (a dot segment, or one decoding to a `/` or `\`).
    static func safeSegments(_ path: String) -> [String]? {
        if path.isEmpty { return [] }
        guard path.hasPrefix("/") else { return nil }
        var segments: [String] = []
        for raw in path.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            guard isWellEncoded(raw.utf8), let segment = String(raw).removingPercentEncoding else { return nil }
            let name = segment.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            if name == "." || name == ".." || segment.contains("/") || segment.contains("\\") { return nil }
            segments.append(segment)
        }
        return segments
    }

    /// Whether every `%` in `text` starts an escape of two hex digits (a malformed one is read
    /// differently by different servers).
    static func isWellEncoded(_ text: Substring.UTF8View) -> Bool {
        let bytes = Array(text)
        func isHex(_ b: UInt8) -> Bool { (0x30...0x39).contains(b) || (0x41...0x46).contains(b) || (0x61...0x66).contains(b) }
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, isHex(bytes[i + 1]), isHex(bytes[i + 2]) else { return false }
                i += 3
            } else {
                i += 1
            }
        }
        return true
    }

    func send(_ delivery: PushDelivery) async -> PushOutcome {
        var target = url
        if delivery.notification.platform == .webhook {
            guard Self.isUnder(delivery.token, base: url) else {
                return .failed(reason: "the device's webhook address is not under the transport's URL \(url)")
            }
            target = delivery.token
        }
        let body = Self.body(delivery)
        let timestamp = String(Int(Date().timeIntervalSince1970))
        var request = HTTPClientRequest(url: target)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "SyncLedger-push")
        request.headers.add(name: "x-syncledger-timestamp", value: timestamp)
        request.headers.add(name: "x-syncledger-signature", value: Self.signature(secret: secret, timestamp: timestamp, body: body))
        request.body = .bytes(body)
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: .seconds(20)) } catch {
            return .retry(reason: "webhook unreachable: \(error)")
        }
        let status = response.status.code
        _ = await PushHTTP.body(response)
        switch status {
        case 200..<300: return .delivered
        case 410: return .tokenDead(reason: "webhook 410 Gone")
        case 408, 429, 500...: return PushHTTP.transient(status, "webhook", response.headers)
        default: return .failed(reason: "webhook answered HTTP \(status)")
        }
    }
}
