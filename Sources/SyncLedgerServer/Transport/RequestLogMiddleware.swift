import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import SyncLedger

/// Logs and measures every request it wraps, once its answer is made: one `request` line with
/// the operation, the identity, the status and the time taken — and, for a request whose
/// signature was refused, why and the access key it claimed (`refused=`, `key=`), never the
/// secret — and the operation's count and latency in `/metrics`. What it logs, the handlers
/// left in the context's ``RequestNotes``.
struct RequestLogMiddleware<Context: SyncLedgerRequestContext>: RouterMiddleware {
    let metrics: ServerMetrics
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        let seconds = (ContinuousClock.now - start).inSeconds
        let notes = context.syncLedger.notes.with { $0 }
        let status = Int(response.status.code)
        metrics.record(operation: notes.operation, status: status, seconds: seconds)
        let micros = Int(seconds * 1_000_000)
        var line: Logger.Metadata = [
            "op": "\(notes.operation)", "identity": "\(notes.identity ?? "-")", "status": "\(status)",
            "ms": "\(micros / 1000).\(String(micros % 1000 + 1000).dropFirst())",
        ]
        if let refusal = notes.refusal {
            line["refused"] = "\(refusal.reason.rawValue)"
            line["key"] = "\(refusal.accessKeyID ?? "-")"
        }
        logger.log(level: notes.quiet ? .debug : .info, "request", metadata: line)
        return response
    }
}

extension WireResponse {
    /// The answer as Hummingbird sends it.
    var response: Response {
        var fields = HTTPFields()
        for (name, value) in headers {
            if let n = HTTPField.Name(name) { fields.append(HTTPField(name: n, value: value)) }
        }
        return Response(status: .init(code: status), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}
