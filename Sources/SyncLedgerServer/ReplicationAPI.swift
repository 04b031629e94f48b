import Foundation
import ServiceLifecycle
import SyncLedger

/// The leader's side of replication, for admin credentials only (the caller checked):
///
/// - `GET /segments/feed?after=SEQ&maxBytes=N[&wait=SECONDS]` — the change feed after a commit
///   sequence. 200 with a segment, or 204 when there is nothing after `after`. With `wait`
///   (at most ``maxFeedWait``), a request that finds nothing is held until a commit brings
///   entries after `after` or the wait passes (long polling: an idle follower sends one request
///   per wait instead of polling). The header `x-syncledger-last-sequence` gives the ledger's
///   latest sequence either way, and `x-syncledger-ledger-id` the ledger's id. When the request
///   carries `x-syncledger-nonce`, the answer carries `x-syncledger-signature`
///   (``FeedAuthentication``, docs/replication.md).
/// - `GET /segments/digest` — `{"Digest", "Sequence"}` of this ledger.
extension CognitoAPI {
    /// The longest `wait` a feed request may ask for.
    static var maxFeedWait: Duration { .seconds(30) }

    func handleReplication(_ what: String, query: [(String, String)], request: WireRequest) async throws -> (WireResponse, String, String?) {
        func number(_ name: String, default value: UInt64) throws -> UInt64 {
            guard let text = query.first(where: { $0.0 == name })?.1 else { return value }
            guard let n = UInt64(text) else { throw WireError.invalidParameter("\(name) must be a non-negative integer, not \"\(text.prefix(40))\"") }
            return n
        }
        switch what {
        case "feed":
            let after = try number("after", default: 0)
            let maxBytes = Int(min(try number("maxBytes", default: 1 << 20), 64 << 20))
            let wait = Duration.seconds(min(try number("wait", default: 0), UInt64(Self.maxFeedWait.components.seconds)))
            let nonce = request.header(FeedAuthentication.nonceHeader)
            var secret: String?
            if let nonce {
                guard FeedAuthentication.isWellFormed(nonce: nonce) else {
                    throw WireError.invalidParameter("\(FeedAuthentication.nonceHeader) must be 16 to 64 lowercase hex digits")
                }
                // The answer is signed with the secret of the credential that signed the request.
                guard let pairs = SigV4.queryPairs(request.rawQuery) else { throw WireError.invalidParameter("the query string has a malformed percent-escape") }
                secret = try authenticator.authenticate(request, queryPairs: pairs).secretAccessKey
            }
            let (status, last, body) = try await feed(after: after, maxBytes: maxBytes, wait: wait)
            var headers = [(FeedAuthentication.lastSequenceHeader, "\(last)"), (FeedAuthentication.ledgerIDHeader, ledger.id)]
            if let nonce, let secret {
                let answer = FeedAuthentication.Answer(nonce: nonce, status: status, after: after, ledgerID: ledger.id, lastSequence: last, body: body)
                headers.append((FeedAuthentication.signatureHeader, FeedAuthentication.signature(answer, secret: secret)))
            }
            if status == 200 { headers.insert(("content-type", segmentContentType), at: 0) }
            return (WireResponse(status: status, headers: headers, body: body), "GetFeedSegment", nil)
        default:
            var w = JSONWriter()
            w.beginObject()
            w.member("Digest", try ledger.digest())
            w.member("Sequence", int: try ledger.lastSequence)
            if let replication { replication.write(&w) }
            w.endObject()
            return (.json(w), "GetDigest", nil)
        }
    }

    /// The next feed segment after `after` — waiting up to `wait` for a commit to bring one —
    /// as (status, the ledger's latest sequence, body). A graceful shutdown ends the wait.
    private func feed(after: UInt64, maxBytes: Int, wait: Duration) async throws -> (Int, UInt64, [UInt8]) {
        let deadline = ContinuousClock.now + wait
        let signal = ledger.commitSignal
        while true {
            // Read the signal's generation before looking, so that a commit in between is not missed.
            let seen = signal.generation
            if let segment = try ledger.feedSegment(after: after, maxBytes: maxBytes) {
                let encoded = try segment.encoded()
                return (200, try ledger.lastSequence, encoded)
            }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero, !Task.isCancelled else { return (204, try ledger.lastSequence, []) }
            let woken = await cancelWhenGracefulShutdown { await signal.wait(after: seen, timeout: remaining) }
            if woken != true { return (204, try ledger.lastSequence, []) }
        }
    }
}
