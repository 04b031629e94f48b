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
/// - `GET /segments/signed-digest` — the ledger's Ed25519-signed Merkle digest at its latest
///   commit (docs/proofs.md), as `syncledger digest --json` prints it. Takes no parameters.
extension CognitoAPI {
    /// The longest `wait` a feed request may ask for.
    static var maxFeedWait: Duration { .seconds(30) }

    func handleReplication(_ what: String, query: [(String, String)], request: WireRequest, credential: Credential) async throws -> (WireResponse, String, String?) {
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
            if let nonce, !FeedAuthentication.isWellFormed(nonce: nonce) {
                throw WireError.invalidParameter("\(FeedAuthentication.nonceHeader) must be 16 to 64 lowercase hex digits")
            }
            // The answer is signed with the secret of the credential that signed the request.
            let secret = credential.secretAccessKey
            let (status, last, body) = try await feed(after: after, maxBytes: maxBytes, wait: wait)
            var headers = [(FeedAuthentication.lastSequenceHeader, "\(last)"), (FeedAuthentication.ledgerIDHeader, ledger.id)]
            if let nonce {
                let answer = FeedAuthentication.Answer(nonce: nonce, status: status, after: after, ledgerID: ledger.id, lastSequence: last, body: body)
                headers.append((FeedAuthentication.signatureHeader, FeedAuthentication.signature(answer, secret: secret)))
            }
            if status == 200 { headers.insert(("content-type", segmentContentType), at: 0) }
            return (WireResponse(status: status, headers: headers, body: body), "GetFeedSegment", nil)
        case "signed-digest":
            let ledger = self.ledger
            let json = try await offPool { try ledger.signedDigest().json }
            return (WireResponse(status: 200, headers: [("content-type", "application/json")], body: Array(json.utf8)), "GetSignedDigest", nil)
        default:
            let ledger = self.ledger
            let (digest, last) = try await offPool { (try ledger.digest(), try ledger.lastSequence) }
            var w = JSONWriter()
            w.beginObject()
            w.member("Digest", digest)
            w.member("Sequence", int: last)
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
            let ledger = self.ledger
            if let found = try await offPool({ () -> (UInt64, [UInt8])? in
                guard let segment = try ledger.feedSegment(after: after, maxBytes: maxBytes) else { return nil }
                return (try ledger.lastSequence, try segment.encoded())
            }) {
                return (200, found.0, found.1)
            }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero, !Task.isCancelled else { return (204, try ledger.lastSequence, []) }
            let woken = await cancelWhenGracefulShutdown { await signal.wait(after: seen, timeout: remaining) }
            if woken != true { return (204, try ledger.lastSequence, []) }
        }
    }
}
