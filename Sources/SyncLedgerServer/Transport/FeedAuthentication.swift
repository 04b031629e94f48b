import Crypto
import Foundation
import SyncLedger

/// Authenticates the leader's change-feed answers to a follower, so that a man in the middle
/// cannot make a follower merge history the leader never wrote (docs/replication.md).
///
/// The follower sends a fresh random nonce in `x-syncledger-nonce`, a header its SigV4
/// signature covers. The leader answers with
///
///     x-syncledger-signature: hex(HMAC-SHA256(K, message))
///     K       = HMAC-SHA256(key: the signing credential's secret, "syncledger-replication-v1")
///     message = "syncledger-feed-v1" LF nonce LF status LF after LF ledger id LF
///               last sequence LF hex(SHA-256(body))
///
/// where the credential is the one that signed the request (the admin credential the two
/// servers share), `after` the request's query parameter, and ledger id and last sequence the
/// values of the answer's `x-syncledger-ledger-id` and `x-syncledger-last-sequence`. The
/// follower recomputes it and merges nothing unless it matches; the nonce makes every answer
/// good for one request only, so a recorded answer cannot be replayed.
public enum FeedAuthentication {
    /// The request header carrying the follower's nonce.
    public static let nonceHeader = "x-syncledger-nonce"
    /// The response header carrying the leader's signature.
    public static let signatureHeader = "x-syncledger-signature"
    /// The response header carrying the leader's ledger id.
    public static let ledgerIDHeader = "x-syncledger-ledger-id"
    /// The response header carrying the leader's latest commit sequence.
    public static let lastSequenceHeader = "x-syncledger-last-sequence"

    /// The fields of a feed answer that the signature covers.
    public struct Answer: Sendable, Equatable {
        /// The follower's nonce, as sent.
        public var nonce: String
        /// The HTTP status (200 or 204).
        public var status: Int
        /// The request's `after` parameter.
        public var after: UInt64
        /// The leader's ledger id.
        public var ledgerID: String
        /// The leader's latest commit sequence.
        public var lastSequence: UInt64
        /// The body (the encoded segment; empty for 204).
        public var body: [UInt8]

        /// An answer with these fields.
        public init(nonce: String, status: Int, after: UInt64, ledgerID: String, lastSequence: UInt64, body: [UInt8]) {
            self.nonce = nonce
            self.status = status
            self.after = after
            self.ledgerID = ledgerID
            self.lastSequence = lastSequence
            self.body = body
        }
    }

    /// A fresh nonce: 128 random bits from the system's secure generator, as 32 hex digits.
    public static func makeNonce() -> String {
        SymmetricKey(size: .bits128).withUnsafeBytes { hex($0) }
    }

    /// Whether `nonce` has the form a follower sends (16 to 64 lowercase hex digits); a leader
    /// refuses any other before it signs anything.
    public static func isWellFormed(nonce: String) -> Bool {
        (16...64).contains(nonce.utf8.count) && nonce.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The signature of `answer` under the key derived from `secret`.
    public static func signature(_ answer: Answer, secret: String) -> String {
        let key = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Array("syncledger-replication-v1".utf8), using: SymmetricKey(data: Array(secret.utf8))))
        let message = "syncledger-feed-v1\n\(answer.nonce)\n\(answer.status)\n\(answer.after)\n\(answer.ledgerID)\n\(answer.lastSequence)\n\(hex(SHA256.hash(data: answer.body)))"
        return hex(HMAC<SHA256>.authenticationCode(for: Array(message.utf8), using: key))
    }

    /// Whether `signature` (as received) is the signature of `answer`, compared in constant time.
    public static func verify(_ signature: String, _ answer: Answer, secret: String) -> Bool {
        constantTimeEqual(signature.lowercased(), self.signature(answer, secret: secret))
    }

    private static func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.encode(bytes) }
}
