public import Foundation
import Crypto
import LedgerStorage

/// A point in time as milliseconds since 1970 (UTC), as stored in the log.
public struct Timestamp: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public let milliseconds: Int64

    /// A time from milliseconds since 1970.
    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    /// A time from a `Date`, rounded down to the millisecond.
    public init(_ date: Date) { self.milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }

    /// The current time.
    public static var now: Timestamp { Timestamp(Date()) }

    /// As a `Date`.
    public var date: Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }

    /// Seconds since 1970, as Cognito's wire format sends dates.
    public var epochSeconds: Double { Double(milliseconds) / 1000 }

    public static func < (a: Self, b: Self) -> Bool { a.milliseconds < b.milliseconds }
    public var description: String { ISO8601DateFormatter().string(from: date) }
}

/// One change in a log entry.
public enum Event: Hashable, Sendable {
    /// Sets `key` to `value`. `deviceModified` is the device's own clock when it made the change.
    case put(key: String, value: String, deviceModified: Timestamp?)
    /// Removes `key` (the record becomes a tombstone).
    case remove(key: String, deviceModified: Timestamp?)
    /// Deletes the whole dataset: its records are gone; the stream and its offsets go on.
    case deleteDataset

    /// The device's own time of the change, if it carries one.
    public var deviceModified: Timestamp? {
        switch self {
        case .put(_, _, let device), .remove(_, let device): device
        case .deleteDataset: nil
        }
    }

    /// The record key this event changes (nil for a dataset delete).
    public var key: String? {
        switch self {
        case .put(let key, _, _), .remove(let key, _): key
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

    /// Body version 1: no device. Version 2 adds the device after the author; it is written only
    /// for entries that name a device, so entries without one keep the shorter form.
    static let bodyVersions: ClosedRange<UInt8> = 1...2

    /// The canonical body: version, offset, time, author, [device], events.
    static func encodeBody(offset: UInt64, time: Timestamp, author: String, device: String? = nil, events: [Event]) -> [UInt8] {
        var w = ByteWriter(capacity: 32 + author.utf8.count + (device?.utf8.count ?? 0) + events.count * 24)
        w.byte(device == nil ? 1 : 2)
        w.varint(offset)
        w.signed(time.milliseconds)
        w.string(author)
        if let device { w.string(device) }
        w.varint(UInt64(events.count))
        for event in events {
            switch event {
            case .put(let key, let value, let device):
                w.byte(device == nil ? 1 : 4)
                w.string(key)
                w.string(value)
                if let device { w.signed(device.milliseconds) }
            case .remove(let key, let device):
                w.byte(device == nil ? 2 : 5)
                w.string(key)
                if let device { w.signed(device.milliseconds) }
            case .deleteDataset:
                w.byte(3)
            }
        }
        return w.bytes
    }

    /// Decodes a body written by ``encodeBody(offset:time:author:device:events:)``.
    static func decodeBody(_ reader: inout ByteReader) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, author: String, device: String?, events: [Event]) {
        var events: [Event]? = []
        let head = try walkBody(&reader, events: &events)
        return (head.offset, head.time, head.author ?? "", head.device, events ?? [])
    }

    /// The offset and time of a body, read without checking the rest of it (a stored body,
    /// passed through).
    static func peekOffset(_ reader: inout ByteReader) throws(DecodeFailure) -> UInt64 {
        let version = try reader.byte()
        guard bodyVersions.contains(version) else { throw DecodeFailure(description: "unknown entry body version \(version)") }
        return try reader.varint()
    }

    /// The offset and time of a body, read without checking the rest of it.
    static func peekOffsetAndTime(_ body: ArraySlice<UInt8>) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp) {
        var reader = ByteReader(body)
        let offset = try peekOffset(&reader)
        return (offset, Timestamp(milliseconds: try reader.signed()))
    }

    /// Checks a body as ``decodeBody(_:)`` would decode it — the same checks, every string's
    /// UTF-8 included — without making its strings and events. Returns its offset.
    static func checkBody(_ reader: inout ByteReader) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp) {
        var none: [Event]?
        let head = try walkBody(&reader, events: &none)
        return (head.offset, head.time)
    }

    /// What the live event stream needs of a body — its offset, device and whether it deletes
    /// the dataset — read with the same checks as ``decodeBody(_:)``, without making its keys
    /// and values.
    static func summarizeBody(_ reader: inout ByteReader) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, device: String?, deletesDataset: Bool) {
        var none: [Event]?
        let head = try walkBody(&reader, events: &none, readDevice: true)
        return (head.offset, head.time, head.device, head.deletesDataset)
    }

    /// The one reader of the body format: with `events` non-nil, makes the author and appends
    /// every event to it; with nil, only checks them (and makes the device if `readDevice`).
    private static func walkBody(_ reader: inout ByteReader, events: inout [Event]?, readDevice: Bool = false) throws(DecodeFailure) -> (offset: UInt64, time: Timestamp, author: String?, device: String?, deletesDataset: Bool) {
        let version = try reader.byte()
        guard bodyVersions.contains(version) else { throw DecodeFailure(description: "unknown entry body version \(version)") }
        let offset = try reader.varint()
        guard offset >= 1 else { throw DecodeFailure(description: "offset 0") }
        let time = Timestamp(milliseconds: try reader.signed())
        let make = events != nil
        var author: String?
        var device: String?
        if make { author = try reader.string() } else { try reader.skipString() }
        if version == 2 {
            if make || readDevice { device = try reader.string() } else { try reader.skipString() }
        }
        var deletesDataset = false
        let count = try reader.varint()
        guard count <= UInt64(reader.remaining) else { throw DecodeFailure(description: "event count \(count) exceeds the entry's size") }
        if make { events!.reserveCapacity(Int(count)) }
        for _ in 0..<count {
            let kind = try reader.byte()
            switch kind {
            case 1, 4:
                if make {
                    let key = try reader.string()
                    let value = try reader.string()
                    let device = kind == 4 ? Timestamp(milliseconds: try reader.signed()) : nil
                    events!.append(.put(key: key, value: value, deviceModified: device))
                } else {
                    try reader.skipString()
                    try reader.skipString()
                    if kind == 4 { _ = try reader.signed() }
                }
            case 2, 5:
                if make {
                    let key = try reader.string()
                    let device = kind == 5 ? Timestamp(milliseconds: try reader.signed()) : nil
                    events!.append(.remove(key: key, deviceModified: device))
                } else {
                    try reader.skipString()
                    if kind == 5 { _ = try reader.signed() }
                }
            case 3:
                deletesDataset = true
                if make { events!.append(.deleteDataset) }
            default:
                throw DecodeFailure(description: "unknown event kind \(kind)")
            }
        }
        return (offset, time, author, device, deletesDataset)
    }

    /// `SHA-256(previousHash ‖ len(name) ‖ name ‖ body)`.
    static func chainHash(previous: [UInt8], stream: StreamName, body: ArraySlice<UInt8>) -> [UInt8] {
        var hasher = ConcatenatingSHA256()
        return hasher.digest(previous, lengthPrefixed: stream.key, body)
    }

    /// See ``chainHash(previous:stream:body:)-(_,_,ArraySlice<UInt8>)``.
    static func chainHash(previous: [UInt8], stream: StreamName, body: [UInt8]) -> [UInt8] {
        chainHash(previous: previous, stream: stream, body: body[...])
    }
}
