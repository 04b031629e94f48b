import Foundation
import Testing
@testable import SyncLedger
@testable import SyncLedgerServer

/// The byte-level parsing a signed request goes through before its signature is checked: it
/// must agree with what the slower general-purpose code it replaced answered.
@Suite struct RequestParsingTests {
    @Test func amzDatesAreTheSecondsFoundationsCalendarGives() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let samples = ["19700101T000000Z", "20000229T235959Z", "19000301T120000Z", "20261127T213040Z", "20991231T235960Z",
                       "20240131T010203Z", "21000228T000000Z", "20230229T000000Z", "20240431T000000Z", "16000301T000000Z", "99991231T235959Z"]
        // (Not before 1582: Foundation's Gregorian calendar is Julian there; a signature's date
        // is within minutes of now anyway.)
        for text in samples {
            let b = Array(text.utf8)
            func num(_ r: Range<Int>) -> Int { Int(String(decoding: b[r], as: UTF8.self))! }
            let expected = calendar.date(from: DateComponents(year: num(0..<4), month: num(4..<6), day: num(6..<8), hour: num(9..<11), minute: num(11..<13), second: num(13..<15)))
            #expect(SigV4.parseAmzDate(text) == expected, "\(text)")
        }
        for bad in ["20261327T000000Z", "20261100T000000Z", "20261127T240000Z", "2026112T000000Z", "20261127 000000Z", "2026-127T000000Z", "20261127T0000+0Z"] {
            #expect(SigV4.parseAmzDate(bad) == nil, "\(bad)")
        }
    }

    @Test func queryPairsSplitOnBytesAndDecodeEachComponent() throws {
        let pairs = try #require(SigV4.queryPairs("X-Amz-Credential=AKID%2F20261127%2Fus-east-1&empty=&flag&a=b=c&&%C3%A9=%e2%82%ac&plus=a+b"))
        #expect(pairs.map(\.0) == ["X-Amz-Credential", "empty", "flag", "a", "é", "plus"])
        #expect(pairs.map(\.1) == ["AKID/20261127/us-east-1", "", "", "b=c", "€", "a+b"])
        // A combining mark after `&` does not hide the separator.
        #expect(SigV4.queryPairs("a=1&\u{301}b=2")?.map(\.0) == ["a", "\u{301}b"])
        for bad in ["a=%", "a=%4", "a=%zz", "a=%+1", "%ff=1", "a=%C3"] {
            #expect(SigV4.queryPairs(bad) == nil, "\(bad)")
        }
        #expect(SigV4.queryPairs(nil)?.isEmpty == true)
        #expect(SigV4.percentDecode("us-east-1%3A0000") == "us-east-1:0000")
        #expect(SigV4.percentDecode("plain") == "plain")
    }

    @Test func requestIDsAreVersion4UUIDsInLowerCase() {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = RequestID.make()
            let uuid = UUID(uuidString: id)
            #expect(uuid != nil && id == uuid!.uuidString.lowercased(), "\(id)")
            let parts = id.split(separator: "-")
            #expect(parts.map(\.count) == [8, 4, 4, 4, 12])
            #expect(parts[2].first == "4")
            #expect(["8", "9", "a", "b"].contains(parts[3].first!))
            seen.insert(id)
        }
        #expect(seen.count == 1000)
    }
}
