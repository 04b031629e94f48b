import Foundation
import SyncLedger
import NIOPosix
import Logging
import AsyncHTTPClient
import Hummingbird

/// What the API answers: status, headers, body.
struct WireResponse: Sendable {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8]
    /// A request the authenticator refused: why, for the log line (``AuthRefusal``).
    var refusal: AuthRefusal? = nil

    static func json(_ writer: JSONWriter) -> WireResponse {
        WireResponse(status: 200, headers: [("content-type", "application/json")], body: writer.bytes)
    }

    /// A wire shape (``SyncLedgerWire``) as a JSON answer: the same types the client decodes.
    static func json(_ shape: some Encodable) throws -> WireResponse {
        WireResponse(status: 200, headers: [("content-type", "application/json")], body: try WireJSON.encode(shape))
    }

    static func error(_ error: WireError) -> WireResponse {
        WireResponse(status: error.statusCode, headers: [("content-type", "application/json"), ("x-amzn-ErrorType", error.type)], body: error.body,
                     refusal: error.refusal)
    }
}

/// Runs a synchronous ledger read (an LMDB scan, a sort, compression) on NIO's blocking thread
/// pool, off Swift's cooperative pool, whose few threads must stay free for I/O.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(body)
}

/// The Cognito Sync 2014-06-30 REST API over a ``Ledger``: routing, authentication,
/// authorization, parameter parsing and the wire shapes of every operation.
struct CognitoAPI: Sendable {
    let ledger: Ledger
    let authenticator: Authenticator
    /// The leader's URL when this server is a read-only follower.
    var followedLeader: String? = nil
    /// Replication state shown in the segment digest answer.
    var replication: ReplicationStatus? = nil
    /// Where internal errors are logged (with their request id).
    var logger = Logger(label: "syncledger")
    /// Push delivery, when it runs here (for `POST /devices/notify`).
    var push: PushService? = nil
    /// This node, in cluster mode.
    var cluster: ClusterNode? = nil
    /// The HTTP client SyncTrigger hooks are called with (``WebhookSyncTrigger/makeClient()``),
    /// owned by the server, which shuts it down when it stops.
    var syncTriggerClient: HTTPClient? = nil
    /// How long a SyncTrigger hook has to answer (`serve --sync-trigger-timeout`).
    var syncTriggerTimeout: Duration = WebhookSyncTrigger.defaultTimeout
    /// The token buckets of the unsigned Cognito Identity calls (nil: not limited).
    var identityThrottle: IdentityThrottle? = nil
    /// In cluster mode: tells a request another node forwarded (and already counted) from a
    /// client's (``ForwardedRequestAuth``).
    var forwardAuth: ForwardedRequestAuth? = nil
    /// The identity pools past 80 % of their cap.
    var identityCapWatch: IdentityCapWatch? = nil

    /// Runs a Cognito Sync operation the router matched, its signature checked
    /// (``SigV4Middleware``): authorizes the credential for the route, refuses writes on a
    /// read-only follower, sends a write of a shard another node owns there
    /// (``ShardOwnedElsewhere``), and dispatches.
    func cognitoSync(_ operation: CognitoOperation, _ context: APIRequest) async throws -> WireResponse {
        let route = Route(operation, context)
        let credential = try context.signer()
        try authorize(credential, route)
        // Named in logs only once authenticated, and only when it is a valid id (a path segment
        // could carry any text, line breaks included).
        context.notes.with { $0.identity = route.identity.flatMap { try? IdentityID($0) }?.rawValue }
        if let leader = followedLeader, !route.operation.isRead {
            throw WireError.notAuthorized("this server is a read-only follower of \(leader); send \(route.operation.rawValue) to the leader")
        }
        if let shard = shard(of: route) { try await requireOwner(of: shard) }
        return try await dispatch(route, query: context.query, request: context.wire, credential: credential)
    }

    /// Names a Cognito Sync request's operation and, on a cluster node, its shard, before its
    /// signature is checked (so that a refused request is logged and answered under them).
    func prepareCognitoSync(_ operation: CognitoOperation, _ context: APIRequest) {
        context.notes.operation = operation.rawValue
        // The path's parameters are decoded here only on a cluster node (the handler decodes
        // them again; on a single node this runs for every request, and the shard is not needed).
        guard let cluster else { return }
        let route = Route(operation, context)
        if let pool = route.pool, let identity = route.identity {
            context.notes.with { $0.shard = shard(of: route) ?? cluster.shards.shard(pool: pool, identity: identity) }
        }
    }

    /// A Cognito Identity call (`POST /` with `X-Amz-Target: AWSCognitoIdentityService.<Op>`),
    /// in awsJson1.1: its own signing rules per operation and its own error format.
    func cognitoIdentity(_ context: APIRequest) async throws -> WireResponse {
        let request = context.wire
        guard let target = request.header("x-amz-target"), target.hasPrefix(Self.identityTargetPrefix) else {
            throw WireError.unknownOperation("no operation is POST / without an X-Amz-Target of \(Self.identityTargetPrefix)<Operation>")
        }
        if let leader = followedLeader, !["DescribeIdentityPool", "ListIdentityPools", "DescribeIdentity", "ListIdentities", "LookupDeveloperIdentity"].contains(String(target.dropFirst(Self.identityTargetPrefix.count))) {
            throw WireError.notAuthorized("this server is a read-only follower of \(leader); send Cognito Identity calls to the leader")
        }
        if cluster != nil { context.notes.with { $0.shard = ShardMap.registryShard } }
        var operation = "Unknown"
        defer { context.notes.operation = operation }
        return try await handleIdentity(request, target: target, query: context.query, operation: &operation)
    }

    private func authorize(_ credential: Credential, _ route: Route) throws {
        switch credential.scope {
        case .admin:
            return
        case .identity(let pool, let identity):
            guard route.operation.isIdentityLevel else {
                throw WireError.notAuthorized("\(route.operation.rawValue) needs the developer (admin) credential; \(credential.accessKeyID) belongs to identity \(identity)")
            }
            guard route.pool == pool, route.identity == identity else {
                throw WireError.notAuthorized("access key \(credential.accessKeyID) may reach only identity \(identity) in pool \(pool)")
            }
        }
    }

    func caller(_ credential: Credential) -> String {
        switch credential.scope {
        case .admin: "admin:\(credential.accessKeyID)"
        case .identity(_, let identity): identity
        }
    }

    // MARK: Parameters

    func poolID(_ route: Route) throws -> IdentityPoolID { try IdentityPoolID(route.pool ?? "") }
    func identityID(_ route: Route) throws -> IdentityID { try IdentityID(route.identity ?? "") }
    func stream(_ route: Route) throws -> StreamName {
        try StreamName(pool: route.pool ?? "", identity: route.identity ?? "", dataset: route.dataset ?? "")
    }

    func queryValue(_ query: [(String, String)], _ name: String) -> String? {
        query.first { $0.0 == name }?.1
    }

    func queryInt(_ query: [(String, String)], _ name: String, range: ClosedRange<Int64>) throws -> Int64? {
        guard let text = queryValue(query, name) else { return nil }
        guard let value = Int64(text), range.contains(value) else {
            throw WireError.invalidParameter("\(name) must be an integer in \(range.lowerBound)...\(range.upperBound), not \"\(text.prefix(40))\"")
        }
        return value
    }

    /// A request body in its wire shape (``SyncLedgerWire``); an empty body is `{}`.
    ///
    /// The body passes the strict parser first (``body(_:)``: RFC 8259, UTF-8, nesting depth,
    /// the position of a syntax error), then Foundation's decoder reads the shape. Foundation's
    /// decoder alone, on Linux, answers every syntax error with "The given data was not valid
    /// JSON." — no position, no reason — and takes numbers such as `00`.
    /// - Throws: InvalidParameterException saying where the body is not JSON, or naming the
    ///   member that is missing or malformed (`RecordPatches[2].SyncCount`).
    func decode<T: Decodable>(_ shape: T.Type, _ request: WireRequest) throws -> T {
        _ = try body(request)
        do {
            return try WireJSON.decode(T.self, from: request.body.isEmpty ? Array("{}".utf8) : request.body)
        } catch {
            throw WireError.invalidParameter(error.description)
        }
    }

    func body(_ request: WireRequest) throws -> JSON {
        if request.body.isEmpty { return .object([]) }
        let json: JSON
        do { json = try JSONParser.parse(request.body) } catch {
            throw WireError.invalidParameter("the request body is not valid JSON: \(error)")
        }
        guard case .object = json else { throw WireError.invalidParameter("the request body must be a JSON object, not \(json.typeName)") }
        return json
    }

    func string(_ value: JSON?, _ path: String, required: Bool = false) throws -> String? {
        switch value {
        case nil, .null?:
            if required { throw WireError.invalidParameter("\(path) is required") }
            return nil
        case .string(let s)?: return s
        case let other?: throw WireError.invalidParameter("\(path) must be a string, not \(other.typeName)")
        }
    }

    func integer(_ value: JSON?, _ path: String, required: Bool = false) throws -> Int64? {
        switch value {
        case nil, .null?:
            if required { throw WireError.invalidParameter("\(path) is required") }
            return nil
        case .number(let text)?:
            guard let v = Int64(text) ?? Double(text).flatMap({ $0 == $0.rounded() && abs($0) < 9e18 ? Int64($0) : nil }) else {
                throw WireError.invalidParameter("\(path) must be a whole number, not \(text)")
            }
            return v
        case let other?: throw WireError.invalidParameter("\(path) must be a number, not \(other.typeName)")
        }
    }

    /// A date sent as epoch seconds (botocore's rest-json form).
    func date(_ value: JSON?, _ path: String) throws -> Timestamp? {
        switch value {
        case nil, .null?: return nil
        case .number(let text)?:
            guard let seconds = Double(text), seconds.isFinite, abs(seconds) < 1e13 else {
                throw WireError.invalidParameter("\(path) must be epoch seconds, not \(text)")
            }
            return Timestamp(milliseconds: Int64((seconds * 1000).rounded()))
        case let other?: throw WireError.invalidParameter("\(path) must be a date in epoch seconds, not \(other.typeName)")
        }
    }

    // MARK: Dispatch

    private func dispatch(_ route: Route, query: [(String, String)], request: WireRequest, credential: Credential) async throws -> WireResponse {
        switch route.operation {
        case .listRecords: return try await listRecords(route, query)
        case .updateRecords: return try await updateRecords(route, request, credential)
        case .deleteDataset:
            let before = try await ledger.deleteDataset(try stream(route), caller: caller(credential))
            return try .json(CognitoSync.DeleteDatasetResponse(dataset: Self.wireDataset(before)))
        case .describeDataset:
            let s = try stream(route)
            let ledger = self.ledger
            let d = try await offPool { try ledger.describeDataset(s) }
            return try .json(CognitoSync.DescribeDatasetResponse(dataset: Self.wireDataset(d)))
        case .listDatasets: return try await listDatasets(route, query)
        case .describeIdentityUsage:
            let (pool, id) = (try poolID(route), try identityID(route))
            let ledger = self.ledger
            let u = try await offPool { try ledger.identityUsage(pool: pool, identity: id) }
            return try .json(CognitoSync.DescribeIdentityUsageResponse(identityUsage: CognitoSync.IdentityUsage(
                identityId: u.identity.rawValue, identityPoolId: u.pool.rawValue, lastModifiedDate: u.lastModified,
                datasetCount: Int(u.datasetCount), dataStorage: UInt64(u.dataStorage))))
        case .describeIdentityPoolUsage:
            let u = try await ledger.poolUsage(try poolID(route))
            return try .json(CognitoSync.DescribeIdentityPoolUsageResponse(identityPoolUsage: Self.wirePoolUsage(u)))
        case .listIdentityPoolUsage:
            let max = Int(try queryInt(query, "maxResults", range: 1...1_000_000) ?? 60)
            // Admin only; it reads the pools' names (one row each) before paging.
            let page = try await ledger.listPools(maxResults: max, nextToken: queryValue(query, "nextToken"))
            return try .json(CognitoSync.ListIdentityPoolUsageResponse(identityPoolUsages: page.pools.map(Self.wirePoolUsage), maxResults: max,
                                                                       count: page.pools.count, nextToken: page.nextToken))
        case .registerDevice:
            let body = try decode(CognitoSync.RegisterDeviceRequest.self, request)
            guard let platform = Platform(rawValue: body.platform), Platform.cognito.contains(platform) else {
                throw WireError.invalidParameter("Platform must be one of APNS, APNS_SANDBOX, GCM, ADM, not \"\(body.platform.prefix(40))\"")
            }
            let id = try await ledger.registerDevice(pool: try poolID(route), identity: try identityID(route), platform: platform, token: body.token)
            return try .json(CognitoSync.RegisterDeviceResponse(deviceId: id))
        case .subscribeToDataset, .unsubscribeFromDataset:
            let deviceID = route.deviceID ?? ""
            guard (1...256).contains(deviceID.utf8.count) else { throw WireError.invalidParameter("DeviceId must be 1-256 characters") }
            if route.operation == .subscribeToDataset {
                try await ledger.subscribe(try stream(route), deviceID: deviceID)
            } else {
                try await ledger.unsubscribe(try stream(route), deviceID: deviceID)
            }
            return WireResponse(status: 200, headers: [("content-type", "application/json")], body: Array("{}".utf8))
        case .getIdentityPoolConfiguration:
            let pool = try poolID(route)
            return try .json(configurationBody(pool, try ledger.poolConfiguration(pool)))
        case .setIdentityPoolConfiguration:
            let pool = try poolID(route)
            let body = try decode(CognitoSync.SetIdentityPoolConfigurationRequest.self, request)
            let push = try pushSync(body.pushSync)
            let streams = try cognitoStreams(body.cognitoStreams)
            let config = try await ledger.setPoolConfiguration(pool, pushSync: push, cognitoStreams: streams, caller: caller(credential))
            return try .json(configurationBody(pool, config))
        case .getCognitoEvents:
            return try .json(CognitoSync.CognitoEvents(events: try ledger.cognitoEvents(try poolID(route))))
        case .setCognitoEvents:
            let pool = try poolID(route)
            guard let events = try decode(CognitoSync.CognitoEvents.self, request).events else { throw WireError.invalidParameter("Events is required") }
            guard events.count <= 1 else { throw WireError.invalidParameter("Events may hold at most 1 entry, not \(events.count)") }
            for name in events.keys where name != "SyncTrigger" {
                throw WireError.invalidParameter("unknown Cognito event \"\(name.prefix(40))\"; the one event is SyncTrigger")
            }
            try await ledger.setCognitoEvents(pool, events, caller: caller(credential))
            return WireResponse(status: 200, body: [])
        case .bulkPublish:
            let pool = try poolID(route)
            // IN_PROGRESS now; the leader's stream delivery (StreamService) publishes the
            // pool's datasets through the stream's sink and completes it (on a cluster, the
            // registry shard's owner, where this write runs).
            try await ledger.beginBulkPublish(pool, caller: caller(credential))
            return try .json(CognitoSync.BulkPublishResponse(identityPoolId: pool.rawValue))
        case .getBulkPublishDetails:
            let pool = try poolID(route)
            let d = try ledger.bulkPublishDetails(pool)
            // As Cognito: the completion time of a success only, the message of a failure only.
            return try .json(CognitoSync.GetBulkPublishDetailsResponse(
                identityPoolId: pool.rawValue, bulkPublishStartTime: d.started, bulkPublishCompleteTime: d.status == "SUCCEEDED" ? d.completed : nil,
                bulkPublishStatus: d.status, failureMessage: d.failureMessage))
        }
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
    var isASCIILetterOrDigit: Bool { isASCIIDigit || ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}
