import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import SyncLedger

/// The floor under every API route (Cognito Sync and Identity, devices and messages, segments,
/// admin, cluster): reads the request's body (within `maxBodyBytes`; the transport refused
/// larger ones before reading them), checks what every route relies on — a Host header, a path
/// of percent-decodable segments none of them empty (but for one trailing slash), `.` or `..`
/// (the signature covers the path as sent, so no segment may mean anything but itself), a
/// decodable query — and answers every
/// failure in Cognito's format (`x-amzn-ErrorType` and `{"message"}`), an internal error (500)
/// saying only that with the request id, its cause in the server's log under that id. Every
/// answer carries an `x-amzn-RequestId`; a cluster node's also names the request's shard owner.
///
/// In cluster mode, a route that throws ``ShardOwnedElsewhere`` (a write of a shard another
/// node owns) is handed to that owner once, exactly as it arrived (``ClusterForwarder``); a
/// request forwarded here is never forwarded again.
struct APIMiddleware<Context: SyncLedgerRequestContext>: RouterMiddleware {
    let api: CognitoAPI
    let maxBodyBytes: Int
    /// In cluster mode: hands requests of shards another node owns to that node.
    var forwarder: ClusterForwarder? = nil

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        var request = request
        do {
            context.syncLedger.wire = try await Self.read(&request, channel: context.channel, maxBodyBytes: maxBodyBytes)
        } catch {
            return WireResponse.error(error).response
        }
        var (response, elsewhere) = await run(request, context, next)
        // A write of a shard another node owns goes there, once: a forwarded request that finds
        // the owner moved again answers 503 rather than travel on. A request run again here was
        // charged by the identity throttle on its first run.
        if let elsewhere, let forwarder, let cluster = api.cluster {
            var again = context
            again.syncLedger.wire.identityThrottleCharged = true
            let wire = context.syncLedger.wire
            if wire.header(ClusterForwarder.header) == nil {
                switch await forwarder.handOver(wire, elsewhere, cluster: cluster) {
                case .runHere: response = await run(request, again, next).response
                case .answered(let answer):
                    context.syncLedger.notes.operation += ".Forwarded"
                    return answer.response
                case .noOwner: break
                }
            } else if await ClusterForwarder.finishTakingOver(elsewhere, cluster: cluster) {
                response = await run(request, again, next).response
            }
        }
        return response
    }

    /// Checks the request and runs its route: the route's answer or its failure in Cognito's
    /// format, with the request id and (on a cluster node) the shard's owner; and, when the
    /// route belongs to a shard another node owns, which.
    private func run(_ request: Request, _ context: Context, _ next: (Request, Context) async throws -> Response) async -> (response: Response, elsewhere: ShardOwnedElsewhere?) {
        let requestID = RequestID.make()
        var response: Response
        var elsewhere: ShardOwnedElsewhere?
        do {
            var context = context
            try Self.check(&context)
            response = try await next(request, context)
        } catch let owned as ShardOwnedElsewhere {
            let owner = owned.owner.map { "node \($0.node)" } ?? "no node yet (its lease is being taken over)"
            response = WireResponse.error(WireError(type: "ServiceUnavailableException", status: 503,
                                                    message: "this write belongs to shard \(owned.shard), owned by \(owner); nothing was written, retry")).response
            elsewhere = owned
        } catch let forward as ForwardToOwner {
            response = forward.answer.response
            elsewhere = forward.elsewhere
        } catch let notFound as HTTPError where notFound.status == .notFound {
            response = WireResponse.error(.unknownOperation("no operation is \(request.method.rawValue) \(request.uri.path.prefix(200))")).response
        } catch {
            var wire = WireError(any: error)
            let operation = context.syncLedger.notes.operation
            if wire.statusCode == 503 {
                // Retriable and said as such (a cluster shard busy or between owners): the message
                // stays, and it is no fault of the server's.
                api.logger.warning("unavailable", metadata: ["request_id": "\(requestID)", "op": "\(operation)", "error": "\(error)"])
            } else if wire.statusCode >= 500 {
                api.logger.error("internal error", metadata: ["request_id": "\(requestID)", "op": "\(operation)", "error": "\(error)"])
                wire = WireError(type: wire.type, status: wire.statusCode, message: "internal error; the server's log has the details under request id \(requestID)")
            }
            if let refusal = wire.refusal { context.syncLedger.notes.with { $0.refusal = refusal } }
            response = WireResponse.error(wire).response
        }
        if response.headers[HTTPField.Name("x-amzn-RequestId")!] == nil {
            response.headers[HTTPField.Name("x-amzn-RequestId")!] = requestID
        }
        if let shard = context.syncLedger.notes.with({ $0.shard }) {
            for (name, value) in api.ownerHeaders(of: shard) { response.headers.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        }
        return (response, elsewhere)
    }

    /// The request as the API reads it, its body read (within `maxBodyBytes`).
    /// - Throws: InvalidParameterException for a body the transport cut off (it answers that
    ///   request itself; this answer is dropped) or one over the limit.
    static func read(_ request: inout Request, channel: any Channel, maxBodyBytes: Int) async throws(WireError) -> WireRequest {
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: maxBodyBytes)
        } catch let cut as RequestCut {
            throw .invalidParameter(cut.description)
        } catch {
            throw .invalidParameter("the request body exceeds \(maxBodyBytes) bytes or could not be read")
        }
        // HTTP/1's Host header arrives as the :authority pseudo-header.
        var headers = request.headers.map { ($0.name.canonicalName, $0.value) }
        if let authority = request.head.authority { headers.append(("host", authority)) }
        return WireRequest(method: request.method.rawValue, rawPath: request.uri.path, rawQuery: request.uri.query,
                           headers: headers, body: Array(buffer.readableBytesView), peer: channel.remoteAddress?.ipAddress)
    }

    /// What every API route relies on: a Host header, a path of decodable segments (none empty,
    /// `.` or `..`) and a decodable query; the query goes into the context (the route's
    /// parameters are read, decoded, from the router's match).
    static func check(_ context: inout Context) throws {
        let request = context.syncLedger.wire
        guard request.header("host") != nil else {
            throw WireError.invalidParameter("the request has no Host header; HTTP/1.1 requires one and the signature covers it")
        }
        guard request.rawPath.hasPrefix("/") else { throw WireError.invalidParameter("the request path must start with /") }
        // One trailing slash is the path without it (as the router reads it): `POST /` under a
        // host application's prefix arrives as `/prefix/`.
        var path = request.rawPath.utf8.dropFirst()
        if path.last == UInt8(ascii: "/") { path = path.dropLast() }
        for raw in path.isEmpty ? [] : path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard let segment = SigV4.percentDecode(String(decoding: raw, as: UTF8.self)) else {
                throw WireError.invalidParameter("the request path has a malformed percent-escape or is not UTF-8")
            }
            guard !segment.isEmpty, segment != ".", segment != ".." else {
                throw WireError.invalidParameter("the request path has an empty, \".\" or \"..\" segment")
            }
        }
        guard let query = SigV4.queryPairs(request.rawQuery) else {
            throw WireError.invalidParameter("the query string has a malformed percent-escape or is not UTF-8")
        }
        context.syncLedger.query = query
    }
}

/// Checks the request's SigV4 signature (the Authorization header or a presigned query) with the
/// server's verifier before its route runs, and puts the credential that signed it in the
/// context. `prepare` first names the operation (and, on a cluster, the shard) in the request's
/// notes, so that a refused request is logged under what it asked for.
struct SigV4Middleware<Context: SyncLedgerRequestContext>: RouterMiddleware {
    let authenticator: Authenticator
    var prepare: @Sendable (APIRequest) -> Void = { _ in }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        prepare(APIRequest(context))
        var context = context
        context.syncLedger.credential = try authenticator.authenticate(context.syncLedger.wire, queryPairs: context.syncLedger.query)
        return try await next(request, context)
    }
}
