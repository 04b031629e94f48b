import SyncLedger

/// An identity, as event streams are counted and indexed by it.
struct IdentityKey: Hashable, Sendable, CustomStringConvertible {
    let pool: IdentityPoolID
    let identity: IdentityID

    init(pool: IdentityPoolID, identity: IdentityID) {
        self.pool = pool
        self.identity = identity
    }

    init(_ stream: StreamName) {
        self.init(pool: stream.pool, identity: stream.identity)
    }

    var description: String { "\(pool)/\(identity)" }
}

/// Which entries of the log an event stream sees: user datasets only, narrowed by pool,
/// identity and dataset. An identity's credential always has its own pool and identity set; an
/// admin's may leave any of them open.
struct EventScope: Sendable, Hashable {
    var pool: IdentityPoolID?
    var identity: IdentityID?
    var dataset: DatasetName?

    /// The one identity the scope is within, when it names both its pool and its identity: its
    /// streams are filed under that identity (fan-out follows the identity, not every stream)
    /// and counted against its bound.
    var identityKey: IdentityKey? {
        guard let pool, let identity else { return nil }
        return IdentityKey(pool: pool, identity: identity)
    }

    /// Whether an entry of `stream` is in scope (never one of SyncLedger's own streams).
    func matches(_ stream: StreamName) -> Bool {
        guard !stream.isInternal else { return false }
        if let pool, pool != stream.pool { return false }
        if let identity, identity != stream.identity { return false }
        if let dataset, dataset != stream.dataset { return false }
        return true
    }
}

/// What a request for an event stream asks, once authenticated: its scope and where to resume.
struct EventRequest: Sendable {
    /// What the stream shows.
    var scope: EventScope
    /// The change-feed position to resume after (`Last-Event-ID`, else `lastEventId`); nil:
    /// start at the current end of the log.
    var resumeAfter: UInt64?
    /// On a cluster node, the shards' positions to resume after instead (``ShardPositions``).
    var resumeAtShards: ShardPositions?

    /// Query parameters of `GET /events` besides the presigned URL's `X-Amz-*` ones.
    static let parameters: Set<String> = ["identityPoolId", "identityId", "datasetName", "lastEventId"]

    /// Reads the scope and resume position of a request signed by `credential`.
    ///
    /// - Parameters:
    ///   - query: the decoded query pairs (the signature was checked over them).
    ///   - lastEventID: the `Last-Event-ID` header, which wins over the `lastEventId` parameter
    ///     (a browser reconnecting sends it with the URL it first opened).
    /// - Throws: ``WireError`` InvalidParameterException (400) for an unknown or repeated
    ///   parameter, an invalid name or a malformed event id; NotAuthorizedException (403) when
    ///   an identity's credential names another identity.
    ///   - shards: a cluster node's shard map (event ids are then ``ShardPositions``).
    static func parse(query: [(String, String)], lastEventID: String?, credential: Credential, shards: ShardMap? = nil) throws -> EventRequest {
        var values: [String: String] = [:]
        for (name, value) in query where !name.hasPrefix("X-Amz-") {
            guard parameters.contains(name) else {
                throw WireError.invalidParameter("GET /events takes identityPoolId, identityId, datasetName and lastEventId, not \"\(name.prefix(40))\"")
            }
            guard values.updateValue(value, forKey: name) == nil else {
                throw WireError.invalidParameter("\(name) is given more than once")
            }
        }
        func parsed<T>(_ name: String, _ make: (String) throws -> T) throws -> T? {
            guard let text = values[name] else { return nil }
            do { return try make(text) } catch let error as LedgerError { throw WireError(error) }
        }
        var scope = EventScope(
            pool: try parsed("identityPoolId") { try IdentityPoolID($0) },
            identity: try parsed("identityId") { try IdentityID($0) },
            dataset: try parsed("datasetName") { try DatasetName($0) })
        if case .identity(let pool, let identity) = credential.scope {
            guard scope.pool.map({ $0.rawValue == pool }) ?? true, scope.identity.map({ $0.rawValue == identity }) ?? true else {
                throw WireError.notAuthorized("access key \(credential.accessKeyID) may reach only identity \(identity) in pool \(pool)")
            }
            guard let ownPool = try? IdentityPoolID(pool), let ownIdentity = try? IdentityID(identity) else {
                throw WireError.notAuthorized("access key \(credential.accessKeyID) names no valid identity")
            }
            scope.pool = ownPool
            scope.identity = ownIdentity
        }
        if scope.identity == Ledger.systemIdentity {
            throw WireError.invalidParameter("identity id \(Ledger.systemIdentity) is reserved for SyncLedger's own records")
        }
        let given: (text: String, source: String)?
        if let header = lastEventID, !header.isEmpty {
            given = (header, "Last-Event-ID")
        } else if let text = values["lastEventId"], !text.isEmpty {
            given = (text, "lastEventId")
        } else {
            given = nil
        }
        guard let given else { return EventRequest(scope: scope) }
        if let shards {
            return EventRequest(scope: scope, resumeAtShards: try ShardPositions.parse(given.text, from: given.source, scope: scope, map: shards))
        }
        return EventRequest(scope: scope, resumeAfter: try eventID(given.text, from: given.source))
    }

    /// An event id: a change-feed position, 1-20 ASCII digits that fit 64 bits. Anything else
    /// (a sign, spaces, a fraction, a number past 2^64-1) is refused rather than read as
    /// something near it.
    static func eventID(_ text: String, from source: String) throws -> UInt64 {
        let utf8 = text.utf8
        guard (1...20).contains(utf8.count), utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = UInt64(text) else {
            throw WireError.invalidParameter("\(source) must be an event id this server sent (a change-feed position: a whole number from 0 to \(UInt64.max)), not \"\(text.prefix(40))\"")
        }
        return value
    }
}
