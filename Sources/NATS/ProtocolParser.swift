import Foundation

/// One operation sent by the server.
enum ServerOp: Sendable {
    case info(NATSServerInfo)
    case msg(NATSMessage)
    case ping
    case pong
    case ok
    case err(String)
}

/// An incremental decoder of the NATS server protocol.
///
/// It refuses hostile input as early as possible: a control line longer than
/// ``maxControlLine`` before its CRLF, a bare LF, a MSG/HMSG whose announced size exceeds
/// `maxPayload` (checked on the control line, before the payload is buffered), numbers that
/// are not plain decimal, and a payload not followed by CRLF. After an error the parser
/// must be discarded (the connection is closed).
struct ProtocolParser {
    /// The longest control line accepted (64 KiB).
    static let maxControlLine = 64 * 1024

    /// The largest payload (headers included) accepted; updated from INFO's `max_payload`.
    var maxPayload: Int

    private var buffer: [UInt8] = []
    private var readIndex = 0
    /// Bytes after `readIndex` already scanned for LF without finding one.
    private var scanned = 0
    private var pending: PendingMessage?

    private struct PendingMessage {
        var subject: String
        var sid: UInt64
        var reply: String?
        var headerLength: Int?
        var totalLength: Int
    }

    init(maxPayload: Int = 1_048_576) {
        self.maxPayload = maxPayload
    }

    /// Appends `bytes` and returns every complete operation.
    mutating func feed(_ bytes: some Sequence<UInt8>) throws(NATSError) -> [ServerOp] {
        buffer.append(contentsOf: bytes)
        var ops: [ServerOp] = []
        while let op = try nextOp() { ops.append(op) }
        if readIndex > 0 && (readIndex >= buffer.count || readIndex > 65536) {
            buffer.removeFirst(readIndex)
            readIndex = 0
        }
        return ops
    }

    private mutating func nextOp() throws(NATSError) -> ServerOp? {
        if let p = pending {
            let need = p.totalLength + 2
            guard buffer.count - readIndex >= need else { return nil }
            let start = readIndex
            let end = start + p.totalLength
            guard buffer[end] == 13, buffer[end + 1] == 10 else {
                throw .protocolViolation("message payload not followed by CRLF")
            }
            var headers: NATSHeaders?
            var payloadStart = start
            if let h = p.headerLength {
                headers = try NATSHeaders.parse(buffer[start..<(start + h)])
                payloadStart = start + h
            }
            let msg = NATSMessage(subject: p.subject, replyTo: p.reply, headers: headers,
                                  payload: Array(buffer[payloadStart..<end]), sid: p.sid)
            readIndex = end + 2
            pending = nil
            return .msg(msg)
        }
        // Find the end of the control line.
        var i = readIndex + scanned
        var lf: Int?
        while i < buffer.count {
            if buffer[i] == 10 { lf = i; break }
            i += 1
        }
        guard let lf else {
            scanned = buffer.count - readIndex
            if scanned > Self.maxControlLine {
                throw .protocolViolation("control line longer than \(Self.maxControlLine) bytes")
            }
            return nil
        }
        scanned = 0
        guard lf > readIndex, buffer[lf - 1] == 13 else {
            throw .protocolViolation("control line not terminated by CRLF")
        }
        if lf - 1 - readIndex > Self.maxControlLine {
            throw .protocolViolation("control line longer than \(Self.maxControlLine) bytes")
        }
        let line = buffer[readIndex..<(lf - 1)]
        readIndex = lf + 1
        return try parseControlLine(line)
    }

    private mutating func parseControlLine(_ line: ArraySlice<UInt8>) throws(NATSError) -> ServerOp? {
        let opEnd = line.firstIndex(where: { $0 == 32 || $0 == 9 }) ?? line.endIndex
        let op = String(decoding: line[line.startIndex..<opEnd], as: UTF8.self).uppercased()
        let rest = line[opEnd...]
        switch op {
        case "MSG":
            let args = Self.split(rest)
            guard args.count == 3 || args.count == 4 else { throw .protocolViolation("MSG with \(args.count) arguments") }
            let size = try Self.decimal(args[args.count - 1], maxDigits: 10)
            guard size <= maxPayload else { throw .protocolViolation("MSG of \(size) bytes exceeds max_payload \(maxPayload)") }
            pending = PendingMessage(subject: String(decoding: args[0], as: UTF8.self),
                                     sid: UInt64(try Self.decimal(args[1], maxDigits: 18)),
                                     reply: args.count == 4 ? String(decoding: args[2], as: UTF8.self) : nil,
                                     headerLength: nil, totalLength: size)
            return try nextOp()
        case "HMSG":
            let args = Self.split(rest)
            guard args.count == 4 || args.count == 5 else { throw .protocolViolation("HMSG with \(args.count) arguments") }
            let total = try Self.decimal(args[args.count - 1], maxDigits: 10)
            let hdr = try Self.decimal(args[args.count - 2], maxDigits: 10)
            guard total <= maxPayload else { throw .protocolViolation("HMSG of \(total) bytes exceeds max_payload \(maxPayload)") }
            guard hdr <= total, hdr >= 10 else { throw .protocolViolation("HMSG header size \(hdr) invalid for total \(total)") }
            pending = PendingMessage(subject: String(decoding: args[0], as: UTF8.self),
                                     sid: UInt64(try Self.decimal(args[1], maxDigits: 18)),
                                     reply: args.count == 5 ? String(decoding: args[2], as: UTF8.self) : nil,
                                     headerLength: hdr, totalLength: total)
            return try nextOp()
        case "PING":
            return .ping
        case "PONG":
            return .pong
        case "+OK":
            return .ok
        case "-ERR":
            var text = String(decoding: rest, as: UTF8.self).trimmingLeadingSpaces()
            if text.hasPrefix("'") && text.hasSuffix("'") && text.count >= 2 {
                text = String(text.dropFirst().dropLast())
            }
            return .err(text)
        case "INFO":
            do {
                let info = try JSONDecoder().decode(NATSServerInfo.self, from: Data(rest))
                if info.maxPayload > 0 { maxPayload = info.maxPayload }
                return .info(info)
            } catch {
                throw .protocolViolation("INFO is not valid JSON")
            }
        default:
            throw .protocolViolation("unknown operation \(op.prefix(16).debugDescription)")
        }
    }

    private static func split(_ bytes: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
        bytes.split(whereSeparator: { $0 == 32 || $0 == 9 })
    }

    /// A strict decimal: 1…maxDigits ASCII digits, nothing else.
    static func decimal(_ bytes: ArraySlice<UInt8>, maxDigits: Int) throws(NATSError) -> Int {
        guard !bytes.isEmpty, bytes.count <= maxDigits else {
            throw .protocolViolation("bad number \(String(decoding: bytes.prefix(20), as: UTF8.self).debugDescription)")
        }
        var v = 0
        for b in bytes {
            guard b >= 48, b <= 57 else {
                throw .protocolViolation("bad number \(String(decoding: bytes.prefix(20), as: UTF8.self).debugDescription)")
            }
            v = v * 10 + Int(b - 48)
        }
        return v
    }
}
