public import Foundation

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

/// Coded as its milliseconds (a JSON integer): how SyncLedger stores times in its own JSON
/// (devices, pool settings). Cognito's wire shapes send dates as epoch seconds instead, and code
/// them so themselves (see ``CognitoSync``).
extension Timestamp: Codable {
    public init(from decoder: any Decoder) throws { self.init(milliseconds: try decoder.singleValueContainer().decode(Int64.self)) }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(milliseconds)
    }
}
