/// A message of a Server-Sent Events stream, as the WHATWG "dispatch the event" step makes it.
struct SSEMessage: Sendable, Hashable {
    /// The event type (`message` when the stream named none).
    var type: String
    /// The data lines, joined with `\n`.
    var data: String
    /// The stream's last event id when the message was dispatched.
    var lastEventID: String
}

/// An incremental Server-Sent Events parser following the WHATWG HTML rules
/// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
/// lines end with `\n`, `\r\n` or `\r` (also when a chunk ends between `\r` and `\n`); `field:
/// value` with one space after the colon removed; a line without a colon is a field with an empty
/// value; a line starting with `:` is a comment; `data` lines are joined with `\n`; a blank line
/// dispatches; `id` sets the last event id unless it contains NUL; `retry` sets the reconnection
/// time when it is all ASCII digits; unknown fields are ignored. A leading byte order mark is
/// skipped. What follows the last blank line when the stream ends is never dispatched.
///
/// One parser reads one connection (its id buffer starts empty, as the specification says); the
/// last event id it dispatched and the reconnection time are carried by whoever reconnects.
///
/// Memory is bounded: once a line, or the data of one event, grows longer than
/// ``maxEventBytes``, the parser is ``overflowed``: it ignores the rest (the connection should be
/// dropped), having returned the messages dispatched before.
struct SSEParser: Sendable {
    /// A line or an event's data grew past the bound.
    struct TooLarge: Error, Sendable, Equatable, CustomStringConvertible {
        /// The bound, in bytes.
        let limit: Int
        var description: String { "an event of the stream exceeds \(limit) bytes" }
    }

    /// The largest line, and the largest data of one event, in bytes.
    let maxEventBytes: Int
    /// The stream's last event id: set when a message is dispatched (even one without data).
    private(set) var lastEventID: String
    /// The reconnection time the stream asked for (`retry:`), in milliseconds.
    private(set) var reconnectionTime: UInt64?
    /// Whether a line or an event's data exceeded ``maxEventBytes``: nothing more is read.
    private(set) var overflowed = false

    private var line: [UInt8] = []
    private var data: [UInt8] = []
    private var hasData = false
    private var eventType = ""
    private var idBuffer = ""
    private var afterCR = false
    /// How many bytes of a leading byte order mark were skipped (3: none is expected any more).
    private var bomMatched = 0
    private static let bom: [UInt8] = [0xEF, 0xBB, 0xBF]

    /// A parser for a connection that resumes after `lastEventID`.
    init(lastEventID: String = "", maxEventBytes: Int = 1 << 20) {
        self.lastEventID = lastEventID
        self.maxEventBytes = maxEventBytes
    }

    /// Reads `bytes` (any part of the stream) and returns the messages they complete, up to
    /// the point where a line or an event's data exceeds ``maxEventBytes`` (``overflowed``).
    mutating func feed(_ bytes: some Sequence<UInt8>) -> [SSEMessage] {
        var messages: [SSEMessage] = []
        for byte in bytes where !overflowed {
            if bomMatched < 3 {
                if byte == Self.bom[bomMatched] {
                    bomMatched += 1
                    continue
                }
                line.append(contentsOf: Self.bom[..<bomMatched])   // not a byte order mark after all
                bomMatched = 3
            }
            if afterCR {
                afterCR = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\n"):
                if let message = endLine() { messages.append(message) }
            case UInt8(ascii: "\r"):
                afterCR = true
                if let message = endLine() { messages.append(message) }
            default:
                line.append(byte)
                if line.count + data.count > maxEventBytes { overflow() }
            }
        }
        return messages
    }

    private mutating func overflow() {
        overflowed = true
        line = []
        data = []
    }

    private mutating func endLine() -> SSEMessage? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty { return dispatch() }
        if line[0] == UInt8(ascii: ":") { return nil }
        let field: String
        var value: ArraySlice<UInt8>
        if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
            field = String(decoding: line[..<colon], as: UTF8.self)
            value = line[(colon + 1)...]
            if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        } else {
            field = String(decoding: line, as: UTF8.self)
            value = []
        }
        switch field {
        case "event":
            eventType = String(decoding: value, as: UTF8.self)
        case "data":
            if hasData { data.append(UInt8(ascii: "\n")) }
            data.append(contentsOf: value)
            hasData = true
            if data.count > maxEventBytes { overflow() }
        case "id":
            if !value.contains(0) { idBuffer = String(decoding: value, as: UTF8.self) }
        case "retry":
            if !value.isEmpty, value.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
                reconnectionTime = UInt64(String(decoding: value, as: UTF8.self)) ?? UInt64.max
            }
        default:
            break
        }
        return nil
    }

    /// The blank line: the last event id becomes the id buffer's; a message when there is data.
    private mutating func dispatch() -> SSEMessage? {
        lastEventID = idBuffer
        defer {
            data.removeAll(keepingCapacity: true)
            hasData = false
            eventType = ""
        }
        guard hasData else { return nil }
        return SSEMessage(type: eventType.isEmpty ? "message" : eventType, data: String(decoding: data, as: UTF8.self), lastEventID: lastEventID)
    }
}
