import Hummingbird
import NIOCore

/// Hummingbird's basic request context plus the request's channel, which a long-lived
/// response (an event stream) watches to end when its client goes away.
struct ChannelRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
