import Foundation
import SyncLedger

/// A JSON value for the CLI's `--json` output. Objects keep their members in the order given
/// (so every line of `log --json` reads sequence, stream, offset, … in the same order), and
/// strings are written with only the escapes JSON requires: a secret containing `/` prints as
/// `/`, never `\/` (Foundation's encoders escape slashes unless told not to).
enum JSON: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral {
    case string(String)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case bool(Bool)
    case null
    case array([JSON])
    case object([(String, JSON)])

    init(stringLiteral value: String) { self = .string(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(arrayLiteral elements: JSON...) { self = .array(elements) }
    init(dictionaryLiteral elements: (String, JSON)...) { self = .object(elements) }

    /// A string, or null.
    static func string(_ value: String?) -> JSON { value.map { .string($0) } ?? .null }
    /// A time as ISO 8601 with milliseconds, or null.
    static func time(_ value: Timestamp?) -> JSON { value.map { .string(ISOTime.format($0)) } ?? .null }
    /// An unsigned number, or null.
    static func uint(_ value: UInt64?) -> JSON { value.map { .uint($0) } ?? .null }

    /// One line, no spaces: for JSON Lines output.
    var compact: String {
        var out = ""
        write(to: &out, indent: nil, level: 0)
        return out
    }

    /// Indented by two spaces, keys in the given order.
    var pretty: String {
        var out = ""
        write(to: &out, indent: "  ", level: 0)
        return out
    }

    private func write(to out: inout String, indent: String?, level: Int) {
        switch self {
        case .string(let s): Self.quote(s, into: &out)
        case .int(let n): out += String(n)
        case .uint(let n): out += String(n)
        case .double(let d): out += d.isFinite ? String(d) : "null"
        case .bool(let b): out += b ? "true" : "false"
        case .null: out += "null"
        case .array(let items):
            guard !items.isEmpty else { out += "[]"; return }
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                Self.newline(&out, indent, level + 1)
                item.write(to: &out, indent: indent, level: level + 1)
            }
            Self.newline(&out, indent, level)
            out += "]"
        case .object(let members):
            guard !members.isEmpty else { out += "{}"; return }
            out += "{"
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out += "," }
                Self.newline(&out, indent, level + 1)
                Self.quote(key, into: &out)
                out += indent == nil ? ":" : ": "
                value.write(to: &out, indent: indent, level: level + 1)
            }
            Self.newline(&out, indent, level)
            out += "}"
        }
    }

    private static func newline(_ out: inout String, _ indent: String?, _ level: Int) {
        guard let indent else { return }
        out += "\n" + String(repeating: indent, count: level)
    }

    /// A JSON string literal: `"` and `\` escaped, control characters as `\n`, `\t`, … or
    /// `\u00XX`; everything else (`/` and non-ASCII included) as is.
    static func quote(_ s: String, into out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            case let c where c.value < 0x20:
                let hex = String(c.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}

extension JSON {
    /// A stream as `{"pool": …, "identity": …, "dataset": …}`.
    static func stream(_ stream: StreamName) -> JSON {
        ["pool": .string(stream.pool.rawValue), "identity": .string(stream.identity.rawValue), "dataset": .string(stream.dataset.rawValue)]
    }

    /// An event as `{"op": "put", "key": …, "value": …}`, `{"op": "remove", "key": …}` or
    /// `{"op": "deleteDataset"}`, with `deviceModified` when the device sent its own time; a
    /// put whose value a redaction erased as `{"op": "put", "key": …, "value": null, "erased": true}`.
    static func event(_ event: Event) -> JSON {
        switch event {
        case .put(let key, let value, let modified):
            var members: [(String, JSON)] = [("op", "put"), ("key", .string(key)), ("value", .string(value))]
            if let modified { members.append(("deviceModified", .time(modified))) }
            return .object(members)
        case .remove(let key, let modified):
            var members: [(String, JSON)] = [("op", "remove"), ("key", .string(key))]
            if let modified { members.append(("deviceModified", .time(modified))) }
            return .object(members)
        case .erased(let key, let modified):
            // A redaction erased the value: the key and times stay, the value does not.
            var members: [(String, JSON)] = [("op", "put"), ("key", .string(key)), ("value", .null), ("erased", .bool(true))]
            if let modified { members.append(("deviceModified", .time(modified))) }
            return .object(members)
        case .deleteDataset:
            return ["op": "deleteDataset"]
        }
    }
}

/// Writes one line to standard output (buffered; the process flushes it at exit).
func printLine(_ json: JSON) {
    print(json.compact)
}

/// Writes a line to standard error at once.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// `'text'`, for naming keys and commands in messages.
func quote(_ text: String) -> String {
    "'" + text + "'"
}
