/// NATS message headers: an ordered list of `name: value` pairs plus the optional
/// status of the `NATS/1.0 <status> <description>` line.
///
/// Names are case-sensitive, as NATS treats them. A name may carry several values.
public struct NATSHeaders: Sendable, Equatable, Sequence {
    /// The pairs in wire order.
    public private(set) var entries: [(name: String, value: String)] = []
    /// The status code of the header line (`NATS/1.0 503` → 503), when present.
    public var status: Int?
    /// The description after the status code, when present.
    public var statusDescription: String?

    /// Empty headers.
    public init() {}

    /// Headers from pairs (validated when sent).
    public init(_ pairs: [(String, String)]) {
        entries = pairs.map { (name: $0.0, value: $0.1) }
    }

    /// The first value for `name`; setting replaces all values (nil removes them).
    public subscript(name: String) -> String? {
        get { entries.first(where: { $0.name == name })?.value }
        set {
            if let newValue { set(name, newValue) } else { remove(name) }
        }
    }

    /// All values for `name`, in order.
    public func values(for name: String) -> [String] {
        entries.filter { $0.name == name }.map(\.value)
    }

    /// Appends a value for `name`.
    public mutating func add(_ name: String, _ value: String) {
        entries.append((name: name, value: value))
    }

    /// Replaces all values of `name` by `value`.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        entries.append((name: name, value: value))
    }

    /// Removes all values of `name`.
    public mutating func remove(_ name: String) {
        entries.removeAll { $0.name == name }
    }

    /// True when there is no pair and no status.
    public var isEmpty: Bool { entries.isEmpty && status == nil }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        entries.makeIterator()
    }

    public static func == (lhs: NATSHeaders, rhs: NATSHeaders) -> Bool {
        lhs.status == rhs.status && lhs.statusDescription == rhs.statusDescription
            && lhs.entries.count == rhs.entries.count
            && zip(lhs.entries, rhs.entries).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    // MARK: - Wire format

    /// Checks names and values: names are printable ASCII without `:` or spaces,
    /// values have no CR or LF.
    func validate() throws(NATSError) {
        for (name, value) in entries {
            if name.isEmpty { throw .invalidHeader("empty header name") }
            for b in name.utf8 where b <= 32 || b >= 127 || b == UInt8(ascii: ":") {
                throw .invalidHeader("header name \(name.debugDescription)")
            }
            for b in value.utf8 where b == 13 || b == 10 {
                throw .invalidHeader("CR or LF in the value of \(name)")
            }
        }
    }

    /// The header block: `NATS/1.0\r\n` (or the status line), the pairs, and an empty line.
    func encoded() throws(NATSError) -> [UInt8] {
        try validate()
        var out: [UInt8] = Array("NATS/1.0".utf8)
        if let status {
            out += Array(" \(status)".utf8)
            if let statusDescription {
                for b in statusDescription.utf8 where b == 13 || b == 10 {
                    throw .invalidHeader("CR or LF in the status description")
                }
                out += Array(" \(statusDescription)".utf8)
            }
        }
        out += [13, 10]
        for (name, value) in entries {
            out += Array(name.utf8)
            out += [UInt8(ascii: ":"), UInt8(ascii: " ")]
            out += Array(value.utf8)
            out += [13, 10]
        }
        out += [13, 10]
        return out
    }

    /// Parses a header block (as carried by HMSG).
    static func parse(_ bytes: some Collection<UInt8>) throws(NATSError) -> NATSHeaders {
        let text = Array(bytes)
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var i = 0
        while i + 1 < text.count {
            if text[i] == 13 && text[i + 1] == 10 {
                lines.append(text[start..<i])
                i += 2
                start = i
            } else {
                i += 1
            }
        }
        if start != text.count { throw .protocolViolation("header block not terminated by CRLF") }
        guard let first = lines.first else { throw .protocolViolation("empty header block") }
        let prefix = Array("NATS/1.0".utf8)
        guard first.count >= prefix.count, Array(first.prefix(prefix.count)) == prefix else {
            throw .protocolViolation("header block does not start with NATS/1.0")
        }
        var headers = NATSHeaders()
        let rest = String(decoding: first.dropFirst(prefix.count), as: UTF8.self)
            .trimmingLeadingSpaces()
        if !rest.isEmpty {
            let codeText = rest.prefix(while: { $0 != " " })
            guard codeText.count == 3, codeText.allSatisfy({ $0.isASCII && $0.isNumber }), let code = Int(codeText) else {
                throw .protocolViolation("bad status in header line")
            }
            headers.status = code
            let desc = rest.dropFirst(codeText.count).description.trimmingLeadingSpaces()
            if !desc.isEmpty { headers.statusDescription = desc }
        }
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
                throw .protocolViolation("header line without ':'")
            }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingLeadingSpaces()
            if name.isEmpty || name.contains(" ") { throw .protocolViolation("bad header name") }
            headers.add(name, value)
        }
        return headers
    }
}

extension String {
    func trimmingLeadingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}
