/// A parsed JSON value. The parser is strict (RFC 8259), bounded in depth, and reports where
/// it failed, so a malformed body gets a message that says what and where.
enum JSON: Equatable, Sendable {
    case object([(String, JSON)])
    case array([JSON])
    case string(String)
    /// A number, with its text (so integers keep every digit).
    case number(String)
    case bool(Bool)
    case null

    static func == (a: JSON, b: JSON) -> Bool {
        switch (a, b) {
        case (.object(let x), .object(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case (.array(let x), .array(let y)): x == y
        case (.string(let x), .string(let y)): x == y
        case (.number(let x), .number(let y)): x == y
        case (.bool(let x), .bool(let y)): x == y
        case (.null, .null): true
        default: false
        }
    }

    /// The member `name` of an object (nil when absent, or when this is not an object).
    subscript(name: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == name }?.1
    }

    /// A short name of the value's type, for messages.
    var typeName: String {
        switch self {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .number: "a number"
        case .bool: "a boolean"
        case .null: "null"
        }
    }
}

/// Why a body is not valid JSON, and where.
struct JSONSyntaxError: Error, CustomStringConvertible {
    let message: String
    let offset: Int
    var description: String { "\(message) at byte \(offset)" }
}

/// Parses UTF-8 JSON text.
struct JSONParser {
    private let bytes: [UInt8]
    private var i = 0
    private let maxDepth = 64

    static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSON {
        var parser = JSONParser(bytes: bytes)
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        guard parser.i == bytes.count else { throw JSONSyntaxError(message: "unexpected text after the JSON value", offset: parser.i) }
        return value
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private func fail(_ message: String) -> JSONSyntaxError { JSONSyntaxError(message: message, offset: i) }

    private mutating func value(depth: Int) throws(JSONSyntaxError) -> JSON {
        guard depth < maxDepth else { throw fail("nesting deeper than \(maxDepth)") }
        guard i < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            i += 1
            var members: [(String, JSON)] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            while true {
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                let name = try string()
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                i += 1
                skipSpace()
                members.append((name, try value(depth: depth + 1)))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end of input in an object") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
                throw fail("expected ',' or '}'")
            }
        case UInt8(ascii: "["):
            i += 1
            var items: [JSON] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            while true {
                skipSpace()
                items.append(try value(depth: depth + 1))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end of input in an array") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
                throw fail("expected ',' or ']'")
            }
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try number()
        default:
            throw fail("unexpected character")
        }
    }

    private mutating func literal(_ word: String, _ value: JSON) throws(JSONSyntaxError) -> JSON {
        let w = Array(word.utf8)
        guard i + w.count <= bytes.count, Array(bytes[i..<i + w.count]) == w else { throw fail("invalid literal") }
        i += w.count
        return value
    }

    private mutating func number() throws(JSONSyntaxError) -> JSON {
        let start = i
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        func digits(_ p: inout JSONParser) -> Int {
            let s = p.i
            while p.i < p.bytes.count, p.bytes[p.i] >= 0x30, p.bytes[p.i] <= 0x39 { p.i += 1 }
            return p.i - s
        }
        guard i < bytes.count else { throw fail("invalid number") }
        if bytes[i] == UInt8(ascii: "0") { i += 1 } else if digits(&self) == 0 { throw fail("invalid number") }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            guard digits(&self) > 0 else { throw fail("invalid number") }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard digits(&self) > 0 else { throw fail("invalid number") }
        }
        return .number(String(decoding: bytes[start..<i], as: UTF8.self))
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("truncated \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[i]
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x41...0x46: d = UInt32(c - 0x41 + 10)
            case 0x61...0x66: d = UInt32(c - 0x61 + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        i += 1  // opening quote
        var out: [UInt8] = []
        var runStart = i
        while true {
            guard i < bytes.count else { throw fail("unterminated string") }
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                out.append(contentsOf: bytes[runStart..<i])
                i += 1
                break
            }
            if c < 0x20 { throw fail("control character in a string") }
            if c == UInt8(ascii: "\\") {
                out.append(contentsOf: bytes[runStart..<i])
                i += 1
                guard i < bytes.count else { throw fail("unterminated escape") }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard i + 2 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else { throw fail("unpaired surrogate") }
                        i += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("unpaired surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("unpaired surrogate")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default:
                    throw fail("invalid escape")
                }
                runStart = i
                continue
            }
            i += 1
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
        return s
    }
}

/// Writes compact JSON into a byte buffer.
struct JSONWriter {
    private(set) var bytes: [UInt8] = []
    private var needsComma: [Bool] = [false]

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    private mutating func separator() {
        if needsComma[needsComma.count - 1] { bytes.append(UInt8(ascii: ",")) }
        needsComma[needsComma.count - 1] = true
    }

    mutating func beginObject() { valuePrefix(); bytes.append(UInt8(ascii: "{")); needsComma.append(false) }
    mutating func endObject() { bytes.append(UInt8(ascii: "}")); needsComma.removeLast() }
    mutating func beginArray() { valuePrefix(); bytes.append(UInt8(ascii: "[")); needsComma.append(false) }
    mutating func endArray() { bytes.append(UInt8(ascii: "]")); needsComma.removeLast() }

    /// Writes a member name; the next write is its value.
    mutating func key(_ name: String) {
        separator()
        writeString(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma[needsComma.count - 1] = false
        pendingValue = true
    }

    private var pendingValue = false

    private mutating func valuePrefix() {
        if pendingValue {
            pendingValue = false
            needsComma[needsComma.count - 1] = true
        } else {
            separator()
        }
    }

    mutating func string(_ value: String) { valuePrefix(); writeString(value) }
    mutating func int(_ value: some BinaryInteger) { valuePrefix(); bytes.append(contentsOf: Array(String(value).utf8)) }
    mutating func bool(_ value: Bool) { valuePrefix(); bytes.append(contentsOf: Array((value ? "true" : "false").utf8)) }
    mutating func null() { valuePrefix(); bytes.append(contentsOf: Array("null".utf8)) }

    /// Epoch seconds with millisecond precision, as Cognito sends dates.
    mutating func epochSeconds(milliseconds ms: Int64) {
        valuePrefix()
        let sign = ms < 0 ? "-" : ""
        let a = ms.magnitude
        let frac = a % 1000
        var text = "\(sign)\(a / 1000)"
        if frac != 0 {
            var f = String(frac)
            while f.count < 3 { f = "0" + f }
            while f.hasSuffix("0") { f.removeLast() }
            text += ".\(f)"
        }
        bytes.append(contentsOf: Array(text.utf8))
    }

    // key + value conveniences
    mutating func member(_ name: String, _ value: String?) { if let value { key(name); string(value) } }
    mutating func member(_ name: String, int value: (some BinaryInteger)?) { if let value { key(name); int(value) } }
    mutating func member(_ name: String, bool value: Bool) { key(name); bool(value) }
    mutating func member(_ name: String, date ms: Int64?) { if let ms { key(name); epochSeconds(milliseconds: ms) } }

    private mutating func writeString(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole (one append, not one per byte).
        var s = s
        let copied: Bool = s.withUTF8 { utf8 in
            guard !utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if copied {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for b in s.utf8 {
            switch b {
            case 0x22: bytes.append(contentsOf: [0x5C, 0x22])
            case 0x5C: bytes.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: bytes.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 15)]])
            default: bytes.append(b)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
