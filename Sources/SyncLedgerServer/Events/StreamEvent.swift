import NIOCore
import SyncLedger

/// One event of a live stream: a user dataset's log entry, sent as a "poke" — which dataset
/// changed and its new sync count; the client pulls the records with ListRecords.
///
/// Made once per entry by whoever reads it from the log (the hub, or a stream catching up) and
/// shared by every stream it goes to.
struct StreamEvent: Sendable {
    /// The change-feed position: the event's id.
    let sequence: UInt64
    /// The dataset.
    let stream: StreamName
    /// The JSON object (one line), with Cognito's push keys: `{"source":"cognito-sync",
    /// "identityPoolId", "identityId", "datasetName", "syncCount" (a string, as Cognito's push
    /// message has it), "sequence", "deleted", "deviceId"}`.
    let json: [UInt8]

    init(_ summary: CommitSummary) {
        sequence = summary.sequence
        stream = summary.stream
        var w = JSONWriter()
        w.beginObject()
        w.member("source", "cognito-sync")
        w.member("identityPoolId", summary.stream.pool.rawValue)
        w.member("identityId", summary.stream.identity.rawValue)
        w.member("datasetName", summary.stream.dataset.rawValue)
        w.member("syncCount", String(summary.offset))
        w.member("sequence", int: summary.sequence)
        w.member("deleted", bool: summary.deletesDataset)
        w.key("deviceId")
        if let device = summary.device { w.string(device) } else { w.null() }
        w.endObject()
        json = w.bytes
    }

    /// The Server-Sent Events block: `id`, `event: dataset`, `data` (JSON escapes every control
    /// character, so the data is one line).
    func writeSSE(to buffer: inout ByteBuffer, id: String) {
        buffer.writeString("id: \(id)\nevent: dataset\ndata: ")
        buffer.writeBytes(json)
        buffer.writeString("\n\n")
    }

    /// The WebSocket text message: the same object with `"id"` (the SSE id, as a string) first.
    func webSocketText(id: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(json.count + id.utf8.count + 16)
        buffer.writeString("{\"id\":\"\(id)\",")
        buffer.writeBytes(json.dropFirst())
        return buffer
    }
}
