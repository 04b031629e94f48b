extension NATSClient {
    /// Handles a `-ERR` after the handshake. The server keeps the connection after a permissions
    /// violation; the request published on the refused subject, or the refused subscription,
    /// fails with ``NATSError/permissionViolation(_:)`` instead of timing out silently. Other
    /// errors after the handshake are followed by the server closing the connection.
    func permissionViolation(_ text: String) {
        let lower = text.lowercased()
        guard lower.hasPrefix("permissions violation"), let subject = Self.quotedSubject(text) else { return }
        let error = NATSError.permissionViolation(text)
        if lower.contains(" for publish to ") {
            for (token, s) in requestSubjects where s == subject { failRequest(token, error) }
        } else if lower.contains(" for subscription to ") {
            for (sid, sub) in subscriptions where sub.subject == subject {
                subscriptions.removeValue(forKey: sid)
                sub.continuation.finish(throwing: error)
            }
        }
    }

    /// The subject between the first two double quotes of `text` (subjects hold no quotes).
    static func quotedSubject(_ text: String) -> String? {
        guard let first = text.firstIndex(of: "\"") else { return nil }
        let rest = text[text.index(after: first)...]
        guard let end = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[rest.startIndex..<end])
    }
}
