@testable import SyncLedgerClient
import Testing

/// The Server-Sent Events parser against the WHATWG rules, fed whole and byte by byte.
struct LiveEventsParserTests {
    /// The messages of `chunks` fed in order, and the parser after them.
    func parse(_ chunks: [String], lastEventID: String = "", max: Int = 1 << 20) -> ([SSEMessage], SSEParser) {
        var parser = SSEParser(lastEventID: lastEventID, maxEventBytes: max)
        var messages: [SSEMessage] = []
        for chunk in chunks { messages += parser.feed(Array(chunk.utf8)) }
        return (messages, parser)
    }

    /// The messages of `text` fed at once, and byte by byte: both must agree.
    func parse(_ text: String, lastEventID: String = "") -> ([SSEMessage], SSEParser) {
        let whole = parse([text], lastEventID: lastEventID)
        var parser = SSEParser(lastEventID: lastEventID)
        var single: [SSEMessage] = []
        for byte in text.utf8 { single += parser.feed([byte]) }
        #expect(single == whole.0 && parser.lastEventID == whole.1.lastEventID && parser.reconnectionTime == whole.1.reconnectionTime)
        return whole
    }

    @Test func anEventOfTheServer() {
        let (messages, parser) = parse("retry: 3000\nid: 41\n\nid: 42\nevent: dataset\ndata: {\"syncCount\":\"7\"}\n\n: keep-alive\n\n")
        #expect(messages == [SSEMessage(type: "dataset", data: "{\"syncCount\":\"7\"}", lastEventID: "42")])
        #expect(parser.lastEventID == "42" && parser.reconnectionTime == 3000)
    }

    @Test func linesEndWithLFCRLFOrCR() {
        let (messages, _) = parse("data: a\r\ndata: b\r\rdata: c\rdata: d\n\n")
        #expect(messages.map(\.data) == ["a\nb", "c\nd"])
        // A CRLF split between chunks is one line end, not a line and a blank line.
        let (split, _) = parse(["data: x\r", "\ndata: y\r", "\n\r", "\n", "data: z\r", "\r"])
        #expect(split.map(\.data) == ["x\ny", "z"])
    }

    @Test func oneSpaceAfterTheColonIsRemoved() {
        let (messages, _) = parse("data:no space\ndata:  two spaces\ndata: \tx\n\n")
        #expect(messages.map(\.data) == ["no space\n two spaces\n\tx"])
    }

    @Test func dataLinesAreJoinedAndEmptyDataStillDispatches() {
        #expect(parse("data\ndata\n\n").0.map(\.data) == ["\n"])
        #expect(parse("data:\n\n").0.map(\.data) == [""])
        #expect(parse("data: first\ndata: second\ndata: third\n\n").0.map(\.data) == ["first\nsecond\nthird"])
        // Multi-byte characters split between chunks come out whole.
        let text = Array("data: héllo ✓\n\n".utf8)
        var parser = SSEParser()
        let messages = parser.feed(text[..<8]) + parser.feed(text[8..<14]) + parser.feed(text[14...])
        #expect(messages.map(\.data) == ["héllo ✓"])
    }

    @Test func commentsUnknownFieldsAndEventsWithoutDataDispatchNothing() {
        let (messages, _) = parse(": keep-alive\n\n:data: hidden\n\nfoo: bar\nevent: dataset\n\ndata: after\n\n")
        // `event: dataset` with no data is dropped, and its type does not carry over.
        #expect(messages == [SSEMessage(type: "message", data: "after", lastEventID: "")])
        // A field without a colon has an empty value: `event` names no type.
        #expect(parse("event\ndata: x\n\n").0.map(\.type) == ["message"])
    }

    @Test func idSetsTheLastEventIDAtDispatchUnlessItHasNUL() {
        let (messages, parser) = parse("id: 3\ndata: a\n\ndata: b\n\nid: 4\u{0}x\ndata: c\n\nid: 5\n\n", lastEventID: "1")
        #expect(messages.map(\.lastEventID) == ["3", "3", "3"])
        #expect(parser.lastEventID == "5")
        // An id is the stream's only once its event is dispatched: a stream cut before the
        // blank line keeps the previous one.
        let (cut, cutParser) = parse("id: 6\n\nid: 7\ndata: partial", lastEventID: "5")
        #expect(cut.isEmpty && cutParser.lastEventID == "6")
        // `id` with an empty value resets it.
        #expect(parse("id\n\n", lastEventID: "9").1.lastEventID == "")
    }

    @Test func retryMustBeAllDigits() {
        #expect(parse("retry: 1500\n").1.reconnectionTime == 1500)
        for bad in ["retry: 15x\n", "retry: -1\n", "retry:\n", "retry: 20 \n", "retry: 1.5\n", "retry\n"] {
            #expect(parse("retry: 700\n" + bad).1.reconnectionTime == 700, "\(bad)")
        }
    }

    @Test func aLeadingByteOrderMarkIsSkippedOnlyAtTheStart() {
        #expect(parse("\u{FEFF}data: a\n\n").0.map(\.data) == ["a"])
        #expect(parse("data: a\n\n\u{FEFF}data: b\n\n").0.map(\.data) == ["a"])
        // Split between chunks.
        var parser = SSEParser()
        let messages = parser.feed([0xEF]) + parser.feed([0xBB]) + parser.feed([0xBF] + Array("data: c\n\n".utf8))
        #expect(messages.map(\.data) == ["c"])
    }

    @Test func anOversizeLineOrEventIsAnError() {
        // A line that never ends.
        var parser = SSEParser(maxEventBytes: 64)
        #expect(parser.feed(Array(("data: " + String(repeating: "x", count: 40)).utf8)).isEmpty && !parser.overflowed)
        #expect(parser.feed(Array(String(repeating: "y", count: 40).utf8)).isEmpty && parser.overflowed)
        // Nothing more is read.
        #expect(parser.feed(Array("\n\ndata: late\n\n".utf8)).isEmpty)
        // Short lines adding up to an event's data past the bound; what was dispatched before
        // (an event, an id) is kept.
        var many = SSEParser(maxEventBytes: 64)
        let before = many.feed(Array(("id: 1\ndata: ok\n\nid: 2\n\n" + String(repeating: "data: 0123456789\n", count: 10) + "\n").utf8))
        #expect(before.map(\.data) == ["ok"] && many.overflowed && many.lastEventID == "2")
        // Comments do not add up; data up to the bound is fine.
        var fits = SSEParser(maxEventBytes: 64)
        let comments = String(repeating: ": " + String(repeating: "k", count: 50) + "\n", count: 100)
        let messages = fits.feed(Array((comments + "data: " + String(repeating: "z", count: 58) + "\n\n").utf8))
        #expect(messages.map(\.data.count) == [58] && !fits.overflowed)
    }

    @Test func aLiveEventStringifiesTheJSONMembers() {
        let event = LiveEvent(SSEMessage(type: "dataset", data: """
            {"source":"cognito-sync","identityPoolId":"p","datasetName":"d","syncCount":"7","sequence":42,"deleted":false,"deviceId":null,"x":[1],"f":1.5}
            """, lastEventID: "42"))
        #expect(event.fields == ["source": "cognito-sync", "identityPoolId": "p", "datasetName": "d", "syncCount": "7",
                                 "sequence": "42", "deleted": "false", "f": "1.5"])
        #expect(event.id == "42" && event.type == "dataset")
        #expect(LiveEvent(SSEMessage(type: "message", data: "not json", lastEventID: "")).fields.isEmpty)
    }

    @Test func backoffDoublesFromOneSecondOrTheServersRetry() {
        let max = Duration.seconds(60)
        #expect((0...8).map { LiveEvents.backoff(retry: nil, failures: $0, max: max) } == [1, 1, 2, 4, 8, 16, 32, 60, 60].map { .seconds($0) })
        #expect((0...3).map { LiveEvents.backoff(retry: .seconds(3), failures: $0, max: max) } == [3, 3, 6, 12].map { .seconds($0) })
        #expect(LiveEvents.backoff(retry: .zero, failures: 0, max: max) == .milliseconds(100))
        #expect(LiveEvents.backoff(retry: .seconds(120), failures: 3, max: max) == .seconds(120))
        #expect(LiveEvents.backoff(retry: nil, failures: 1_000, max: max) == .seconds(60))
    }
}
