import Foundation
import SyncLedger

/// Cognito Identity (2014-06-30) on the same port, awsJson1_1 as botocore's `cognito-identity`
/// model describes it: `POST /` with `X-Amz-Target: AWSCognitoIdentityService.<Operation>`,
/// errors as `{"__type": …, "message": …}`. GetId and GetCredentialsForIdentity need no
/// signature (as in AWS); the pool and identity operations need the developer (admin)
/// credential, signed for the service `cognito-identity`.
///
/// Served: identity pools (create, describe, update, list, delete), unauthenticated identities
/// (GetId, GetCredentialsForIdentity with stateless temporary credentials), logins of
/// configured OpenID Connect providers (``Ledger/verifyLogins(pool:_:)``) that link and merge
/// identities as Cognito does (``Ledger/signIn(pool:identity:proven:logins:caller:)``),
/// developer-authenticated identities (GetOpenIdTokenForDeveloperIdentity, whose ES256 token
/// GetCredentialsForIdentity and GetOpenIdToken accept as `Logins["cognito-identity.amazonaws.com"]`,
/// LookupDeveloperIdentity, MergeDeveloperIdentities, UnlinkDeveloperIdentity; the key is served
/// at `/.well-known/jwks.json`), UnlinkIdentity, DescribeIdentity, ListIdentities,
/// DeleteIdentities. Roles and tags are not served (a typed error says so).
extension CognitoAPI {
    static let identityTargetPrefix = "AWSCognitoIdentityService."

    /// The operations that need no signature.
    /// The Cognito Identity operations this server answers (the last seven with a refusal that
    /// says why it has no IAM roles or tags).
    static let identityOperations: Set<String> = [
        "CreateIdentityPool", "DeleteIdentities", "DeleteIdentityPool", "DescribeIdentity", "DescribeIdentityPool",
        "GetCredentialsForIdentity", "GetId", "GetOpenIdToken", "GetOpenIdTokenForDeveloperIdentity",
        "ListIdentities", "ListIdentityPools", "LookupDeveloperIdentity", "MergeDeveloperIdentities", "UnlinkDeveloperIdentity",
        "UnlinkIdentity", "UpdateIdentityPool",
        "GetIdentityPoolRoles", "SetIdentityPoolRoles", "ListTagsForResource", "TagResource", "UntagResource",
        "GetPrincipalTagAttributeMap", "SetPrincipalTagAttributeMap",
    ]
    static let unsignedIdentityOperations: Set<String> = ["GetId", "GetCredentialsForIdentity", "GetOpenIdToken", "UnlinkIdentity"]

    /// How long GetCredentialsForIdentity's credentials live.
    static let identityCredentialLifetime: Duration = .seconds(3600)

    /// Handles one Cognito Identity request; every failure is the model's error shape.
    /// - Throws: only ``ForwardToOwner``, on a cluster node that does not own the registry shard.
    func handleIdentity(_ request: WireRequest, target: String, query: [(String, String)], operation: inout String) async throws(ForwardToOwner) -> WireResponse {
        let name = String(target.dropFirst(Self.identityTargetPrefix.count))
        // Only the operations it has name a request in logs and metrics: the target is the
        // caller's text, before any signature is checked, and must not mint metric labels.
        operation = "Identity." + (Self.identityOperations.contains(name) ? name : "Unknown")
        do {
            var credential: Credential?
            if !Self.unsignedIdentityOperations.contains(name) {
                var identityAuthenticator = authenticator
                identityAuthenticator.service = "cognito-identity"
                let signed = try identityAuthenticator.authenticate(request, queryPairs: query)
                guard case .admin = signed.scope else {
                    throw IdentityError("NotAuthorizedException", "\(name) needs the developer (admin) credential")
                }
                credential = signed
            }
            let json = try body(request)
            if let throttle = identityThrottle, IdentityThrottle.operations.contains(name) { try admitIdentityCall(name, json, request, throttle) }
            if Self.identityReads.contains(name) { await catchUp(shard: ShardMap.registryShard) } else { try await requireOwner(of: ShardMap.registryShard) }
            let result = try await dispatchIdentity(name, json, caller: credential.map(caller) ?? "cognito-identity")
            return WireResponse(status: 200, headers: [("content-type", "application/x-amz-json-1.1")], body: result.bytes)
        } catch let elsewhere as ShardOwnedElsewhere {
            // Cluster mode: the registry shard is another node's; the request handler forwards it.
            var w = JSONWriter()
            w.beginObject(); w.member("__type", "TooManyRequestsException")
            w.member("message", "this call writes the registry shard, which another node owns; retry"); w.endObject()
            let answer = WireResponse(status: 429, headers: [("content-type", "application/x-amz-json-1.1"), ("x-amzn-ErrorType", "TooManyRequestsException")], body: w.bytes)
            throw ForwardToOwner(elsewhere: elsewhere, answer: answer)
        } catch {
            let (type, status, message) = Self.identityError(error)
            if status >= 500 { logger.error("internal error", metadata: ["op": "\(operation)", "error": "\(error)"]) }
            var w = JSONWriter()
            w.beginObject(); w.member("__type", type); w.member("message", message); w.endObject()
            return WireResponse(status: status, headers: [("content-type", "application/x-amz-json-1.1"), ("x-amzn-ErrorType", type)], body: w.bytes)
        }
    }

    /// The model's error name and status of a failure.
    static func identityError(_ error: any Error) -> (String, Int, String) {
        if let e = error as? IdentityError { return (e.type, e.status, e.message) }
        if let wire = error as? WireError {
            let type = wire.type == "InvalidParameterException" || wire.type == "NotAuthorizedException" || wire.type == "ResourceNotFoundException"
                || wire.type == "LimitExceededException" || wire.type == "ResourceConflictException" ? wire.type : (wire.statusCode >= 500 ? "InternalErrorException" : "InvalidParameterException")
            return (type, wire.statusCode >= 500 ? 500 : 400, wire.message)
        }
        if let ledger = error as? LedgerError {
            switch ledger.code {
            case .notFound: return ("ResourceNotFoundException", 400, ledger.message)
            case .notAuthorized: return ("NotAuthorizedException", 400, ledger.message)
            case .limitExceeded: return ("LimitExceededException", 400, ledger.message)
            case .invalidParameter: return ("InvalidParameterException", 400, ledger.message)
            case .unavailable: return ("TooManyRequestsException", 429, ledger.message)
            case .conflict: return ("ResourceConflictException", 400, ledger.message)
            case .alreadyRegistered: return ("DeveloperUserAlreadyRegisteredException", 400, ledger.message)
            default:
                // Any other refusal is the caller's: never a 500.
                return ledger.isCleanRefusal ? ("InvalidParameterException", 400, ledger.message) : ("InternalErrorException", 500, "internal error")
            }
        }
        return ("InternalErrorException", 500, "internal error")
    }

    private func dispatchIdentity(_ name: String, _ json: JSON, caller: String) async throws -> JSONWriter {
        switch name {
        case "CreateIdentityPool":
            let pool = try await ledger.createIdentityPool(
                region: authenticator.regions.sorted().first ?? "us-east-1",
                name: try string(json["IdentityPoolName"], "IdentityPoolName", required: true)!,
                allowUnauthenticatedIdentities: try requiredBool(json["AllowUnauthenticatedIdentities"], "AllowUnauthenticatedIdentities"),
                developerProviderName: try string(json["DeveloperProviderName"], "DeveloperProviderName"),
                supportedLoginProviders: try stringMap(json["SupportedLoginProviders"], "SupportedLoginProviders") ?? [:],
                openIdConnectProviderARNs: try stringList(json["OpenIdConnectProviderARNs"], "OpenIdConnectProviderARNs") ?? [], caller: caller)
            return identityPoolBody(pool)
        case "DescribeIdentityPool":
            let id = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            guard let pool = try ledger.identityPool(id) else { throw LedgerError(.notFound, "identity pool \(id) does not exist") }
            return identityPoolBody(pool)
        case "UpdateIdentityPool":
            let id = try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!
            let updated = IdentityPoolDefinition(
                id: try IdentityPoolID(id).rawValue, name: try string(json["IdentityPoolName"], "IdentityPoolName", required: true)!,
                allowUnauthenticatedIdentities: try requiredBool(json["AllowUnauthenticatedIdentities"], "AllowUnauthenticatedIdentities"),
                developerProviderName: try string(json["DeveloperProviderName"], "DeveloperProviderName"),
                supportedLoginProviders: try stringMap(json["SupportedLoginProviders"], "SupportedLoginProviders") ?? [:],
                openIdConnectProviderARNs: try stringList(json["OpenIdConnectProviderARNs"], "OpenIdConnectProviderARNs") ?? [], created: .now)
            return identityPoolBody(try await ledger.updateIdentityPool(updated, caller: caller))
        case "ListIdentityPools":
            let max = try integer(json["MaxResults"], "MaxResults", required: true)!
            guard (1...60).contains(max) else { throw WireError.invalidParameter("MaxResults must be 1-60, not \(max)") }
            let next = try string(json["NextToken"], "NextToken")
            let ledger = self.ledger
            let page = try await offPool { try ledger.identityPools(maxResults: Int(max), nextToken: next) }
            var w = JSONWriter()
            w.beginObject(); w.key("IdentityPools"); w.beginArray()
            for pool in page.pools {
                w.beginObject(); w.member("IdentityPoolId", pool.id); w.member("IdentityPoolName", pool.name); w.endObject()
            }
            w.endArray()
            w.member("NextToken", page.nextToken)
            w.endObject()
            return w
        case "DeleteIdentityPool":
            try await ledger.deleteIdentityPool(try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!), caller: caller)
            return emptyObject()
        case "GetId":
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            if let account = try string(json["AccountId"], "AccountId"), !(1...15).contains(account.count) || !account.allSatisfy(\.isASCIIDigit) {
                throw WireError.invalidParameter("AccountId must be 1-15 digits")
            }
            let id: String
            if let logins = try loginsParameter(json) {
                let verified = try await ledger.verifyLogins(pool: pool, logins)
                if verified.logins.isEmpty, let proven = verified.proven {
                    id = proven
                } else {
                    let result = try await ledger.signIn(pool: pool, identity: nil, proven: verified.proven, logins: verified.logins, caller: caller)
                    id = result.identity
                    if result.created { watchIdentityCap(pool) }
                }
            } else {
                id = try await ledger.newUnauthenticatedIdentity(pool: pool).id
                watchIdentityCap(pool)
            }
            var w = JSONWriter()
            w.beginObject(); w.member("IdentityId", id); w.endObject()
            return w
        case "GetCredentialsForIdentity":
            let (id, pool, signedIn) = try await signInParameters(json, caller: caller)
            if let role = try string(json["CustomRoleArn"], "CustomRoleArn"), !(20...2048).contains(role.utf8.count) {
                throw WireError.invalidParameter("CustomRoleArn must be 20-2048 characters")
            }
            let credentials = try await ledger.credentialsForIdentity(pool: pool, id: id, lifetime: Self.identityCredentialLifetime,
                                                                openIdToken: signedIn.token, signedIn: signedIn.done)
            var w = JSONWriter()
            w.beginObject()
            w.member("IdentityId", id)
            w.key("Credentials"); w.beginObject()
            w.member("AccessKeyId", credentials.accessKeyID)
            w.member("SecretKey", credentials.secretKey)
            w.member("SessionToken", credentials.sessionToken)
            w.member("Expiration", date: credentials.expiration.milliseconds)
            w.endObject()
            w.endObject()
            return w
        case "DescribeIdentity":
            let id = try identityIDParameter(json)
            guard let pool = try ledger.poolOfIdentity(id), let record = try ledger.identity(pool: pool, id: id) else {
                throw LedgerError(.notFound, "identity \(id) does not exist")
            }
            var w = JSONWriter()
            writeIdentity(&w, record)
            return w
        case "ListIdentities":
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            let max = try integer(json["MaxResults"], "MaxResults", required: true)!
            guard (1...60).contains(max) else { throw WireError.invalidParameter("MaxResults must be 1-60, not \(max)") }
            let next = try string(json["NextToken"], "NextToken")
            let hide = try boolean(json["HideDisabled"], "HideDisabled") ?? false
            let ledger = self.ledger
            let page = try await offPool { try ledger.identities(pool: pool, maxResults: Int(max), nextToken: next, hideDisabled: hide) }
            var w = JSONWriter()
            w.beginObject()
            w.member("IdentityPoolId", pool.rawValue)
            w.key("Identities"); w.beginArray()
            for record in page.identities { writeIdentity(&w, record) }
            w.endArray()
            w.member("NextToken", page.nextToken)
            w.endObject()
            return w
        case "DeleteIdentities":
            guard case .array(let items)? = json["IdentityIdsToDelete"] else { throw WireError.invalidParameter("IdentityIdsToDelete is required: an array of 1-60 identity ids") }
            guard (1...60).contains(items.count) else { throw WireError.invalidParameter("IdentityIdsToDelete must hold 1-60 ids, not \(items.count)") }
            var byPool: [IdentityPoolID: [String]] = [:]
            var unprocessed: [String] = []
            for (i, item) in items.enumerated() {
                guard case .string(let id) = item, (try? IdentityID(id)) != nil else { throw WireError.invalidParameter("IdentityIdsToDelete[\(i)] is not an identity id") }
                if let pool = try ledger.poolOfIdentity(id) { byPool[pool, default: []].append(id) } else { unprocessed.append(id) }
            }
            for (pool, ids) in byPool { unprocessed += try await ledger.deleteIdentities(pool: pool, ids: ids, caller: caller) }
            var w = JSONWriter()
            w.beginObject(); w.key("UnprocessedIdentityIds"); w.beginArray()
            for id in unprocessed.sorted() {
                w.beginObject(); w.member("IdentityId", id); w.member("ErrorCode", "InternalServerError"); w.endObject()
            }
            w.endArray(); w.endObject()
            return w
        case "GetOpenIdToken":
            let (id, pool, signedIn) = try await signInParameters(json, caller: caller)
            // The same rules as credentials: an unauthenticated identity of a pool that allows
            // them, or an authenticated one its logins proved.
            _ = try await ledger.credentialsForIdentity(pool: pool, id: id, lifetime: .seconds(1), openIdToken: signedIn.token, signedIn: signedIn.done)
            let logins = try ledger.identity(pool: pool, id: id)?.logins ?? []
            var w = JSONWriter()
            w.beginObject(); w.member("IdentityId", id)
            let token = try await ledger.openIdToken(pool: pool, identity: id, logins: logins, duration: .seconds(600))
            w.member("Token", token); w.endObject()
            return w
        case "GetOpenIdTokenForDeveloperIdentity":
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            guard let logins = try stringMap(json["Logins"], "Logins"), logins.count == 1, let (provider, user) = logins.first else {
                throw WireError.invalidParameter("Logins must hold exactly one entry: the pool's developer provider name and the user's identifier")
            }
            let requested = try string(json["IdentityId"], "IdentityId")
            if let requested { _ = try IdentityID(requested) }
            let duration = try integer(json["TokenDuration"], "TokenDuration") ?? 900
            guard (1...86_400).contains(duration) else { throw WireError.invalidParameter("TokenDuration must be 1-86400 seconds, not \(duration)") }
            let (id, token) = try await ledger.developerIdentityToken(pool: pool, identity: requested, provider: provider, user: user, duration: .seconds(duration))
            watchIdentityCap(pool)
            var w = JSONWriter()
            w.beginObject(); w.member("IdentityId", id); w.member("Token", token); w.endObject()
            return w
        case "LookupDeveloperIdentity":
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            let id = try string(json["IdentityId"], "IdentityId")
            let user = try string(json["DeveloperUserIdentifier"], "DeveloperUserIdentifier")
            guard id != nil || user != nil else { throw WireError.invalidParameter("give IdentityId or DeveloperUserIdentifier") }
            let found = try ledger.lookupDeveloperIdentity(pool: pool, identity: id, user: user)
            var w = JSONWriter()
            w.beginObject(); w.member("IdentityId", found.identity)
            w.key("DeveloperUserIdentifierList"); w.beginArray(); for u in found.users { w.string(u) }; w.endArray()
            w.endObject()
            return w
        case "UnlinkDeveloperIdentity":
            let id = try identityIDParameter(json)
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            try await ledger.unlinkDeveloperIdentity(pool: pool, identity: id, provider: try string(json["DeveloperProviderName"], "DeveloperProviderName", required: true)!,
                                                     user: try string(json["DeveloperUserIdentifier"], "DeveloperUserIdentifier", required: true)!, caller: caller)
            return emptyObject()
        case "UnlinkIdentity":
            let id = try identityIDParameter(json)
            guard let pool = try ledger.poolOfIdentity(id) else { throw LedgerError(.notFound, "identity \(id) does not exist") }
            guard let logins = try loginsParameter(json) else { throw WireError.invalidParameter("Logins is required: the tokens that prove the identity") }
            guard case .array(let items)? = json["LoginsToRemove"] else { throw WireError.invalidParameter("LoginsToRemove is required: a list of provider names") }
            let providers = try items.enumerated().map { i, item -> String in
                guard case .string(let name) = item, (1...128).contains(name.utf8.count) else { throw WireError.invalidParameter("LoginsToRemove[\(i)] must be a provider name of 1-128 characters") }
                return name
            }
            let verified = try await ledger.verifyLogins(pool: pool, logins)
            try await ledger.unlinkLogins(pool: pool, identity: id, proof: verified.logins, proven: verified.proven, providers: providers, caller: caller)
            return emptyObject()
        case "MergeDeveloperIdentities":
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            let provider = try string(json["DeveloperProviderName"], "DeveloperProviderName", required: true)!
            let source = try string(json["SourceUserIdentifier"], "SourceUserIdentifier", required: true)!
            let destination = try string(json["DestinationUserIdentifier"], "DestinationUserIdentifier", required: true)!
            for (name, value) in [("SourceUserIdentifier", source), ("DestinationUserIdentifier", destination)] where !(1...1024).contains(value.utf8.count) {
                throw WireError.invalidParameter("\(name) must be 1-1024 characters")
            }
            let id = try await ledger.mergeDeveloperIdentities(pool: pool, provider: provider, source: source, destination: destination, caller: caller)
            var w = JSONWriter()
            w.beginObject(); w.member("IdentityId", id); w.endObject()
            return w
        case "GetIdentityPoolRoles", "SetIdentityPoolRoles", "ListTagsForResource", "TagResource", "UntagResource",
             "GetPrincipalTagAttributeMap", "SetPrincipalTagAttributeMap":
            throw IdentityError("InvalidParameterException", "\(name) is not served by this SyncLedger: it has no IAM roles, principal tags or resource tags (credentials are scoped to their identity)")
        default:
            throw IdentityError("UnknownOperationException", "no Cognito Identity operation is named \(name.prefix(64))")
        }
    }

    /// `Logins` (provider → token, at most 10), nil when absent or empty.
    private func loginsParameter(_ json: JSON) throws -> [String: String]? {
        guard let logins = try stringMap(json["Logins"], "Logins"), !logins.isEmpty else { return nil }
        guard logins.count <= 10 else { throw WireError.invalidParameter("Logins may hold at most 10 providers, not \(logins.count)") }
        for (provider, token) in logins {
            guard (1...128).contains(provider.utf8.count) else { throw WireError.invalidParameter("Logins keys must be provider names of 1-128 characters") }
            guard (1...50_000).contains(token.utf8.count) else { throw WireError.invalidParameter("Logins[\(provider.prefix(128))] must be a token of 1-50000 characters") }
        }
        return logins
    }

    /// GetCredentialsForIdentity's and GetOpenIdToken's `IdentityId` and `Logins`: the
    /// identity to serve (after a sign-in that may have linked or merged), its pool, and how it
    /// was proved — this server's token alone (checked when credentials are made), or a
    /// sign-in that verified every login.
    private func signInParameters(_ json: JSON, caller: String) async throws -> (String, IdentityPoolID, (token: String?, done: Bool)) {
        let id = try identityIDParameter(json)
        guard let pool = try ledger.poolOfIdentity(id) else { throw LedgerError(.notFound, "identity \(id) does not exist") }
        guard let logins = try loginsParameter(json) else { return (id, pool, (nil, false)) }
        let verified = try await ledger.verifyLogins(pool: pool, logins)
        if verified.logins.isEmpty {
            // This server's own token: no write, the fast path of the developer flow.
            return (id, pool, (logins[Ledger.openIdProvider], false))
        }
        let result = try await ledger.signIn(pool: pool, identity: id, proven: verified.proven, logins: verified.logins, caller: caller)
        if result.created { watchIdentityCap(pool) }
        return (result.identity, pool, (nil, true))
    }

    /// `IdentityId`, checked.
    func identityIDParameter(_ json: JSON) throws -> String {
        let id = try string(json["IdentityId"], "IdentityId", required: true)!
        _ = try IdentityID(id)
        return id
    }

    private func requiredBool(_ value: JSON?, _ path: String) throws -> Bool {
        guard let b = try boolean(value, path) else { throw WireError.invalidParameter("\(path) is required") }
        return b
    }

    private func emptyObject() -> JSONWriter {
        var w = JSONWriter()
        w.beginObject(); w.endObject()
        return w
    }

    private func identityPoolBody(_ pool: IdentityPoolDefinition) -> JSONWriter {
        var w = JSONWriter()
        w.beginObject()
        w.member("IdentityPoolId", pool.id)
        w.member("IdentityPoolName", pool.name)
        w.member("AllowUnauthenticatedIdentities", bool: pool.allowUnauthenticatedIdentities)
        w.member("DeveloperProviderName", pool.developerProviderName)
        if !pool.supportedLoginProviders.isEmpty {
            w.key("SupportedLoginProviders"); w.beginObject()
            for (k, v) in pool.supportedLoginProviders.sorted(by: { $0.key < $1.key }) { w.member(k, v) }
            w.endObject()
        }
        if let arns = pool.openIdConnectProviderARNs, !arns.isEmpty {
            w.key("OpenIdConnectProviderARNs"); w.beginArray(); for arn in arns { w.string(arn) }; w.endArray()
        }
        w.endObject()
        return w
    }

    /// A list of strings, nil when absent.
    private func stringList(_ value: JSON?, _ path: String) throws -> [String]? {
        switch value {
        case nil, .null?: return nil
        case .array(let items)?:
            return try items.enumerated().map { i, item in
                guard case .string(let text) = item else { throw WireError.invalidParameter("\(path)[\(i)] must be a string, not \(item.typeName)") }
                return text
            }
        case let other?: throw WireError.invalidParameter("\(path) must be a list of strings, not \(other.typeName)")
        }
    }

    private func writeIdentity(_ w: inout JSONWriter, _ record: IdentityRecord) {
        w.beginObject()
        w.member("IdentityId", record.id)
        w.key("Logins"); w.beginArray(); for login in record.logins { w.string(login) }; w.endArray()
        w.member("CreationDate", date: record.created.milliseconds)
        w.member("LastModifiedDate", date: record.modified.milliseconds)
        w.endObject()
    }
}

/// A Cognito Identity error with the model's name.
struct IdentityError: Error {
    let type: String
    let status: Int
    let message: String
    init(_ type: String, _ message: String, status: Int = 400) {
        self.type = type
        self.message = message
        self.status = status
    }
}
