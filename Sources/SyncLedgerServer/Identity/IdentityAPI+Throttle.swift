import SyncLedger

/// The throttle of the unsigned Cognito Identity calls and the cap's warning, as
/// ``CognitoAPI/handleIdentity(_:target:query:operation:)`` applies them (see docs/identity.md).
extension CognitoAPI {
    /// Takes a token from the caller's source bucket, then from the pool's (a pool that does
    /// not exist takes none: the call fails on its own). A request another node of the cluster
    /// forwarded was counted where it arrived: it passes only with a valid MAC
    /// (``ForwardedRequestAuth``), never for its `x-syncledger-forwarded` header or its peer;
    /// a request run again on this node after a hand-over was charged on its first run.
    /// - Throws: TooManyRequestsException (429) when a bucket is empty.
    func admitIdentityCall(_ name: String, _ json: JSON, _ request: WireRequest, _ throttle: IdentityThrottle) throws {
        if request.identityThrottleCharged { return }
        if let forwardAuth, forwardAuth.isAuthentic(request) { return }
        let source = throttle.source(of: request)
        let options = throttle.options
        if let wait = throttle.admit(source: source, operation: name) {
            throw IdentityError("TooManyRequestsException", "too many unsigned Cognito Identity calls from \(source) (\(Self.rateText(options.sourceRate, options.sourceBurst))); retry in \(Self.secondsText(wait))", status: 429)
        }
        let pool: IdentityPoolID?
        if name == "GetId" {
            pool = (try? string(json["IdentityPoolId"], "IdentityPoolId")).flatMap { try? IdentityPoolID($0) }
        } else {
            pool = (try? identityIDParameter(json)).flatMap { try? ledger.poolOfIdentity($0) }
        }
        guard let pool, (try? ledger.identityPool(pool)) != nil else { return }
        if let wait = throttle.admit(pool: pool.rawValue, operation: name) {
            throw IdentityError("TooManyRequestsException", "too many unsigned Cognito Identity calls into identity pool \(pool) (\(Self.rateText(options.poolRate, options.poolBurst))); retry in \(Self.secondsText(wait))", status: 429)
        }
    }

    private static func rateText(_ rate: Double, _ burst: Double) -> String {
        func text(_ x: Double) -> String { x == x.rounded() && abs(x) < 1e15 ? String(Int64(x)) : String(x) }
        return "the limit is \(text(rate)) a second, \(text(burst)) at once"
    }

    private static func secondsText(_ seconds: Double) -> String {
        "\((max(seconds, 0.001) * 1000).rounded(.up) / 1000) s"
    }

    /// Warns (log and `/metrics`) when an identity pool passes 80 % of its cap.
    func watchIdentityCap(_ pool: IdentityPoolID) {
        guard let watch = identityCapWatch, let count = try? ledger.identityRecordCount(pool: pool) else { return }
        if watch.observe(pool: pool.rawValue, records: count) {
            logger.warning("identity pool passed 80% of its cap", metadata: [
                "pool": "\(pool)", "records": "\(count)", "cap": "\(watch.cap)",
            ])
        }
    }
}
