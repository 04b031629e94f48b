/// An error of the SyncLedger domain: a code to match on, a message that says what and where,
/// and the details a caller may need (the stream, offset and key involved, both sync counts of
/// a conflict, the underlying cause).
public struct LedgerError: Error, Sendable, CustomStringConvertible {
    /// What kind of error this is. New codes may be added; match the ones you handle.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidParameter, notFound, conflict, limitExceeded, invalidSessionToken
            case corruptData, unsupportedFormat, diskFull, storage, closed, duplicateRequest, alreadyStreamed, wrongLedger
            case idempotencyConflict, expired, notAuthorized, alreadyRegistered
            case hookTimeout, hookThrottled, hookInvalidOutput
            case unavailable
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A name, key, value, operation or token is malformed or out of range.
        public static let invalidParameter = Code(.invalidParameter)
        /// The dataset (or other resource) does not exist.
        public static let notFound = Code(.notFound)
        /// A record's sync count moved on since the caller's: nothing was written.
        public static let conflict = Code(.conflict)
        /// A size or count limit would be exceeded: nothing was written.
        public static let limitExceeded = Code(.limitExceeded)
        /// The sync session token is missing, forged, foreign or expired.
        public static let invalidSessionToken = Code(.invalidSessionToken)
        /// Stored bytes fail to decode or verify.
        public static let corruptData = Code(.corruptData)
        /// The data directory was written by a newer format version.
        public static let unsupportedFormat = Code(.unsupportedFormat)
        /// The disk (or quota) is full: nothing was written.
        public static let diskFull = Code(.diskFull)
        /// Another storage failure (see ``LedgerError/underlying``).
        public static let storage = Code(.storage)
        /// The ledger was closed.
        public static let closed = Code(.closed)
        /// The same request is already running (a bulk publish).
        public static let duplicateRequest = Code(.duplicateRequest)
        /// The pool was bulk-published less than 24 hours ago.
        public static let alreadyStreamed = Code(.alreadyStreamed)
        /// Data came from another ledger than the one expected (a follower's leader changed).
        public static let wrongLedger = Code(.wrongLedger)
        /// An idempotency key (or a device message id) came again with another request body.
        public static let idempotencyConflict = Code(.idempotencyConflict)
        /// A message's time to live had passed when it arrived: nothing was stored.
        public static let expired = Code(.expired)
        /// The caller may not have what it asked for (an identity pool that refuses
        /// unauthenticated identities, an authenticated identity asked for without its logins).
        public static let notAuthorized = Code(.notAuthorized)
        /// A developer user identifier is already linked to another identity.
        public static let alreadyRegistered = Code(.alreadyRegistered)
        /// The pool's SyncTrigger hook did not answer in time (Cognito's `LambdaSocketTimeoutException`).
        public static let hookTimeout = Code(.hookTimeout)
        /// The pool's SyncTrigger hook refused for load (Cognito's `LambdaThrottledException`).
        public static let hookThrottled = Code(.hookThrottled)
        /// The pool's SyncTrigger hook answered something unusable (Cognito's `InvalidLambdaFunctionOutputException`).
        public static let hookInvalidOutput = Code(.hookInvalidOutput)
        /// In cluster mode: the shard's replicated log or its owner could not be reached in
        /// time, or this node no longer owns the shard. Nothing was acknowledged; retry.
        public static let unavailable = Code(.unavailable)

        public var description: String { base.rawValue }
    }

    /// The two sync counts of a conflict on one key.
    public struct Conflict: Sendable, Hashable {
        /// The record key.
        public let key: String
        /// The sync count the caller sent.
        public let expected: UInt64
        /// The record's current sync count.
        public let actual: UInt64

        /// A conflict on `key`: the caller sent `expected`, the record is at `actual`.
        public init(key: String, expected: UInt64, actual: UInt64) {
            self.key = key
            self.expected = expected
            self.actual = actual
        }
    }

    /// What kind of error.
    public let code: Code
    /// What went wrong and where, for people.
    public let message: String
    /// The stream involved, if any.
    public var stream: StreamName?
    /// The log offset involved, if any.
    public var offset: UInt64?
    /// The conflicting records, for ``Code/conflict``.
    public var conflicts: [Conflict] = []
    /// The cause, if this wraps another error.
    public var underlying: (any Error)?

    /// Makes an error.
    public init(_ code: Code, _ message: String, stream: StreamName? = nil, offset: UInt64? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.stream = stream
        self.offset = offset
        self.underlying = underlying
    }

    /// Whether this error is a refusal of the request (a conflict, a limit, a missing dataset,
    /// bad input, a token, a duplicate or repeated bulk publish) rather than a failure. A job
    /// that throws one before it wrote anything — the writer checks the transaction's change
    /// count — keeps the group's fast path; anything else makes the writer redo the group with
    /// each job isolated in a nested transaction.
    public var isCleanRefusal: Bool {
        switch code {
        case .conflict, .limitExceeded, .notFound, .invalidParameter, .invalidSessionToken, .duplicateRequest, .alreadyStreamed, .wrongLedger, .unsupportedFormat, .idempotencyConflict, .expired, .notAuthorized, .alreadyRegistered,
             .hookTimeout, .hookThrottled, .hookInvalidOutput: true
        default: false
        }
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let stream { text += " [stream \(stream)" + (offset.map { " offset \($0)" } ?? "") + "]" }
        if let underlying { text += " (cause: \(underlying))" }
        return text
    }
}
