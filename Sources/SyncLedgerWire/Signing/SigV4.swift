import Crypto
public import Foundation

/// AWS Signature Version 4: the canonical request, the string to sign and the signing key,
/// shared by the verifier (server) and the signer (load tool, tests).
public enum SigV4 {
    /// The only algorithm supported.
    public static let algorithm = "AWS4-HMAC-SHA256"
    /// SHA-256 of the empty string, hex.
    public static let emptyPayloadHash = hex(SHA256.hash(data: [UInt8]()))

    /// Lower-case hex.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.encode(bytes) }

    /// SHA-256 of `data`, hex.
    public static func sha256Hex(_ data: some DataProtocol) -> String { hex(SHA256.hash(data: data)) }

    /// Percent-encodes every byte but the RFC 3986 unreserved ones (and `/` when `keepSlash`).
    public static func uriEncode(_ text: some StringProtocol, keepSlash: Bool = false) -> String {
        let hexDigits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.append(b)
            case UInt8(ascii: "/") where keepSlash:
                out.append(b)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 15)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes `%XX` escapes (a `+` stays a `+`). Nil for a malformed escape or invalid UTF-8.
    public static func percentDecode(_ text: some StringProtocol) -> String? {
        // Nothing escaped (most names and many values): the text as it is.
        if !text.utf8.contains(UInt8(ascii: "%")) { return String(text) }
        return percentDecode(bytes: Array(text.utf8)[...])
    }

    /// ``percentDecode(_:)`` of UTF-8 bytes. Nil for a malformed escape or bytes that are not UTF-8.
    static func percentDecode(bytes input: ArraySlice<UInt8>) -> String? {
        guard input.contains(UInt8(ascii: "%")) else { return String(validating: input, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(input.count)
        var bytes = input
        // A hex digit's value; nil for anything else (a sign too: "%+1" is malformed).
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x41...0x46: c - 0x41 + 10
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        while let b = bytes.popFirst() {
            if b == UInt8(ascii: "%") {
                // Exactly two hex digits.
                guard bytes.count >= 2, let high = hex(bytes[bytes.startIndex]), let low = hex(bytes[bytes.startIndex + 1]) else { return nil }
                out.append(high << 4 | low)
                bytes = bytes.dropFirst(2)
            } else {
                out.append(b)
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    /// Parses a raw query string into decoded (name, value) pairs. Nil when malformed.
    /// Split on the bytes `&` and `=` (as every HTTP client builds the query), not on Swift
    /// characters: a character-wise split costs grapheme breaking over the whole query, and a
    /// combining mark after `&` would hide the separator from it.
    public static func queryPairs(_ query: String?) -> [(String, String)]? {
        guard let query, !query.isEmpty else { return [] }
        var pairs: [(String, String)] = []
        let bytes = Array(query.utf8)
        for part in bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let eq = part.firstIndex(of: UInt8(ascii: "=")) ?? part.endIndex
            let rawValue = eq < part.endIndex ? part[(eq + 1)...] : part[eq...]
            guard let name = percentDecode(bytes: part[..<eq]), let value = percentDecode(bytes: rawValue) else { return nil }
            pairs.append((name, value))
        }
        return pairs
    }

    /// The canonical query string: pairs encoded, sorted by name then value.
    public static func canonicalQuery(_ pairs: [(String, String)]) -> String {
        let encoded: [(String, String)] = pairs.map { (uriEncode($0.0), uriEncode($0.1)) }
        let sorted = encoded.sorted { (a: (String, String), b: (String, String)) -> Bool in
            a.0 == b.0 ? a.1 < b.1 : a.0 < b.0
        }
        return sorted.map { (pair: (String, String)) -> String in pair.0 + "=" + pair.1 }.joined(separator: "&")
    }

    /// The canonical URI of a raw (as sent, percent-encoded) path: the path exactly as sent,
    /// encoded once more, as AWS does for every service but S3. It is not normalized: a
    /// signature for `/a/b` is not one for `/a/x/../b` or `//a/b` (the server refuses such paths
    /// anyway; botocore's normalization changes nothing on the paths it sends).
    public static func canonicalURI(rawPath: String) -> String {
        uriEncode(rawPath.isEmpty ? "/" : rawPath, keepSlash: true)
    }

    /// A header value trimmed, inner runs of spaces collapsed.
    public static func trimAll(_ value: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(value.utf8.count)
        var pendingSpace = false
        for b in value.utf8 {
            if b == 0x20 || b == 0x09 {
                pendingSpace = !out.isEmpty
            } else {
                if pendingSpace { out.append(0x20) }
                pendingSpace = false
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The canonical request.
    public static func canonicalRequest(method: String, canonicalURI: String, canonicalQuery: String, headers: [(String, String)], signedHeaders: [String], payloadHash: String) -> String {
        var text = method + "\n" + canonicalURI + "\n" + canonicalQuery + "\n"
        for name in signedHeaders {
            text += name
            text += ":"
            var first = true
            for (key, value) in headers where key == name || (key.utf8.count == name.utf8.count && key.lowercased() == name) {
                if !first { text += "," }
                text += trimAll(value)
                first = false
            }
            text += "\n"
        }
        text += "\n" + signedHeaders.joined(separator: ";") + "\n" + payloadHash
        return text
    }

    /// The string to sign.
    public static func stringToSign(amzDate: String, scope: String, canonicalRequest: String) -> String {
        "\(algorithm)\n\(amzDate)\n\(scope)\n\(sha256Hex(Array(canonicalRequest.utf8)))"
    }

    /// The signature (hex) of `stringToSign` with the key derived from `secret`.
    public static func signature(secret: String, date: String, region: String, service: String, stringToSign: String) -> String {
        signature(signingKey: signingKey(secret: secret, date: date, region: region, service: service), stringToSign: stringToSign)
    }

    /// The signing key: HMAC chain of "AWS4"+secret over date, region, service, "aws4_request".
    public static func signingKey(secret: String, date: String, region: String, service: String) -> [UInt8] {
        let kDate = hmac(Array("AWS4\(secret)".utf8), date)
        let kRegion = hmac(kDate, region)
        let kService = hmac(kRegion, service)
        return hmac(kService, "aws4_request")
    }

    /// The signature (hex) of `stringToSign` with a derived signing key.
    public static func signature(signingKey: [UInt8], stringToSign: String) -> String {
        hex(hmac(signingKey, stringToSign))
    }

    private static func hmac(_ key: [UInt8], _ text: String) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array(text.utf8), using: SymmetricKey(data: key)))
    }

    /// `yyyyMMdd'T'HHmmss'Z'` for `date`.
    public static func amzDate(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func pad(_ v: Int?, _ n: Int) -> String {
            let s = String(v ?? 0)
            return String(repeating: "0", count: max(0, n - s.count)) + s
        }
        return "\(pad(c.year, 4))\(pad(c.month, 2))\(pad(c.day, 2))T\(pad(c.hour, 2))\(pad(c.minute, 2))\(pad(c.second, 2))Z"
    }

    /// Parses `yyyyMMdd'T'HHmmss'Z'`.
    public static func parseAmzDate(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count == 16, b[8] == UInt8(ascii: "T"), b[15] == UInt8(ascii: "Z") else { return nil }
        func num(_ r: Range<Int>) -> Int? {
            guard b[r].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int(String(decoding: b[r], as: UTF8.self))
        }
        guard let y = num(0..<4), let mo = num(4..<6), let d = num(6..<8), let h = num(9..<11), let mi = num(11..<13), let s = num(13..<15),
              (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, s < 61 else { return nil }
        // The proleptic Gregorian day number, by arithmetic (Foundation's Calendar costs about as
        // much as the rest of a signature check). A day past its month's end rolls into the next
        // month, as Calendar's lenient date(from:) does.
        let seconds = daysFromCivil(year: y, month: mo, day: d) * 86_400 + h * 3_600 + mi * 60 + s
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// Days from 1970-01-01 to the given Gregorian date (negative before it); `day` may pass the
    /// month's end. After H. Hinnant's `days_from_civil`.
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

/// Signs requests with SigV4 (header form), as AWS SDKs do. For the load tool and tests.
public struct SigV4Signer: Sendable {
    /// The access key id.
    public let accessKeyID: String
    /// The secret.
    public let secretAccessKey: String
    /// A session token to send, if any.
    public let sessionToken: String?
    /// The region in the scope.
    public let region: String
    /// The service in the scope.
    public let service: String

    /// A signer.
    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, region: String = "us-east-1", service: String = "cognito-sync") {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.region = region
        self.service = service
    }

    /// The headers to add to a request (`x-amz-date`, `x-amz-content-sha256`, the security
    /// token, `authorization`). `rawPath` and `rawQuery` are as sent on the wire.
    public func sign(method: String, host: String, rawPath: String, rawQuery: String?, headers: [(String, String)] = [], body: [UInt8], date: Date = Date()) -> [(String, String)] {
        let amzDate = SigV4.amzDate(date)
        let day = String(amzDate.prefix(8))
        let payloadHash = SigV4.sha256Hex(body)
        var all = headers + [("host", host), ("x-amz-date", amzDate), ("x-amz-content-sha256", payloadHash)]
        if let sessionToken { all.append(("x-amz-security-token", sessionToken)) }
        let signed = Array(Set(all.map { $0.0.lowercased() })).sorted()
        let canonical = SigV4.canonicalRequest(
            method: method, canonicalURI: SigV4.canonicalURI(rawPath: rawPath),
            canonicalQuery: SigV4.canonicalQuery(SigV4.queryPairs(rawQuery) ?? []),
            headers: all, signedHeaders: signed, payloadHash: payloadHash)
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let signature = SigV4.signature(secret: secretAccessKey, date: day, region: region, service: service,
                                        stringToSign: SigV4.stringToSign(amzDate: amzDate, scope: scope, canonicalRequest: canonical))
        var out = all.filter { $0.0 != "host" && !headers.map(\.0).contains($0.0) }
        out.append(("authorization", "\(SigV4.algorithm) Credential=\(accessKeyID)/\(scope), SignedHeaders=\(signed.joined(separator: ";")), Signature=\(signature)"))
        return out
    }
}
