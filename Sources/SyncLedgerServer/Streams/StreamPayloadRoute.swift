import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import SyncLedger

/// `GET /streams/payload/<token>`: the records of a stream record sent by reference
/// (`payloadType` `S3Url`). Like an S3 presigned URL it needs no other credential: the token
/// is HMAC-signed by the ledger's token key and expires (7 days), so only a holder of a record
/// the server streamed can read its payload. Before the signature is checked the server spends
/// one HMAC over at most 256 bytes; an unsigned, altered or expired token gets 403, a sequence
/// the ledger lacks 404.
enum StreamPayloadRoute {
    static let prefix = "/streams/payload/"

    static func respond(path: String, ledger: Ledger, logger: Logger) -> (Response, status: Int) {
        let token = String(path.dropFirst(prefix.count))
        do {
            let body = try ledger.streamPayload(token: token)
            return (Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: "private, max-age=3600"],
                             body: .init(byteBuffer: ByteBuffer(bytes: body))), 200)
        } catch let error as LedgerError where error.code == .notAuthorized || error.code == .notFound {
            let status: HTTPResponse.Status = error.code == .notFound ? .notFound : .forbidden
            return (message(status, error.message), status.code)
        } catch {
            logger.error("streams: cannot answer a payload", metadata: ["error": "\(error)"])
            return (message(.internalServerError, "internal error"), 500)
        }
    }

    static func message(_ status: HTTPResponse.Status, _ text: String) -> Response {
        var w = JSONWriter()
        w.beginObject(); w.member("message", text); w.endObject()
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: w.bytes)))
    }
}
