import Foundation

/// Access to JetStream through a ``NATSClient``: streams, publishing with acknowledgement,
/// reading stored messages, consumers and Key-Value buckets.
public struct JetStreamContext: Sendable {
    /// The client used for every API call.
    public let client: NATSClient
    /// The API subject prefix (`$JS.API`, or `$JS.<domain>.API`).
    public let apiPrefix: String
    /// Default time-out of API calls and publishes.
    public let timeout: Duration

    public init(client: NATSClient, apiPrefix: String = "$JS.API", timeout: Duration = .seconds(5)) {
        self.client = client
        self.apiPrefix = apiPrefix.hasSuffix(".") ? String(apiPrefix.dropLast()) : apiPrefix
        self.timeout = timeout
    }

    // MARK: - API plumbing

    private struct ErrorEnvelope: Decodable { var error: JetStreamAPIError? }

    /// Sends a request to `<apiPrefix>.<api>` and decodes the answer, throwing
    /// ``JetStreamAPIError`` when it carries an error.
    func api<Response: Decodable>(_ api: String, body: [UInt8] = [], timeout: Duration? = nil,
                                  as type: Response.Type = Response.self) async throws -> Response {
        let reply = try await client.request("\(apiPrefix).\(api)", payload: body, timeout: timeout ?? self.timeout)
        return try Self.decode(reply.payload)
    }

    static func decode<Response: Decodable>(_ payload: [UInt8], as type: Response.Type = Response.self) throws -> Response {
        let data = Data(payload)
        let decoder = JSONDecoder()
        if let envelope = try? decoder.decode(ErrorEnvelope.self, from: data), let error = envelope.error {
            throw error
        }
        do {
            return try decoder.decode(Response.self, from: data)
        } catch {
            throw NATSError.protocolViolation("undecodable JetStream answer: \(String(decoding: payload.prefix(200), as: UTF8.self))")
        }
    }

    static func encode(_ value: some Encodable) throws -> [UInt8] {
        Array(try JSONEncoder().encode(value))
    }

    /// JetStream account information (`$JS.API.INFO`); useful to wait for JetStream readiness.
    public func accountInfo() async throws -> [String: JSONValue] {
        try await api("INFO")
    }

    // MARK: - Streams

    private struct SuccessResponse: Decodable { var success: Bool? }

    /// Creates a stream (idempotent when the configuration is identical).
    @discardableResult
    public func createStream(_ config: StreamConfig) async throws -> StreamInfo {
        try await api("STREAM.CREATE.\(config.name)", body: Self.encode(config))
    }

    /// Updates a stream's configuration.
    @discardableResult
    public func updateStream(_ config: StreamConfig) async throws -> StreamInfo {
        try await api("STREAM.UPDATE.\(config.name)", body: Self.encode(config))
    }

    /// A stream's configuration and state, or nil when it does not exist (10059).
    public func streamInfo(_ name: String) async throws -> StreamInfo? {
        do {
            return try await api("STREAM.INFO.\(name)")
        } catch let e as JetStreamAPIError where e.isStreamNotFound {
            return nil
        }
    }

    /// Every stream with a subject matching `subject` (every stream when nil), with its
    /// configuration and state: `$JS.API.STREAM.LIST`, one request per page the server sends
    /// (256 streams a page), instead of one `STREAM.INFO` per stream.
    ///
    /// On a cluster, streams whose servers did not answer in time come back under `missing`
    /// and are left out here (ask ``streamInfo(_:)`` for them); paging counts them all the same.
    public func streams(subject: String? = nil) async throws -> [StreamInfo] {
        struct Request: Encodable { var offset: Int; var subject: String? }
        struct Page: Decodable { var total: Int; var streams: [StreamInfo]?; var missing: [String]? }
        var all: [String: StreamInfo] = [:]
        var offset = 0
        while true {
            let page: Page = try await api("STREAM.LIST", body: Self.encode(Request(offset: offset, subject: subject)))
            let got = page.streams ?? []
            for info in got { all[info.config.name] = info }
            offset += got.count + (page.missing?.count ?? 0)
            if got.isEmpty && (page.missing ?? []).isEmpty || offset >= page.total {
                return all.values.sorted { $0.config.name < $1.config.name }
            }
        }
    }

    /// Deletes a stream and its messages.
    public func deleteStream(_ name: String) async throws {
        let _: SuccessResponse = try await api("STREAM.DELETE.\(name)")
    }

    /// Removes every message of a stream, or of one subject.
    public func purgeStream(_ name: String, subject: String? = nil) async throws {
        let body: [UInt8] = subject.map { Array("{\"filter\":\(jsonString($0))}".utf8) } ?? []
        let _: SuccessResponse = try await api("STREAM.PURGE.\(name)", body: body)
    }

    // MARK: - Publish

    /// Publishes to a stream's subject and waits for the stream's acknowledgement.
    ///
    /// - Parameters:
    ///   - messageID: `Nats-Msg-Id`: a second publish with the same id within the stream's
    ///     duplicate window stores nothing and answers the first sequence with `duplicate` true.
    ///   - expectedLastSequence: `Nats-Expected-Last-Sequence`: stored only if the stream's last
    ///     sequence is this one, else ``JetStreamAPIError`` 10071.
    ///   - expectedLastSubjectSequence: `Nats-Expected-Last-Subject-Sequence`: the same for the
    ///     last message on `subject` (0: no message on the subject).
    ///   - expectedStream: `Nats-Expected-Stream`.
    /// - Throws: ``JetStreamAPIError``, ``NATSError/noResponders`` (no stream, or no leader yet),
    ///   ``NATSError/timeout``, ``NATSError/connectionLost``. After a time-out the message may or
    ///   may not be stored: retry with the same `messageID`.
    public func publish(_ subject: String, payload: [UInt8], headers: NATSHeaders? = nil,
                        messageID: String? = nil, expectedLastSequence: UInt64? = nil,
                        expectedLastSubjectSequence: UInt64? = nil, expectedStream: String? = nil,
                        timeout: Duration? = nil) async throws -> PubAck {
        var h = headers ?? NATSHeaders()
        if let messageID { h.set("Nats-Msg-Id", messageID) }
        if let expectedLastSequence { h.set("Nats-Expected-Last-Sequence", String(expectedLastSequence)) }
        if let expectedLastSubjectSequence {
            h.set("Nats-Expected-Last-Subject-Sequence", String(expectedLastSubjectSequence))
        }
        if let expectedStream { h.set("Nats-Expected-Stream", expectedStream) }
        let reply = try await client.request(subject, payload: payload, headers: h.isEmpty ? nil : h,
                                             timeout: timeout ?? self.timeout)
        return try Self.decode(reply.payload)
    }

    // MARK: - Reading messages

    private struct RawStoredMessage: Decodable {
        var subject: String
        var seq: UInt64
        var hdrs: String?
        var data: String?
        var time: String
    }

    private struct GetResponse: Decodable { var message: RawStoredMessage }

    private func get(stream: String, body: [UInt8]) async throws -> StoredMessage? {
        let response: GetResponse
        do {
            response = try await api("STREAM.MSG.GET.\(stream)", body: body)
        } catch let e as JetStreamAPIError where e.isMessageNotFound {
            return nil
        }
        let m = response.message
        var headers: NATSHeaders?
        if let hdrs = m.hdrs, !hdrs.isEmpty {
            guard let raw = Data(base64Encoded: hdrs) else { throw NATSError.protocolViolation("bad base64 headers") }
            headers = try NATSHeaders.parse(Array(raw))
        }
        var payload: [UInt8] = []
        if let data = m.data, !data.isEmpty {
            guard let raw = Data(base64Encoded: data) else { throw NATSError.protocolViolation("bad base64 data") }
            payload = Array(raw)
        }
        return StoredMessage(subject: m.subject, sequence: m.seq, headers: headers, payload: payload,
                             time: RFC3339.parse(m.time) ?? Date(timeIntervalSince1970: 0))
    }

    /// The message at `sequence`, read from the stream leader (`STREAM.MSG.GET`); nil when
    /// there is none (10037).
    public func getMessage(stream: String, sequence: UInt64) async throws -> StoredMessage? {
        try await get(stream: stream, body: Array("{\"seq\":\(sequence)}".utf8))
    }

    /// The last message stored on `subject`, read from the stream leader; nil when none.
    public func getLastMessage(stream: String, subject: String) async throws -> StoredMessage? {
        try await get(stream: stream, body: Array("{\"last_by_subj\":\(jsonString(subject))}".utf8))
    }

    /// The message at `sequence` through the Direct Get API (`$JS.API.DIRECT.GET.<stream>`,
    /// needs `allow_direct`; any replica may answer). Nil on status 404.
    public func directGet(stream: String, sequence: UInt64) async throws -> StoredMessage? {
        let reply = try await client.request("\(apiPrefix).DIRECT.GET.\(stream)",
                                             payload: Array("{\"seq\":\(sequence)}".utf8), timeout: timeout)
        return try Self.directMessage(reply)
    }

    /// The last message on `subject` through the Direct Get API; nil on status 404.
    public func directGetLast(stream: String, subject: String) async throws -> StoredMessage? {
        let reply = try await client.request("\(apiPrefix).DIRECT.GET.\(stream).\(subject)", payload: [],
                                             timeout: timeout)
        return try Self.directMessage(reply)
    }

    static func directMessage(_ reply: NATSMessage) throws -> StoredMessage? {
        if let status = reply.status {
            if status == 404 { return nil }
            throw JetStreamAPIError(code: status, errorCode: 0, description: reply.statusDescription ?? "direct get failed")
        }
        guard var headers = reply.headers, let subject = headers["Nats-Subject"],
              let seqText = headers["Nats-Sequence"], let seq = UInt64(seqText) else {
            throw NATSError.protocolViolation("direct get answer without Nats-Subject/Nats-Sequence")
        }
        let time = headers["Nats-Time-Stamp"].flatMap(RFC3339.parse) ?? Date(timeIntervalSince1970: 0)
        for name in ["Nats-Stream", "Nats-Sequence", "Nats-Subject", "Nats-Time-Stamp", "Nats-Last-Sequence"] {
            headers.remove(name)
        }
        return StoredMessage(subject: subject, sequence: seq, headers: headers.isEmpty ? nil : headers,
                             payload: reply.payload, time: time)
    }
}

/// Any JSON value (for loosely typed API answers).
public enum JSONValue: Codable, Sendable, Equatable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let n = try? c.decode(Double.self) { self = .number(n) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .number(let n): try c.encode(n)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }
}
