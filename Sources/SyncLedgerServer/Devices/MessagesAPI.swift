import Foundation
import SyncLedger
#if canImport(Glibc)
import Glibc
#endif

/// Device-to-server messages (`/messages…`, docs/devices.md): devices post, server-side
/// consumers read with durable cursors and acknowledge.
extension CognitoAPI {
    /// `SYNCLEDGER_FAULT=exit-after-message-commit` makes the server kill itself (SIGKILL)
    /// after a message's entry committed and before its acknowledgement is sent: how the tests
    /// put a crash exactly there. Nothing else reads it.
    static let crashAfterMessageCommit = ProcessInfo.processInfo.environment["SYNCLEDGER_FAULT"] == "exit-after-message-commit"

    /// Runs a `/messages` operation the router matched, its signature checked.
    /// Returns the answer and the identity involved (for the request log).
    func handleMessages(_ operation: RegistryOperation, _ context: APIRequest) async throws -> (WireResponse, String?) {
        let (query, request, credential) = (context.query, context.wire, try context.signer())
        switch operation {
        case .sendMessage:
            try requireLeader("SendMessage")
            guard case .identity(let poolText, let identityText) = credential.scope else {
                throw WireError.notAuthorized("messages are sent with the credentials of the device's identity, not the admin's")
            }
            let json = try body(request)
            let code = try string(json["DeviceCode"], "DeviceCode", required: true)!
            let id = try string(json["MessageId"], "MessageId", required: true)!
            let ttl = try integer(json["TimeToLive"], "TimeToLive", required: true)!
            guard let data = try stringMap(json["Data"], "Data") else { throw WireError.invalidParameter("Data is required") }
            let sentAt = try date(json["SentAt"], "SentAt")
            let message = DeviceMessage(messageId: id, timeToLive: ttl, sentAt: sentAt, data: data)
            let ack = try await ledger.postMessage(pool: try IdentityPoolID(poolText), identity: try IdentityID(identityText), deviceCode: code, message: message)
            if Self.crashAfterMessageCommit, !ack.replayed { kill(getpid(), SIGKILL) }
            var w = JSONWriter()
            w.beginObject(); w.member("MessageId", ack.messageId); w.member("Sequence", int: ack.sequence); w.endObject()
            var response = WireResponse.json(w)
            if ack.replayed { response.headers.append(("x-syncledger-replayed", "true")) }
            return (response, identityText)
        case .receiveMessages:
            try requireAdmin(credential, "ReceiveMessages")
            guard let name = queryValue(query, "consumer") else { throw WireError.invalidParameter("consumer is required") }
            let limit = Int(try queryInt(query, "limit", range: 1...1000) ?? 100)
            if let cluster { return (try await receiveOnCluster(cluster.consumers, name: name, limit: limit), nil) }
            let ledger = self.ledger
            let (consumer, page) = try await offPool { try ledger.messages(for: name, limit: limit) }
            var w = JSONWriter(capacity: 256 + page.messages.count * 256)
            w.beginObject()
            w.member("Consumer", name)
            w.member("Cursor", int: consumer?.cursor ?? 0)
            w.key("Messages"); w.beginArray()
            for m in page.messages { writeReceived(&w, m) }
            w.endArray()
            w.member("LastSequence", int: page.last)
            w.member("SkippedExpired", int: page.skippedExpired)
            w.endObject()
            return (.json(w), nil)
        case .acknowledgeMessages:
            try requireLeader("AcknowledgeMessages")
            try requireAdmin(credential, "AcknowledgeMessages")
            let json = try body(request)
            let name = try string(json["Consumer"], "Consumer", required: true)!
            if let cluster { return (try await acknowledgeOnCluster(cluster.consumers, name: name, json: json), nil) }
            let sequence = try integer(json["Sequence"], "Sequence", required: true)!
            guard sequence >= 0 else { throw WireError.invalidParameter("Sequence must not be negative") }
            let consumer = try await ledger.acknowledgeMessages(consumer: name, through: UInt64(sequence))
            var w = JSONWriter()
            w.beginObject(); w.key("Consumer"); writeConsumer(&w, consumer); w.endObject()
            return (.json(w), nil)
        case .listMessageConsumers:
            try requireAdmin(credential, "ListMessageConsumers")
            if let cluster { return (try await listOnCluster(cluster.consumers), nil) }
            let ledger = self.ledger
            let consumers = try await offPool { try ledger.consumers() }
            var w = JSONWriter()
            w.beginObject(); w.key("Consumers"); w.beginArray()
            for c in consumers { writeConsumer(&w, c) }
            w.endArray(); w.endObject()
            return (.json(w), nil)
        default:
            throw WireError.unknownOperation("\(operation.rawValue) is not a message operation")
        }
    }

    func requireAdmin(_ credential: Credential, _ operation: String) throws {
        guard case .admin = credential.scope else {
            throw WireError.notAuthorized("\(operation) needs the developer (admin) credential; \(credential.accessKeyID) belongs to an identity")
        }
    }

    /// A message as ReceiveMessages gives it; `position` its place in its shard's log (on a cluster).
    func writeReceived(_ w: inout JSONWriter, _ m: ReceivedMessage, position: String? = nil) {
        w.beginObject()
        if let position { w.member("Position", position) }
        w.member("Sequence", int: m.sequence)
        w.member("IdentityPoolId", m.pool.rawValue)
        w.member("IdentityId", m.identity.rawValue)
        w.member("DeviceCode", m.deviceCode)
        w.member("MessageId", m.message.messageId)
        w.member("TimeToLive", int: m.message.timeToLive)
        w.member("SentAt", date: m.message.sentAt?.milliseconds)
        w.member("ReceivedAt", date: m.received.milliseconds)
        w.member("ExpiresAt", date: m.expires.milliseconds)
        w.key("Data"); w.beginObject()
        for (k, v) in m.message.data.sorted(by: { $0.key < $1.key }) { w.member(k, v) }
        w.endObject()
        w.endObject()
    }

    private func writeConsumer(_ w: inout JSONWriter, _ c: MessageConsumer) {
        w.beginObject()
        w.member("Name", c.name)
        w.member("Cursor", int: c.cursor)
        w.member("Acknowledged", int: c.acknowledged)
        w.member("Expired", int: c.expired)
        w.member("CreationDate", date: c.created.milliseconds)
        w.member("LastModifiedDate", date: c.updated.milliseconds)
        w.endObject()
    }
}
