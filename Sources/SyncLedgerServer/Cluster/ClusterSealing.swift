import Foundation
import NATS
import SyncLedger

/// A shard message once authenticated (``ClusterSealing/open(_:shard:)``).
enum ShardMessage: Sendable {
    /// The entries one write appended: a segment's exact bytes, for the ledger to decode and
    /// chain-check.
    case entries([UInt8])
    /// A new owner's fence.
    case fence(FenceNote)
}

/// What a new owner publishes after a shard's last message when it takes the shard: who, where
/// it answers, and the revision of the lease it took the shard with. A node holding the shard
/// gives it up only for a fence whose revision is later than its own lease's (a lease's
/// revisions only grow, and no node can take a lease another holds), so a fence re-published
/// later (a replay) never takes a shard from the node that holds it now.
struct FenceNote: Codable, Sendable, Equatable {
    var node: String
    var url: String
    var revision: UInt64
}

/// Why a shard message was not applied: it is not authenticated by this cluster's secret.
struct UnauthenticatedShardMessage: Error, Sendable, CustomStringConvertible {
    let shard: Int
    let sequence: UInt64
    let reason: String
    var description: String { "message \(sequence) of shard \(shard) is not authenticated (\(reason)); skipped" }
}

/// Seals what a node publishes on the bus and opens what it reads, with the cluster's keys
/// (``ClusterKeys``): shard messages (a `SyncLedger-MAC` header over shard, kind, node and
/// payload) and the values of leases and node records (the MAC before the body). The one place
/// where a shard message read from a stream is authenticated and told apart by kind.
struct ClusterSealing: Sendable {
    let keys: ClusterKeys

    /// The header carrying a shard message's MAC.
    static let macHeader = "SyncLedger-MAC"

    /// The headers of a shard message of `kind` published by `node` with `payload`.
    func headers(shard: Int, kind: String, node: String, payload: [UInt8]) -> NATSHeaders {
        var headers = NATSHeaders()
        headers[ClusterNames.kindHeader] = kind
        headers[ClusterNames.nodeHeader] = node  // who wrote it, for operators and audits
        headers[Self.macHeader] = keys.shardMessageMAC(shard: shard, kind: kind, node: node, payload: payload)
        return headers
    }

    /// What `message`, read from shard `shard`'s stream, carries.
    /// - Throws: ``UnauthenticatedShardMessage`` when it has no MAC, one that does not match
    ///   (another key, another shard, kind or node, a changed byte), or an unknown kind; an
    ///   authenticated fence that does not decode is `.corruptData` (only a node could have
    ///   written it: never skipped).
    func open(_ message: StoredMessage, shard: Int) throws -> ShardMessage {
        func refuse(_ reason: String) -> UnauthenticatedShardMessage {
            UnauthenticatedShardMessage(shard: shard, sequence: message.sequence, reason: reason)
        }
        guard message.subject == ClusterNames.subject(shard) else { throw refuse("published on \(message.subject.prefix(80))") }
        guard let mac = message.headers?[Self.macHeader] else { throw refuse("no MAC") }
        let kind = message.headers?[ClusterNames.kindHeader] ?? ""
        let node = message.headers?[ClusterNames.nodeHeader] ?? ""
        guard keys.isAuthentic(shard: shard, kind: kind, node: node, payload: message.payload, mac: mac) else {
            throw refuse("its MAC does not match")
        }
        switch kind {
        case ClusterNames.entriesKind: return .entries(message.payload)
        case ClusterNames.fenceKind:
            guard let note = try? JSONDecoder().decode(FenceNote.self, from: Data(message.payload)) else {
                throw LedgerError(.corruptData, "message \(message.sequence) of shard \(shard) is an authenticated fence that does not decode")
            }
            return .fence(note)
        default: throw refuse("unknown kind \(kind.prefix(40))")
        }
    }

    // MARK: KV records

    /// A lease's value for `holder`.
    func sealLease(_ holder: LeaseHolder, shard: Int) throws -> [UInt8] {
        try seal(holder, key: ClusterNames.lease(shard))
    }

    /// The holder a lease entry names, when the value is authenticated for that shard's key.
    func openLease(_ value: [UInt8], shard: Int) -> LeaseHolder? {
        open(LeaseHolder.self, value, key: ClusterNames.lease(shard))
    }

    /// A node's record, sealed for its key.
    func sealNode(_ record: NodeRecord, node: String) throws -> [UInt8] {
        try seal(record, key: ClusterNames.node(node))
    }

    /// A node record, when authenticated for `key` (`node.<id>`).
    func openNode(_ value: [UInt8], key: String) -> NodeRecord? {
        open(NodeRecord.self, value, key: key)
    }

    /// `value`'s JSON sealed for `key` of `bucket`.
    /// - Throws: the encoder's error (nothing is sealed: never an empty body).
    func seal<T: Encodable>(_ value: T, bucket: String = ClusterNames.leases, key: String) throws -> [UInt8] {
        keys.sealRecord(Array(try JSONEncoder().encode(value)), bucket: bucket, key: key)
    }

    func open<T: Decodable>(_ type: T.Type, _ value: [UInt8], bucket: String = ClusterNames.leases, key: String) -> T? {
        guard let body = keys.openRecord(value, bucket: bucket, key: key) else { return nil }
        return try? JSONDecoder().decode(T.self, from: Data(body))
    }
}
