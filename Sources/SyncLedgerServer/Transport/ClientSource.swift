import Foundation

/// Which client a request comes from, for the per-source bounds (the identity throttle's source
/// buckets, `GET /events`'s `--events-per-source`): one rule for all of them (see
/// docs/identity.md, "The source").
///
/// - The source is the connection's peer, unless the peer is a trusted proxy
///   (`--trusted-proxy`): then it is the rightmost `X-Forwarded-For` address that is not a
///   trusted proxy (what the nearest trusted proxy saw; entries to its left are the client's to
///   write), reading at most ``maxForwardedEntries`` entries from the right; an entry that is not
///   an address stops the walk at the last trusted hop.
/// - An IPv4 address is its own source; an IPv6 address counts as its /64 (`2001:db8:1:2::/64`):
///   one host is routinely given a whole /64 and can rotate through it at will.
struct ClientSource: Sendable {
    /// The most `X-Forwarded-For` entries read, from the right: a longer chain is cut there, never
    /// ignored (which would make the request the proxy's own).
    static let maxForwardedEntries = 32

    /// The trusted proxies' addresses (normalised).
    let trusted: Set<String>

    /// - Parameter trustedProxies: addresses whose `X-Forwarded-For` is believed (invalid ones are
    ///   left out: the options' validation refuses them at startup).
    init(trustedProxies: [String] = []) {
        trusted = Set(trustedProxies.compactMap(Self.normalizedAddress))
    }

    /// The source of `request` (its peer and its `X-Forwarded-For` headers, joined); nil when
    /// the peer is unknown.
    func source(of request: WireRequest) -> String? {
        let forwarded = request.headers.filter { $0.0.lowercased() == "x-forwarded-for" }.map(\.1)
        return source(peer: request.peer, forwardedFor: forwarded.isEmpty ? nil : forwarded.joined(separator: ","))
    }

    /// The source of a request from `peer` carrying `forwardedFor`; nil when the peer is
    /// unknown or not an address.
    func source(peer: String?, forwardedFor: String?) -> String? {
        guard let peer = peer.flatMap(Self.normalizedAddress) else { return nil }
        guard trusted.contains(peer), let forwardedFor else { return Self.key(peer) }
        var nearest = peer
        var end = forwardedFor.endIndex
        for _ in 0..<Self.maxForwardedEntries {
            let comma = forwardedFor[..<end].lastIndex(of: ",")
            let begin = comma.map { forwardedFor.index(after: $0) } ?? forwardedFor.startIndex
            let entry = forwardedFor[begin..<end]
            guard let address = Self.normalizedAddress(entry.trimmingCharacters(in: .whitespaces)) else { break }
            nearest = address
            if !trusted.contains(address) { break }
            guard let comma else { break }
            end = comma
        }
        return Self.key(nearest)
    }

    /// The key of a normalised address: an IPv4 address itself, an IPv6 address's /64.
    static func key(_ address: String) -> String {
        guard address.contains(":") else { return address }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return address }
        withUnsafeMutableBytes(of: &v6) { bytes in
            for i in 8..<16 { bytes[i] = 0 }
        }
        return (ntop(&v6) ?? address) + "/64"
    }

    /// An IPv4 or IPv6 address in one spelling (IPv6 lower-cased, IPv4-mapped IPv6 as IPv4, a
    /// zone or port left off), nil for anything else.
    static func normalizedAddress(_ text: some StringProtocol) -> String? {
        var s = String(text)
        guard (1...64).contains(s.utf8.count) else { return nil }
        if s.hasPrefix("["), let close = s.firstIndex(of: "]") { s = String(s[s.index(after: s.startIndex)..<close]) }
        if let percent = s.firstIndex(of: "%") { s = String(s[..<percent]) }
        var v4 = in_addr()
        if inet_pton(AF_INET, s, &v4) == 1 { return s }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, s, &v6) == 1, let canonical = ntop(&v6) else { return nil }
        if canonical.hasPrefix("::ffff:"), canonical.contains(".") { return String(canonical.dropFirst(7)) }
        return canonical
    }

    private static func ntop(_ v6: inout in6_addr) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &v6, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
