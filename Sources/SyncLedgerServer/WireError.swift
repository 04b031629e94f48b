public import HTTPTypes
public import Hummingbird
import SyncLedger

/// An error as Cognito Sync's wire protocol sends it: the model's exception name (in the
/// `x-amzn-ErrorType` header), its HTTP status, and `{"message": …}`.
public struct WireError: Error, Sendable, CustomStringConvertible {
    /// The exception name from botocore's `cognito-sync/2014-06-30` model.
    public let type: String
    /// The HTTP status the model gives it.
    public let statusCode: Int
    /// What went wrong and where.
    public let message: String
    /// For a request refused before it was authenticated: why, and the access key id it claimed,
    /// for the server's log only (the caller gets `message`).
    var refusal: AuthRefusal? = nil

    public var description: String { "\(type) (\(statusCode)): \(message)" }

    /// An error of the model's `type` with its `status`.
    public init(type: String, status: Int, message: String) {
        self.type = type
        self.statusCode = status
        self.message = message
    }

    static func invalidParameter(_ message: String) -> WireError { WireError(type: "InvalidParameterException", status: 400, message: message) }
    static func notAuthorized(_ message: String) -> WireError { WireError(type: "NotAuthorizedException", status: 403, message: message) }
    /// A request the authenticator refused: NotAuthorizedException, with why for the log.
    static func refused(_ reason: AuthRefusal.Reason, _ message: String) -> WireError {
        var error = notAuthorized(message)
        error.refusal = AuthRefusal(reason: reason)
        return error
    }
    static func notFound(_ message: String) -> WireError { WireError(type: "ResourceNotFoundException", status: 404, message: message) }
    static func unknownOperation(_ message: String) -> WireError { WireError(type: "UnknownOperationException", status: 404, message: message) }
    static func internalError(_ message: String) -> WireError { WireError(type: "InternalErrorException", status: 500, message: message) }

    /// The one table from domain errors to wire errors.
    init(_ error: LedgerError) {
        let message = error.message
        switch error.code {
        case .invalidParameter, .invalidSessionToken, .unsupportedFormat: self.init(type: "InvalidParameterException", status: 400, message: message)
        case .notFound: self.init(type: "ResourceNotFoundException", status: 404, message: message)
        case .conflict, .wrongLedger: self.init(type: "ResourceConflictException", status: 409, message: message)
        case .limitExceeded: self.init(type: "LimitExceededException", status: 400, message: message)
        case .duplicateRequest: self.init(type: "DuplicateRequestException", status: 400, message: message)
        case .alreadyStreamed: self.init(type: "AlreadyStreamedException", status: 400, message: message)
        case .idempotencyConflict: self.init(type: "IdempotencyConflictException", status: 409, message: message)
        case .alreadyRegistered: self.init(type: "DeveloperUserAlreadyRegisteredException", status: 400, message: message)
        case .notAuthorized: self.init(type: "NotAuthorizedException", status: 403, message: message)
        case .expired: self.init(type: "MessageExpiredException", status: 400, message: message)
        case .closed: self.init(type: "TooManyRequestsException", status: 429, message: "the server is shutting down; retry")
        // Cognito's SyncTrigger errors. LambdaSocketTimeoutException is not in botocore's model:
        // 504 (a gateway that timed out waiting for the hook), documented in README.
        case .hookTimeout: self.init(type: "LambdaSocketTimeoutException", status: 504, message: message)
        case .hookThrottled: self.init(type: "LambdaThrottledException", status: 429, message: message)
        case .hookInvalidOutput: self.init(type: "InvalidLambdaFunctionOutputException", status: 400, message: message)
        case .unavailable: self.init(type: "ServiceUnavailableException", status: 503, message: message)
        default: self.init(type: "InternalErrorException", status: 500, message: message)
        }
    }

    /// Any error as a wire error (unknown ones are internal errors).
    init(any error: any Error) {
        if let wire = error as? WireError { self = wire } else if let ledger = error as? LedgerError { self.init(ledger) } else {
            self.init(type: "InternalErrorException", status: 500, message: "internal error")
        }
    }

    /// The JSON body.
    var body: [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.member("message", message)
        w.endObject()
        return w.bytes
    }
}

/// Why the authenticator refused a request, as the server's log line names it (`refused=`),
/// with the access key id the request claimed (`key=`): enough for an operator to tell a client
/// with a wrong clock from one with a revoked key, never the secret or the signature.
struct AuthRefusal: Sendable, Equatable {
    enum Reason: String, Sendable {
        /// No Authorization header and no presigned query.
        case unsigned
        /// An Authorization header or presigned query that cannot be read.
        case malformed
        /// The credential scope names another service.
        case service
        /// The credential scope names a region this server does not serve.
        case region
        /// `x-amz-date` too far from the server's clock, or a presigned URL past its expiry.
        case expired
        /// The scope's date is not `x-amz-date`'s day.
        case scope
        /// SignedHeaders leave out what must be signed (host, x-amz-date, the session token).
        case unsignedHeaders = "unsigned-headers"
        /// `x-amz-content-sha256` is not the body's hash.
        case payload
        /// A known key, and the signature (or session token) does not match.
        case signature
        /// A key this server does not know: never issued here, revoked, or a temporary one whose
        /// session token does not verify.
        case unknownKey = "unknown-key"
        /// The signature matched, but the credential had expired.
        case expiredCredential = "expired-credential"
    }
    var reason: Reason
    /// The access key id the request claimed (only letters, digits, `-` and `_`, at most 128;
    /// anything else is logged as `<unreadable>`).
    var accessKeyID: String? = nil

    /// `text` as a log value of an access key id.
    static func loggable(_ text: Substring) -> String {
        guard (1...128).contains(text.utf8.count),
              text.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 || $0 == 95 }) else {
            return "<unreadable>"
        }
        return String(text)
    }
}

extension WireError: HTTPResponseError {
    /// The error's HTTP status.
    public var status: HTTPResponse.Status { .init(code: statusCode) }

    /// The error as Cognito Sync sends it: its status, `x-amzn-ErrorType` and `{"message"}`.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        WireResponse.error(self).response
    }
}
