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
    /// How long the hook has to answer (`serve --sync-trigger-timeout`; 5 s, Cognito's Lambda
    /// limit, by default).
    var timeout: Duration = Self.defaultTimeout
    static let defaultTimeout: Duration = .seconds(5)
    /// The longest `--sync-trigger-timeout`.
    static let maxTimeout: Duration = .seconds(60)

    var name: String { hook.arn }

    /// The client hooks are called with: no redirects (a hook cannot send the server elsewhere),
    /// short connect timeout.
    /// The server makes one at start (`CognitoAPI.syncTriggerClient`) and shuts it down when it stops.
    static func makeClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        // Reads are bounded by each call's own deadline (its trigger's timeout, at most 60 s).
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(60))
        // Every concurrent UpdateRecords of a hooked pool waits on its hook: as many kept-alive
        // connections as writers, not AsyncHTTPClient's default 8.
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// A timeout in milliseconds and as said in errors ("5 seconds").
    static func describe(_ timeout: Duration) -> (milliseconds: Double, text: String) {
        let ms = Double(timeout.components.seconds) * 1000 + Double(timeout.components.attoseconds) / 1e15
        let value = ms / 1000
        return (ms, value == value.rounded() ? "\(Int(value)) seconds" : "\(value) seconds")
    }

    /// The event as Cognito sends it, written with the server's JSON writer (keys sorted).
    static func eventJSON(_ event: SyncTriggerEvent) -> [UInt8] {
        var w = JSONWriter(capacity: 256 + event.records.count * 64)
        w.beginObject()
        w.key("datasetName"); w.string(event.stream.dataset.rawValue)
        w.key("datasetRecords"); w.beginObject()
        for key in event.records.keys.sorted() {
            let r = event.records[key]!
            w.key(key); w.beginObject()
            w.key("newValue"); if let v = r.newValue { w.string(v) } else { w.null() }
            w.key("oldValue"); if let v = r.oldValue { w.string(v) } else { w.null() }
            w.key("op"); w.string(r.op)
            w.endObject()
        }
        w.endObject()
        w.member("eventType", "SyncTrigger")
        w.member("identityId", event.stream.identity.rawValue)
        w.member("identityPoolId", event.stream.pool.rawValue)
        w.member("region", event.region)
        w.member("version", int: 2)
        w.endObject()
        return w.bytes
    }

    /// The read-only fields of an event, as the answer must repeat them.
    static func readOnlyFields(_ event: SyncTriggerEvent) -> [(String, JSON)] {
        [("version", .number("2")), ("eventType", .string("SyncTrigger")), ("region", .string(event.region)),
         ("identityPoolId", .string(event.stream.pool.rawValue)), ("identityId", .string(event.stream.identity.rawValue)),
         ("datasetName", .string(event.stream.dataset.rawValue))]
    }

    func invoke(_ event: SyncTriggerEvent) async throws -> [String: SyncTriggerRecord] {
        let body = Self.eventJSON(event)
        let timestamp = String(Int(Date().timeIntervalSince1970))
        let mac = HMAC<SHA256>.authenticationCode(for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + Array(body), using: SymmetricKey(data: Array(hook.secret.utf8)))
        var request = HTTPClientRequest(url: hook.url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "x-syncledger-timestamp", value: timestamp)
        request.headers.add(name: "x-syncledger-signature", value: "sha256=" + Hex.encode(mac))
        request.body = .bytes(Array(body))
        let prepared = request
        let client = self.client
        let arn = hook.arn
        let stream = event.stream
        let limit = body.count + (1 << 20)
        let deadline = ContinuousClock.now + timeout
        let seconds = Self.describe(timeout)
        let answer: [UInt8]
        do {
            answer = try await withThrowingTaskGroup(of: [UInt8]?.self) { group in
                group.addTask {
                    let response = try await client.execute(prepared, deadline: .now() + .milliseconds(Int64(seconds.milliseconds)))
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
                    throw LedgerError(.hookTimeout, "the SyncTrigger \(hook.arn) did not answer within \(seconds.text)", stream: event.stream)
                }
                return bytes
            }
        } catch let error as LedgerError {
            throw error
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            throw LedgerError(.hookTimeout, "the SyncTrigger \(hook.arn) did not answer within \(seconds.text)", stream: event.stream)
        } catch let error as NIOTooManyBytesError {
            _ = error
            throw LedgerError(.hookInvalidOutput, "the SyncTrigger \(hook.arn) answered more than \(body.count + (1 << 20)) bytes", stream: event.stream)
        } catch {
            throw LedgerError(.hookInvalidOutput, "the SyncTrigger \(hook.arn) could not be reached: \(error)", stream: event.stream)
        }
        return try Self.parse(answer, sent: Self.readOnlyFields(event), hook: hook.arn, stream: event.stream)
    }

    /// The answer's `datasetRecords`, after checking it is the event's JSON with its read-only
    /// fields unchanged.
    static func parse(_ bytes: [UInt8], sent: [(String, JSON)], hook: String, stream: StreamName) throws -> [String: SyncTriggerRecord] {
        func invalid(_ why: String) -> LedgerError {
            LedgerError(.hookInvalidOutput, "the SyncTrigger \(hook) answered invalid output: \(why)", stream: stream)
        }
        guard let object = try? JSONParser.parse(bytes), case .object = object else { throw invalid("not a JSON object") }
        for (field, value) in sent {
            guard let got = object[field] else { throw invalid("\(field) is missing") }
            let same: Bool
            if case .number(let n) = got, case .number(let m) = value { same = Double(n) == Double(m) } else { same = got == value }
            guard same else { throw invalid("\(field) was changed (it is read-only)") }
        }
        guard case .object(let records)? = object["datasetRecords"] else { throw invalid("datasetRecords is not an object") }
        var result: [String: SyncTriggerRecord] = [:]
        for (key, value) in records {
            let name = "datasetRecords[\"\(key.prefix(64))\"]"
            guard case .object = value else { throw invalid("\(name) is not an object") }
            var op = "replace"
            if let given = value["op"], given != .null {
                guard case .string(let text) = given, text == "replace" || text == "remove" else { throw invalid("\(name).op is not replace or remove") }
                op = text
            }
            var newValue: String?
            if let given = value["newValue"], given != .null {
                guard case .string(let text) = given else { throw invalid("\(name).newValue is not a string or null") }
                newValue = text
            }
            var oldValue: String?
            if case .string(let text)? = value["oldValue"] { oldValue = text }
            result[key] = SyncTriggerRecord(oldValue: oldValue, newValue: newValue, op: op)
        }
        return result
    }
}
