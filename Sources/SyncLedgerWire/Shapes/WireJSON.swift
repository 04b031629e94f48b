public import Foundation

/// JSON in and out of the wire shapes (``CognitoSync``, ``CognitoIdentity``) with Foundation's
/// coders, a decoding failure made a ``WireDecodingError`` that names the member.
public enum WireJSON {
    /// Decodes a shape from JSON.
    /// - Throws: ``WireDecodingError`` naming the member that is missing or malformed
    ///   (`Records[2].SyncCount`), or saying the text is not JSON.
    public static func decode<T: Decodable>(_ type: T.Type, from json: some DataProtocol) throws(WireDecodingError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(json))
        } catch let error as DecodingError {
            throw WireDecodingError(error)
        } catch {
            throw WireDecodingError(field: "", reason: "\(error)")
        }
    }

    /// A shape as JSON (slashes not escaped; member order unspecified, as JSON objects are).
    public static func encode(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }
}

/// JSON that does not decode as the shape expected: which member, and why.
public struct WireDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The member's path, e.g. `Records[2].SyncCount`; empty for the whole text.
    public let field: String
    /// What is wrong with it: missing, of the wrong type, out of range, or not JSON at all.
    public let reason: String

    /// An error about `field`.
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }

    /// The member and reason a `DecodingError` names.
    init(_ error: DecodingError) {
        func path(_ keys: [any CodingKey]) -> String {
            var text = ""
            for key in keys {
                if let index = key.intValue, key.stringValue.hasPrefix("Index ") || key.stringValue == String(index) {
                    text += "[\(index)]"
                } else {
                    text += (text.isEmpty ? "" : ".") + key.stringValue
                }
            }
            return text
        }
        switch error {
        case .keyNotFound(let key, let context):
            self.init(field: path(context.codingPath + [key]), reason: "is missing")
        case .valueNotFound(let type, let context):
            self.init(field: path(context.codingPath), reason: "is null where \(type) is required")
        case .typeMismatch(let type, let context):
            self.init(field: path(context.codingPath), reason: "is not \(Self.expected(type)): \(context.debugDescription)")
        case .dataCorrupted(let context):
            // Foundation's parser puts what and where (line, column) in the underlying error.
            let detail = context.underlyingError.map { " (\($0))" } ?? ""
            self.init(field: path(context.codingPath), reason: context.debugDescription + detail)
        @unknown default:
            self.init(field: "", reason: "\(error)")
        }
    }

    private static func expected(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Double.Type, is Int.Type, is Int64.Type, is UInt64.Type: "a number"
        case is [String: Any].Type: "an object"
        case is [Any].Type: "an array"
        default: "\(type)"
        }
    }

    public var description: String { field.isEmpty ? reason : "\(field) \(reason)" }
}

// MARK: Numbers, and dates as epoch seconds

extension KeyedDecodingContainer {
    /// A whole number, nil when absent or null.
    /// - Throws: `DecodingError.dataCorrupted` naming the key for a number out of `T`'s range or
    ///   with a fraction (Foundation's decoder says only "not valid JSON", without the member).
    func decodeNumber<T: FixedWidthInteger & Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        do {
            return try decodeIfPresent(T.self, forKey: key)
        } catch let error as DecodingError {
            throw error
        } catch {
            // Foundation's decoder throws its own error for a number it cannot represent, and
            // turns it into "not valid JSON" without the member on the way out.
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "must be a whole number from \(T.min) to \(T.max)")
        }
    }

    /// ``decodeNumber(_:forKey:)`` of a required member.
    func decodeRequiredNumber<T: FixedWidthInteger & Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let value = try decodeNumber(T.self, forKey: key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "\(key.stringValue) is required"))
        }
        return value
    }

    /// A date sent as epoch seconds (botocore's rest-json form), rounded to the millisecond as
    /// the server stores it; nil when absent or null.
    /// - Throws: `DecodingError.dataCorrupted` naming the key for a number that is not finite or
    ///   beyond ±10¹³ seconds; a type mismatch for anything but a number.
    func decodeEpochSeconds(forKey key: Key) throws -> Timestamp? {
        guard let seconds = try decodeIfPresent(Double.self, forKey: key) else { return nil }
        guard seconds.isFinite, abs(seconds) < 1e13 else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "must be epoch seconds, not \(seconds)")
        }
        return Timestamp(milliseconds: Int64((seconds * 1000).rounded()))
    }
}

extension KeyedEncodingContainer {
    /// `time` as epoch seconds with its milliseconds as the fraction; nothing when nil.
    mutating func encodeEpochSeconds(_ time: Timestamp?, forKey key: Key) throws {
        if let time { try encode(time.epochSeconds, forKey: key) }
    }
}
