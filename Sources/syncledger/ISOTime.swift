import SyncLedger

/// Times as the CLI prints and reads them: ISO 8601 in UTC with milliseconds
/// (`2026-11-22T10:00:00.123Z`), the log's own precision, so that a time copied from `log`
/// replays exactly. Computed on whole milliseconds (no floating point, no formatter).
enum ISOTime {
    /// `2026-11-22T10:00:00.123Z`.
    static func format(_ time: Timestamp) -> String {
        let ms = time.milliseconds
        let days = floorDiv(ms, 86_400_000)
        var rest = ms % 86_400_000  // the remainder on its own: days * 86_400_000 can overflow at the ends of time
        if rest < 0 { rest += 86_400_000 }
        let (year, month, day) = civil(fromDays: days)
        let hour = rest / 3_600_000
        rest -= hour * 3_600_000
        let minute = rest / 60_000
        rest -= minute * 60_000
        let second = rest / 1000
        let milli = rest - second * 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(milli, 3))Z"
    }

    /// The form `parse` accepts, for messages.
    static let expected = "ISO 8601 with a time zone, e.g. 2026-11-22T10:00:00Z or 2026-11-22T10:00:00.123+01:00"

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM|±HHMM)`; a fraction finer than a
    /// millisecond is cut to the millisecond (entries carry milliseconds, so "at or before" stays
    /// exact). Nil when the text is not such a time.
    static func parse(_ text: String) -> Timestamp? {
        var s = Substring(text)
        guard let year = number(&s, digits: 4), take(&s, "-"), let month = number(&s, digits: 2), take(&s, "-"),
              let day = number(&s, digits: 2) else { return nil }
        guard let separator = s.first, "Tt ".contains(separator) else { return nil }
        s = s.dropFirst()
        guard let hour = number(&s, digits: 2), take(&s, ":"), let minute = number(&s, digits: 2), take(&s, ":"),
              let second = number(&s, digits: 2) else { return nil }
        var milli: Int64 = 0
        if take(&s, ".") || take(&s, ",") {
            let digits = s.prefix { $0.isASCII && $0.isNumber }
            guard (1...9).contains(digits.count) else { return nil }
            let three = String((digits + "00").prefix(3))
            milli = Int64(three)!
            s = s.dropFirst(digits.count)
        }
        var offsetMinutes: Int64 = 0
        if take(&s, "Z") || take(&s, "z") {
        } else if let sign = s.first, sign == "+" || sign == "-" {
            s = s.dropFirst()
            guard let h = number(&s, digits: 2) else { return nil }
            _ = take(&s, ":")
            guard let m = number(&s, digits: 2), h <= 23, m <= 59 else { return nil }
            offsetMinutes = (h * 60 + m) * (sign == "-" ? -1 : 1)
        } else {
            return nil
        }
        guard s.isEmpty, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour <= 23, minute <= 59, second <= 59 else { return nil }
        let days = self.days(fromCivil: year, month, day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60
        return Timestamp(milliseconds: seconds * 1000 + milli)
    }

    private static func take(_ s: inout Substring, _ c: Character) -> Bool {
        guard s.first == c else { return false }
        s = s.dropFirst()
        return true
    }

    private static func number(_ s: inout Substring, digits: Int) -> Int64? {
        let part = s.prefix(digits)
        guard part.count == digits, part.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        s = s.dropFirst(digits)
        return Int64(part)
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    private static func pad(_ n: Int64, _ width: Int) -> String {
        let digits = String(n.magnitude)
        return (n < 0 ? "-" : "") + String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// Year, month, day of a day count since 1970-01-01 (H. Hinnant's algorithm).
    private static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }

    /// Days since 1970-01-01 of a date (H. Hinnant's algorithm).
    private static func days(fromCivil y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
