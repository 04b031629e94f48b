import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import SyncLedger

/// A pool's SyncTrigger served by a webhook: Cognito's event JSON (`version` 2) POSTed to the
/// configured URL, signed `X-SyncLedger-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`
/// with `X-SyncLedger-Timestamp` (epoch seconds) so the hook can refuse replays; the answer is
/// the same JSON with `datasetRecords` changed as the hook wants.
///
/// Cognito's rules: an answer after 5 s is `LambdaSocketTimeoutException`; a 429 is
/// `LambdaThrottledException`; anything else that is not a 2xx answer of that JSON with the
/// read-only fields unchanged is `InvalidLambdaFunctionOutputException`. Answers are read up to
/// 1 MiB beyond the event's own size.
struct WebhookSyncTrigger: SyncTrigger {
    let hook: SyncTriggerHook
    let client: HTTPClient
    static let timeout: Duration = .seconds(5)

    var name: String { hook.arn }

    /// The client hooks are called with: no redirects (a hook cannot send the server elsewhere),
    /// short connect timeout.
    static let sharedClient: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(5))
        // Every concurrent UpdateRecords of a hooked pool waits on its hook: as many kept-alive
        // connections as writers, not AsyncHTTPClient's default 8.
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    static func eventJSON(_ event: SyncTriggerEvent) -> [String: Any] {
        var records: [String: Any] = [:]
        for (key, r) in event.records {
            var item: [String: Any] = ["op": r.op]
            item["oldValue"] = r.oldValue ?? NSNull()
            item["newValue"] = r.newValue ?? NSNull()
            records[key] = item
        }
        return ["version": 2, "eventType": "SyncTrigger", "region": event.region, "identityPoolId": event.stream.pool.rawValue,
                "identityId": event.stream.identity.rawValue, "datasetName": event.stream.dataset.rawValue, "datasetRecords": records]
    }

    func invoke(_ event: SyncTriggerEvent) async throws -> [String: SyncTriggerRecord] {
        let sent = Self.eventJSON(event)
        let body = try JSONSerialization.data(withJSONObject: sent, options: [.sortedKeys, .withoutEscapingSlashes])
        let timestamp = String(Int(Date().timeIntervalSince1970))
        let mac = HMAC<SHA256>.authenticationCode(for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + Array(body), using: SymmetricKey(data: Array(hook.secret.utf8)))
        var request = HTTPClientRequest(url: hook.url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "x-syncledger-timestamp", value: timestamp)
        request.headers.add(name: "x-syncledger-signature", value: "sha256=" + mac.map { String(format: "%02x", $0) }.joined())
        request.body = .bytes(Array(body))
        let prepared = request
        let client = self.client
        let arn = hook.arn
        let stream = event.stream
        let limit = body.count + (1 << 20)
        let deadline = ContinuousClock.now + Self.timeout
        let answer: [UInt8]
        do {
            answer = try await withThrowingTaskGroup(of: [UInt8]?.self) { group in
                group.addTask {
                    let response = try await client.execute(prepared, timeout: .seconds(5))
                    let status = response.status.code
                    if status == 429 { throw LedgerError(.hookThrottled, "the SyncTrigger \(arn) is throttled (HTTP 429); retry later", stream: stream) }
                    let bytes = try await response.body.collect(upTo: limit)
                    guard (200..<300).contains(status) else {
                        throw LedgerError(.hookInvalidOutput, "the SyncTrigger \(arn) answered HTTP \(status)", stream: stream)
                    }
                    return Array(buffer: bytes)
                }
                group.addTask {
                    try? await Task.sleep(until: deadline, clock: .continuous)
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let bytes = first else {
                    throw LedgerError(.hookTimeout, "the SyncTrigger \(hook.arn) did not answer within 5 seconds", stream: event.stream)
                }
                return bytes
            }
        } catch let error as LedgerError {
            throw error
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            throw LedgerError(.hookTimeout, "the SyncTrigger \(hook.arn) did not answer within 5 seconds", stream: event.stream)
        } catch let error as NIOTooManyBytesError {
            _ = error
            throw LedgerError(.hookInvalidOutput, "the SyncTrigger \(hook.arn) answered more than \(body.count + (1 << 20)) bytes", stream: event.stream)
        } catch {
            throw LedgerError(.hookInvalidOutput, "the SyncTrigger \(hook.arn) could not be reached: \(error)", stream: event.stream)
        }
        return try Self.parse(answer, sent: sent, hook: hook.arn, stream: event.stream)
    }

    /// The answer's `datasetRecords`, after checking it is the event's JSON with its read-only
    /// fields unchanged.
    static func parse(_ bytes: [UInt8], sent: [String: Any], hook: String, stream: StreamName) throws -> [String: SyncTriggerRecord] {
        func invalid(_ why: String) -> LedgerError {
            LedgerError(.hookInvalidOutput, "the SyncTrigger \(hook) answered invalid output: \(why)", stream: stream)
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else { throw invalid("not a JSON object") }
        for field in ["version", "eventType", "region", "identityPoolId", "identityId", "datasetName"] {
            guard let got = object[field] else { throw invalid("\(field) is missing") }
            guard "\(got)" == "\(sent[field]!)" else { throw invalid("\(field) was changed (it is read-only)") }
        }
        guard let records = object["datasetRecords"] as? [String: Any] else { throw invalid("datasetRecords is not an object") }
        var result: [String: SyncTriggerRecord] = [:]
        for (key, value) in records {
            guard let item = value as? [String: Any] else { throw invalid("datasetRecords[\("\"\(key.prefix(64))\"")] is not an object") }
            let op = item["op"] as? String ?? "replace"
            guard op == "replace" || op == "remove" else { throw invalid("datasetRecords[\("\"\(key.prefix(64))\"")].op is \("\"\(op.prefix(20))\""), not replace or remove") }
            let newValue: String?
            switch item["newValue"] {
            case nil, is NSNull: newValue = nil
            case let text as String: newValue = text
            default: throw invalid("datasetRecords[\("\"\(key.prefix(64))\"")].newValue is not a string or null")
            }
            let oldValue = item["oldValue"] as? String
            result[key] = SyncTriggerRecord(oldValue: oldValue, newValue: newValue, op: op)
        }
        return result
    }
}
