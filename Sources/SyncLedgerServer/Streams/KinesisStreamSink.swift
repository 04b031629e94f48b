import AsyncHTTPClient
import Foundation
import NIOCore
import SyncLedger

/// Kinesis `PutRecords` (awsJson1_1, `X-Amz-Target: Kinesis_20131202.PutRecords`, SigV4 for
/// service `kinesis`) against a configured endpoint: each record's JSON base64-encoded as
/// `Data`, `PartitionKey` `identityId/dataSetName`.
///
/// Kinesis orders records per partition key only within what it accepted, and a `PutRecords`
/// may accept some records and refuse others. So a batch goes in rounds holding at most one
/// record per partition key (round k: the k-th record of each dataset), and a round's refused
/// records are sent again before the next round: a dataset's records are accepted in order.
/// A round still refused after a few tries fails the batch (sent again whole, later).
struct KinesisStreamSink: StreamSink {
    let url: String
    let streamName: String
    let signer: SigV4Signer
    let client: HTTPClient
    static let triesPerRound = 5

    func deliver(_ records: [StreamRecord]) async throws {
        var rounds: [[StreamRecord]] = []
        var depth: [String: Int] = [:]
        for r in records {
            let k = depth[r.partitionKey, default: 0]
            depth[r.partitionKey] = k + 1
            if rounds.count <= k { rounds.append([]) }
            rounds[k].append(r)
        }
        for round in rounds {
            var pending = round
            var tries = 0
            while !pending.isEmpty {
                tries += 1
                let refused = try await put(pending)
                if !refused.isEmpty, tries >= Self.triesPerRound {
                    throw StreamSinkError("Kinesis refused \(refused.count) records \(tries) times")
                }
                if !refused.isEmpty { try await Task.sleep(for: .milliseconds(50 << min(tries, 6))) }
                pending = refused
            }
        }
    }

    /// One `PutRecords`; the records it refused.
    private func put(_ records: [StreamRecord]) async throws -> [StreamRecord] {
        let object: [String: Any] = [
            "StreamName": streamName,
            "Records": records.map { ["Data": Data($0.json).base64EncodedString(), "PartitionKey": $0.partitionKey] },
        ]
        let body = Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
        guard let parts = URLComponents(string: url), let host = parts.host else { throw StreamSinkError("the Kinesis URL \(url) has no host") }
        let hostHeader = parts.port.map { "\(host):\($0)" } ?? host
        let path = parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath
        let headers = [("content-type", "application/x-amz-json-1.1"), ("x-amz-target", "Kinesis_20131202.PutRecords")]
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers + signer.sign(method: "POST", host: hostHeader, rawPath: path, rawQuery: nil, headers: headers, body: body) {
            request.headers.replaceOrAdd(name: name, value: value)
        }
        request.body = .bytes(body)
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: .seconds(30)) } catch {
            throw StreamSinkError("Kinesis is unreachable: \(error)")
        }
        let reply = try? await response.body.collect(upTo: 4 << 20)
        guard (200..<300).contains(response.status.code) else { throw StreamSinkError("Kinesis answered HTTP \(response.status.code)") }
        guard let reply, let parsed = try? JSONSerialization.jsonObject(with: Data(buffer: reply)) as? [String: Any],
              let results = parsed["Records"] as? [[String: Any]], results.count == records.count else {
            throw StreamSinkError("Kinesis's PutRecords answer does not list one result per record")
        }
        return zip(records, results).compactMap { record, result in result["ErrorCode"] == nil ? nil : record }
    }
}
