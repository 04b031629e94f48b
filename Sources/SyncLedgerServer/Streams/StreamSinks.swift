import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import SyncLedger

/// Why a sink did not acknowledge a batch (it is sent again after a backoff).
struct StreamSinkError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Delivers one batch of stream records; returns only when the sink acknowledged all of them.
protocol StreamSink: Sendable {
    func deliver(_ records: [StreamRecord]) async throws
}

enum StreamSinks {
    /// The sink `configuration` describes.
    static func make(_ configuration: StreamSinkConfiguration, client: HTTPClient) throws -> any StreamSink {
        switch configuration.kind {
        case .http:
            guard let url = configuration.url, let secret = configuration.secret, !secret.isEmpty else {
                throw StreamSinkError("the http sink of stream \(configuration.streamName) lacks its URL or secret")
            }
            return HTTPStreamSink(url: url, secret: SymmetricKey(data: Array(secret.utf8)), client: client)
        case .directory:
            guard let directory = configuration.directory else {
                throw StreamSinkError("the directory sink of stream \(configuration.streamName) lacks its folder")
            }
            return DirectoryStreamSink(directory: directory, maxFileBytes: configuration.maxFileBytes ?? 64 << 20)
        case .kinesis:
            guard let url = configuration.url, let region = configuration.region, let key = configuration.accessKeyID,
                  let secret = configuration.secretAccessKey else {
                throw StreamSinkError("the Kinesis sink of stream \(configuration.streamName) lacks its URL, region or keys")
            }
            return KinesisStreamSink(url: url, streamName: configuration.streamName,
                                     signer: SigV4Signer(accessKeyID: key, secretAccessKey: secret, region: region, service: "kinesis"), client: client)
        }
    }
}

/// POSTs `{"Records":[…]}` to a URL, signed `X-SyncLedger-Signature: sha256=<hex HMAC-SHA256
/// (secret, body)>`. Only a 2xx answer acknowledges the batch.
struct HTTPStreamSink: StreamSink {
    let url: String
    let secret: SymmetricKey
    let client: HTTPClient

    /// The body of a batch: the records' JSON, as they are, in an array under `Records`.
    static func body(_ records: [StreamRecord]) -> [UInt8] {
        var body = Array("{\"Records\":[".utf8)
        for (i, r) in records.enumerated() {
            if i > 0 { body.append(0x2C) }
            body += r.json
        }
        body += Array("]}".utf8)
        return body
    }

    /// The signature header's value for `body`.
    static func signature(secret: SymmetricKey, body: [UInt8]) -> String {
        "sha256=" + Hex.encode(HMAC<SHA256>.authenticationCode(for: body, using: secret))
    }

    func deliver(_ records: [StreamRecord]) async throws {
        let body = Self.body(records)
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "SyncLedger-streams")
        request.headers.add(name: "x-syncledger-signature", value: Self.signature(secret: secret, body: body))
        request.body = .bytes(body)
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: .seconds(30)) } catch {
            throw StreamSinkError("the http sink is unreachable: \(error)")
        }
        _ = try? await response.body.collect(upTo: 1 << 20)
        guard (200..<300).contains(response.status.code) else { throw StreamSinkError("the http sink answered HTTP \(response.status.code)") }
    }
}

/// Appends each record as one line of JSON to `stream-<first sequence>.jsonl` files in a
/// folder, starting a new file once one reaches `maxFileBytes`; the file (and the folder, for
/// a new file) is fsync'd before the batch counts as acknowledged.
struct DirectoryStreamSink: StreamSink {
    let directory: String
    let maxFileBytes: Int

    func deliver(_ records: [StreamRecord]) async throws {
        guard let first = records.first else { return }
        try Self.append(records, first: first.sequence, directory: directory, maxFileBytes: maxFileBytes)
    }

    static func append(_ records: [StreamRecord], first: UInt64, directory: String, maxFileBytes: Int) throws {
        let fm = FileManager.default
        do { try fm.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw StreamSinkError("cannot make the stream folder \(directory): \(error)")
        }
        let names = ((try? fm.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasPrefix("stream-") && $0.hasSuffix(".jsonl") }.sorted()
        var name = names.last
        if let current = name, let size = (try? fm.attributesOfItem(atPath: directory + "/" + current))?[.size] as? Int, size >= maxFileBytes { name = nil }
        let created = name == nil
        let path = directory + "/" + (name ?? String(format: "stream-%020llu.jsonl", first))
        var bytes: [UInt8] = []
        for r in records { bytes += r.json; bytes.append(0x0A) }
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StreamSinkError("cannot open \(path): errno \(errno)") }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw StreamSinkError("cannot write \(path): errno \(errno)") }
            done += n
        }
        guard fsync(fd) == 0 else { throw StreamSinkError("cannot fsync \(path): errno \(errno)") }
        if created {
            let dir = open(directory, O_RDONLY | O_CLOEXEC)
            if dir >= 0 { _ = fsync(dir); close(dir) }
        }
    }
}
