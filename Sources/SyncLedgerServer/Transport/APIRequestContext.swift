public import Hummingbird
public import NIOCore
import Synchronization
import SyncLedger

/// What the handlers of one request learned about it, for its log line and its metrics
/// (``RequestLogMiddleware``): the operation, the identity involved, why a signature was refused,
/// the shard it belongs to. A reference shared by every copy of the request's context, because a
/// middleware sees only the context it passed on, never the copies handlers change.
final class RequestNotes: Sendable {
    struct State: Sendable {
        /// The operation's name in logs and metrics (`ListRecords`, `Identity.GetId`, …).
        var operation = "Unknown"
        /// The identity involved, once authenticated and valid.
        var identity: String?
        /// Why the authenticator refused the request, and the access key it claimed.
        var refusal: AuthRefusal?
        /// In cluster mode: the shard the request belongs to (its answer names the owner).
        var shard: Int?
        /// Logged at debug level, not info (an idle follower's long polls).
        var quiet = false
    }

    private let state = Mutex(State())

    /// Reads or changes the notes.
    func with<T>(_ body: (inout State) -> T) -> T { state.withLock { body(&$0) } }

    var operation: String {
        get { with { $0.operation } }
        set { with { $0.operation = newValue } }
    }
}

/// What SyncLedger's middleware establish about a request as it passes: the request with its
/// body read, its decoded path and query (``APIMiddleware``), the credential that signed it
/// (``SigV4Middleware``), and the notes its handlers leave for the request log. A host
/// application's request context carries one (``SyncLedgerRequestContext``); it starts empty.
public struct SyncLedgerRequestState: Sendable {
    let notes = RequestNotes()
    var wire = WireRequest(method: "", rawPath: "", rawQuery: nil, headers: [], body: [])
    var query: [(String, String)] = []
    var credential: Credential?

    /// An empty state, for a new request.
    public init() {}
}

/// A request context SyncLedger's routes run with: Hummingbird's, plus the connection the
/// request came on (an event stream watches it, to end when its client goes away) and the
/// state SyncLedger's middleware establish. ``SyncLedgerContext`` is the server's own; a host
/// application that embeds SyncLedger (docs/embedding.md) may use that one or give its own
/// context these two members.
public protocol SyncLedgerRequestContext: RequestContext {
    /// The connection the request came on.
    var channel: any Channel { get }
    /// What SyncLedger's middleware established about the request.
    var syncLedger: SyncLedgerRequestState { get set }
}

/// The request context of the server's own routes (and of a host application with nothing of
/// its own to add).
public struct SyncLedgerContext: SyncLedgerRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let channel: any Channel
    public var syncLedger = SyncLedgerRequestState()

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}

/// What a route's handler reads: the request state of its context and the route's path
/// parameters (a plain value, so the API's handlers do not depend on the context's type).
struct APIRequest: Sendable {
    let state: SyncLedgerRequestState
    let parameters: Parameters

    init(_ context: some SyncLedgerRequestContext) {
        state = context.syncLedger
        parameters = context.parameters
    }

    var notes: RequestNotes { state.notes }
    var wire: WireRequest { state.wire }
    var query: [(String, String)] { state.query }

    /// The credential ``SigV4Middleware`` found. - Throws: when the route has none (a routing
    /// mistake: every signed route sits behind that middleware).
    func signer() throws -> Credential {
        guard let credential = state.credential else { throw WireError.internalError("the route was reached without its signature checked") }
        return credential
    }

    /// A path parameter of the route, percent-decoded (``APIMiddleware`` checked the path decodes).
    func parameter(_ name: String) -> String? {
        parameters.get(name).flatMap { SigV4.percentDecode($0) }
    }
}
