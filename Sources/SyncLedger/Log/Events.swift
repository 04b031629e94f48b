import Foundation
import Crypto
import LedgerStorage

/// One change in a log entry.
public enum Event: Hashable, Sendable {
    /// Sets `key` to `value`. `deviceModified` is the device's own clock when it made the change.
    case put(key: String, value: String, deviceModified: Timestamp?)
    /// Removes `key` (the record becomes a tombstone).
    case remove(key: String, deviceModified: Timestamp?)
    /// Deletes the whole dataset: its records are gone; the stream and its offsets go on.
    case deleteDataset
    /// A put whose value a redaction erased: the key, the device time and the value's salted
    /// commitment stay in the log (so its hash chain still verifies); the value is gone. Read
    /// back only: no write may contain it. Replayed, the record holds the empty string.
    case erased(key: String, deviceModified: Timestamp?)

    /// The device's own time of the change, if it carries one.
    public var deviceModified: Timestamp? {
        switch self {
        case .put(_, _, let device), .remove(_, let device), .erased(_, let device): device
        case .deleteDataset: nil
        }
    }

    /// The record key this event changes (nil for a dataset delete).
    public var key: String? {
        switch self {
        case .put(let key, _, _), .remove(let key, _), .erased(let key, _): key
        case .deleteDataset: nil
        }
    }
}

/// One immutable entry of a stream's log: an atomic group of events.
///
/// Its ``offset`` is the dataset's sync count after it; its ``sequence`` orders it among all
/// entries of the ledger (the change feed). ``hash`` chains it to the previous entry of its
/// stream: `SHA-256(previousHash ‖ canonical bytes)`, where the canonical bytes are the stream
/// name and the encoded body (offset, time, author, events) — never the local sequence, so a
/// replica or an imported segment computes the same hash.
public struct LogEntry: Hashable, Sendable {
    /// The stream it belongs to.
    public let stream: StreamName
    /// Its offset in the stream (1, 2, …): the dataset's sync count after it.
    public let offset: UInt64
    /// Its position in the ledger-wide change feed (1, 2, …).
    public let sequence: UInt64
    /// The server's time when it was committed.
    public let time: Timestamp
    /// Who made it: the authenticated caller (an identity id, `admin:<access key>`, `cli`, …),
    /// set by the server, never taken from the client.
    public let author: String
    /// The device the caller wrote from (Cognito's `DeviceId`), when it named one.
    public let device: String?
    /// The changes, applied in order.
    public let events: [Event]
    /// SHA-256 of the previous entry's hash and this entry's canonical bytes.
    public let hash: [UInt8]

    /// The hash that precedes the first entry of every stream: 32 zero bytes.
    public static let genesisHash = [UInt8](repeating: 0, count: 32)

    /// A log entry.
    public init(stream: StreamName, offset: UInt64, sequence: UInt64, time: Timestamp, author: String, device: String? = nil, events: [Event], hash: [UInt8]) {
        self.stream = stream
        self.offset = offset
        self.sequence = sequence
        self.time = time
        self.author = author
        self.device = device
        self.events = events
        self.hash = hash
    }
}
