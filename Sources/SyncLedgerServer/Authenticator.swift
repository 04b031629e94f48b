import Foundation
import Crypto
import SyncLedger
import Synchronization

/// An HTTP request as the API layer sees it: raw path and query as sent, headers, body.
struct WireRequest: Sendable {
    var method: String
    var rawPath: String
    var rawQuery: String?
    var headers: [(String, String)]
    var body: [UInt8]
    /// The connection's peer address (IPv4 or IPv6), when the transport knows it: the source
    /// the unsigned Cognito Identity calls are throttled by (``IdentityThrottle``).
    var peer: String? = nil
    /// Set on a request this node runs a second time (its shard's hand-over made this node the
    /// owner): it already took its tokens from the identity throttle on the first run.
    var identityThrottleCharged = false

    /// The first value of header `name`, given in lower case (header names arrive lower-cased
    /// from the HTTP layer; others are compared case-insensitively).
    func header(_ name: String) -> String? {
        for (key, value) in headers where key == name || (key.utf8.count == name.utf8.count && key.lowercased() == name) {
            return value
        }
        return nil
    }
}

/// Verifies AWS Signature Version 4 on every request — the Authorization header form and the
/// presigned query form — and finds the credential that signed it.
///
/// What it costs before the signature checks out is bounded by the request: nothing is cached,
/// the region must be one this server serves, and an unknown access key gets the same answer as
/// a wrong signature (and costs the same HMACs as a known key whose signing key is not cached:
/// a key used in the last day verifies with one HMAC instead of five).
struct Authenticator: Sendable {
    let ledger: Ledger
    /// The admin credential set by the operator (`SYNCLEDGER_ACCESS_KEY_ID` /
    /// `SYNCLEDGER_SECRET_ACCESS_KEY`), if any. While one is set, stored admin credentials (the
    /// one generated on first start) are not accepted.
    let configuredAdmin: Credential?
    /// The regions a credential scope may name.
    var regions: Set<String> = ["us-east-1"]
    /// How far `x-amz-date` may be from the server's clock (15 minutes).
    var maxSkew: TimeInterval = 900
    /// The service name the scope must carry.
    var service = "cognito-sync"
    /// The server's clock.
    var now: @Sendable () -> Date = { Date() }
    /// Derived signing keys of requests that verified, which change once a day per credential.
    let signingKeys = SigningKeyCache()

    /// The one answer to a request signed with an unknown key, a wrong secret or a wrong
    /// security token: which of them it was is not for an unauthenticated caller to learn.
    static let signatureMismatch = WireError.notAuthorized("the request signature does not match, or the access key is not valid: check the access key id, the secret, the session token and the signing method")

    /// ``signatureMismatch`` for `credential`, telling the log (not the caller) whether the key
    /// was one this server knows.
    private static func mismatch(_ credential: Credential) -> WireError {
        var error = signatureMismatch
        error.refusal = AuthRefusal(reason: credential.secretAccessKey == unknownKeySecret ? .unknownKey : .signature)
        return error
    }

    /// The credential that signed `request`.
    /// - Throws: ``WireError`` NotAuthorizedException saying what is wrong.
    ///   A refusal carries, for the server's log, why and the access key id the request claimed
    ///   (``AuthRefusal``).
    func authenticate(_ request: WireRequest, queryPairs: [(String, String)]) throws -> Credential {
        do {
            if let authorization = request.header("authorization") {
                return try verifyHeader(authorization, request, queryPairs)
            }
            if queryPairs.contains(where: { $0.0 == "X-Amz-Signature" }) {
                return try verifyPresigned(request, queryPairs)
            }
            throw WireError.refused(.unsigned, "the request is not signed: send an AWS Signature Version 4 Authorization header or a presigned URL")
        } catch var error as WireError where error.refusal != nil {
            error.refusal?.accessKeyID = Self.claimedAccessKey(request, queryPairs)
            throw error
        }
    }

    /// The access key id a request names (the first part of its credential scope), as a log
    /// value; nil when it names none.
    static func claimedAccessKey(_ request: WireRequest, _ queryPairs: [(String, String)]) -> String? {
        let scope: Substring
        if let authorization = request.header("authorization") {
            guard let start = authorization.range(of: "Credential=") else { return nil }
            scope = authorization[start.upperBound...]
        } else if let credential = queryPairs.first(where: { $0.0 == "X-Amz-Credential" })?.1 {
            scope = Substring(credential)
        } else {
            return nil
        }
        let id = scope.prefix { $0 != "/" && $0 != "," && $0 != " " }
        return AuthRefusal.loggable(id)
    }

    private struct Parsed {
        var accessKeyID: String
        var date: String
        var region: String
        var signedHeaders: [String]
        var signature: String
    }

    /// `AKID/yyyyMMdd/region/service/aws4_request`.
    private func parseCredential(_ text: String) throws -> (String, String, String) {
        let parts = text.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { String(Substring($0)) }
        guard parts.count == 5, parts[4] == "aws4_request", !parts[0].isEmpty else {
            throw WireError.refused(.malformed, "malformed credential scope \"\(text.prefix(200))\"")
        }
        guard parts[3] == service else {
            throw WireError.refused(.service, "the credential scope names service \"\(parts[3].prefix(64))\", not \(service)")
        }
        guard regions.contains(parts[2]) else {
            throw WireError.refused(.region, "the credential scope names region \"\(parts[2].prefix(64))\"; this server serves \(regions.sorted().joined(separator: ", ")) (syncledger serve --region)")
        }
        return (parts[0], parts[1], parts[2])
    }

    private func verifyHeader(_ authorization: String, _ request: WireRequest, _ queryPairs: [(String, String)]) throws -> Credential {
        guard authorization.hasPrefix(SigV4.algorithm + " ") else {
            throw WireError.refused(.malformed, "unsupported authorization scheme; use \(SigV4.algorithm)")
        }
        var fields: [String: String] = [:]
        for part in authorization.utf8.dropFirst(SigV4.algorithm.utf8.count + 1).split(separator: UInt8(ascii: ",")) {
            let trimmed = part.drop { $0 == UInt8(ascii: " ") }
            guard let eq = trimmed.firstIndex(of: UInt8(ascii: "=")) else { continue }
            var value = trimmed[trimmed.index(after: eq)...]
            while value.last == UInt8(ascii: " ") { value = value.dropLast() }
            fields[String(decoding: trimmed[..<eq], as: UTF8.self)] = String(decoding: value, as: UTF8.self)
        }
        guard let credentialText = fields["Credential"], let signedText = fields["SignedHeaders"], let signature = fields["Signature"] else {
            throw WireError.refused(.malformed, "the Authorization header lacks Credential, SignedHeaders or Signature")
        }
        let (accessKeyID, day, region) = try parseCredential(credentialText)
        guard let amzDate = request.header("x-amz-date") else {
            throw WireError.refused(.malformed, "the x-amz-date header is missing")
        }
        try checkTime(amzDate: amzDate, day: day, expires: nil)
        let signedHeaders = signedText.split(separator: ";").map { $0.lowercased() }
        guard signedHeaders.contains("host"), signedHeaders.contains("x-amz-date") else {
            throw WireError.refused(.unsignedHeaders, "SignedHeaders must include host and x-amz-date")
        }
        let credential = try lookup(accessKeyID, sessionToken: request.header("x-amz-security-token"))
        let actualHash = SigV4.sha256Hex(request.body)
        if let claimed = request.header("x-amz-content-sha256"), claimed != actualHash {
            throw WireError.refused(.payload, "x-amz-content-sha256 does not match the body")
        }
        let canonical = SigV4.canonicalRequest(
            method: request.method, canonicalURI: SigV4.canonicalURI(rawPath: request.rawPath),
            canonicalQuery: SigV4.canonicalQuery(queryPairs), headers: request.headers,
            signedHeaders: signedHeaders, payloadHash: actualHash)
        let key = try checkSignature(signature, credential: credential, amzDate: amzDate, day: day, region: region, canonical: canonical)
        try checkToken(credential, sent: request.header("x-amz-security-token"), signed: signedHeaders.contains("x-amz-security-token"))
        return try accept(credential, key: key, day: day, region: region)
    }

    private func verifyPresigned(_ request: WireRequest, _ queryPairs: [(String, String)]) throws -> Credential {
        func param(_ name: String) throws -> String {
            guard let value = queryPairs.first(where: { $0.0 == name })?.1 else {
                throw WireError.refused(.malformed, "the presigned URL lacks \(name)")
            }
            return value
        }
        guard try param("X-Amz-Algorithm") == SigV4.algorithm else {
            throw WireError.refused(.malformed, "unsupported X-Amz-Algorithm; use \(SigV4.algorithm)")
        }
        let (accessKeyID, day, region) = try parseCredential(try param("X-Amz-Credential"))
        let amzDate = try param("X-Amz-Date")
        guard let expires = Int(try param("X-Amz-Expires")), (1...604_800).contains(expires) else {
            throw WireError.refused(.malformed, "X-Amz-Expires must be 1-604800 seconds")
        }
        try checkTime(amzDate: amzDate, day: day, expires: expires)
        let signedHeaders = try param("X-Amz-SignedHeaders").split(separator: ";").map { $0.lowercased() }
        guard signedHeaders.contains("host") else { throw WireError.refused(.unsignedHeaders, "X-Amz-SignedHeaders must include host") }
        let credential = try lookup(accessKeyID, sessionToken: queryPairs.first { $0.0 == "X-Amz-Security-Token" }?.1)
        let signature = try param("X-Amz-Signature")
        let unsignedQuery = queryPairs.filter { $0.0 != "X-Amz-Signature" }
        // An unsigned payload is for reads only: a presigned URL that leaks must not let anyone
        // post a body of their choosing under it.
        var payloadHashes = [SigV4.sha256Hex(request.body)]
        if request.method == "GET" || request.method == "HEAD", request.body.isEmpty { payloadHashes.append("UNSIGNED-PAYLOAD") }
        for payloadHash in payloadHashes {
            let canonical = SigV4.canonicalRequest(
                method: request.method, canonicalURI: SigV4.canonicalURI(rawPath: request.rawPath),
                canonicalQuery: SigV4.canonicalQuery(unsignedQuery), headers: request.headers,
                signedHeaders: signedHeaders, payloadHash: payloadHash)
            if let key = try? checkSignature(signature, credential: credential, amzDate: amzDate, day: day, region: region, canonical: canonical) {
                try checkToken(credential, sent: queryPairs.first { $0.0 == "X-Amz-Security-Token" }?.1, signed: true)
                return try accept(credential, key: key, day: day, region: region)
            }
        }
        throw Self.mismatch(credential)
    }

    private func checkTime(amzDate: String, day: String, expires: Int?) throws {
        guard let date = SigV4.parseAmzDate(amzDate) else {
            throw WireError.refused(.malformed, "x-amz-date \"\(amzDate)\" is not yyyyMMddTHHmmssZ")
        }
        guard amzDate.hasPrefix(day) else {
            throw WireError.refused(.scope, "the credential scope date \(day) differs from x-amz-date \(amzDate)")
        }
        let now = now()
        if let expires {
            guard date.timeIntervalSince(now) <= maxSkew else { throw WireError.refused(.expired, "the presigned URL is dated in the future (\(amzDate))") }
            guard now.timeIntervalSince(date) <= Double(expires) else { throw WireError.refused(.expired, "the presigned URL expired (signed \(amzDate), valid \(expires) s)") }
        } else {
            guard abs(date.timeIntervalSince(now)) <= maxSkew else {
                throw WireError.refused(.expired, "the signature is expired or not yet valid: x-amz-date \(amzDate) is more than 15 minutes from the server's time \(SigV4.amzDate(now))")
            }
        }
    }

    /// The credential with this access key id — or, for a key this server does not accept, a
    /// stand-in with a random secret, so that checking the signature costs the same and fails
    /// with the same answer as a wrong secret.
    private func lookup(_ accessKeyID: String, sessionToken: String?) throws -> Credential {
        if let configuredAdmin, accessKeyID == configuredAdmin.accessKeyID { return configuredAdmin }
        var found: Credential?
        do {
            found = try ledger.secrets.credential(accessKeyID: accessKeyID)
            // Temporary credentials of Cognito Identity are not stored: the session token
            // carries them under the server's key (Ledger.temporaryCredential).
            if found == nil { found = try ledger.temporaryCredential(accessKeyID: accessKeyID, sessionToken: sessionToken) }
        } catch {
            throw WireError.internalError("could not read credentials: \(error)")
        }
        // While the operator's admin credential is set, a stored (generated) admin one is not.
        if let found, !(configuredAdmin != nil && found.scope == .admin) { return found }
        return Credential(accessKeyID: accessKeyID, secretAccessKey: Self.unknownKeySecret, scope: .identity(pool: "", identity: ""), expires: Timestamp(milliseconds: 0))
    }

    /// The secret of the stand-in for unknown keys: random per process, never matched.
    private static let unknownKeySecret = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }

    private func checkToken(_ credential: Credential, sent: String?, signed: Bool) throws {
        switch (credential.sessionToken, sent) {
        case (nil, nil): return
        case (nil, .some), (.some, nil): throw Self.mismatch(credential)
        case (.some(let expected), .some(let given)):
            guard constantTimeEqual(expected, given) else { throw Self.mismatch(credential) }
            guard signed else { throw WireError.refused(.unsignedHeaders, "x-amz-security-token must be a signed header") }
        }
    }

    /// Checks the signature; returns the signing key it verified with.
    private func checkSignature(_ signature: String, credential: Credential, amzDate: String, day: String, region: String, canonical: String) throws -> [UInt8] {
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        // Cached by region and service: the same key signs for cognito-sync and cognito-identity.
        let key = signingKeys.key(accessKeyID: credential.accessKeyID, secret: credential.secretAccessKey, date: day, region: "\(region)/\(service)")
            ?? SigV4.signingKey(secret: credential.secretAccessKey, date: day, region: region, service: service)
        let expected = SigV4.signature(signingKey: key, stringToSign: SigV4.stringToSign(amzDate: amzDate, scope: scope, canonicalRequest: canonical))
        guard constantTimeEqual(expected, signature.lowercased()) else { throw Self.mismatch(credential) }
        return key
    }

    /// A credential whose signature verified: refused once expired (an unknown key's stand-in
    /// never gets here), else its signing key is remembered and it is the caller.
    private func accept(_ credential: Credential, key: [UInt8], day: String, region: String) throws -> Credential {
        guard !credential.isExpired(at: Timestamp(now())) else {
            throw WireError.refused(.expiredCredential, "the credential \(credential.accessKeyID) expired at \(credential.expires!); get a new one")
        }
        signingKeys.remember(key, accessKeyID: credential.accessKeyID, secret: credential.secretAccessKey, date: day, region: "\(region)/\(service)")
        return credential
    }
}

/// Remembers SigV4 signing keys (four HMACs to derive) of requests that verified, by access
/// key, secret, day and region. Only verified requests add to it, and the regions are the
/// server's, so its size is bounded by the credentials in use; it starts over past 10,000.
final class SigningKeyCache: Sendable {
    private struct Entry {
        let secret: String
        let key: [UInt8]
    }
    private let keys = Mutex<[String: Entry]>([:])

    private static func id(_ accessKeyID: String, _ date: String, _ region: String) -> String { "\(accessKeyID)/\(date)/\(region)" }

    /// The remembered key, if this access key with this secret verified on that day and region.
    func key(accessKeyID: String, secret: String, date: String, region: String) -> [UInt8]? {
        keys.withLock { cache in
            guard let entry = cache[Self.id(accessKeyID, date, region)], constantTimeEqual(entry.secret, secret) else { return nil }
            return entry.key
        }
    }

    func remember(_ key: [UInt8], accessKeyID: String, secret: String, date: String, region: String) {
        keys.withLock { cache in
            if cache.count >= 10_000 { cache.removeAll() }
            cache[Self.id(accessKeyID, date, region)] = Entry(secret: secret, key: key)
        }
    }

    /// How many keys it holds (for tests).
    var count: Int { keys.withLock { $0.count } }
}

func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let x = Array(a.utf8)
    let y = Array(b.utf8)
    guard x.count == y.count else { return false }
    var d: UInt8 = 0
    for (p, q) in zip(x, y) { d |= p ^ q }
    return d == 0
}
