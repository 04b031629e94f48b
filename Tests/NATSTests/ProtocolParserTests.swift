import Testing
@testable import NATS

@Suite("Protocol decoder")
struct ProtocolParserTests {
    static let stream: [UInt8] = Array((
        "INFO {\"server_id\":\"S1\",\"version\":\"2.15.1\",\"max_payload\":1024,\"headers\":true}\r\n"
        + "PING\r\n+OK\r\nMSG foo.bar 9 5\r\nhello\r\n"
        + "MSG foo 10 reply.to 0\r\n\r\n"
        + "HMSG a.b 11 r 34 37\r\nNATS/1.0\r\nX-Key: v1\r\nX-Key: v2\r\n\r\nabc\r\n"
        + "HMSG _INBOX.x.y 12 30 30\r\nNATS/1.0 503 No Responders\r\n\r\n\r\n"
        + "-ERR 'Permissions Violation'\r\nPONG\r\n").utf8)

    static func describe(_ ops: [ServerOp]) -> [String] {
        ops.map { op in
            switch op {
            case .info(let i): "INFO \(i.serverID) \(i.maxPayload)"
            case .ping: "PING"
            case .pong: "PONG"
            case .ok: "OK"
            case .err(let e): "ERR \(e)"
            case .msg(let m):
                "MSG \(m.subject) \(m.sid) \(m.replyTo ?? "-") \(m.string) \(m.status.map(String.init) ?? "-") "
                    + "\(m.headers?.values(for: "X-Key").joined(separator: ",") ?? "-")"
            }
        }
    }

    static let expected = [
        "INFO S1 1024", "PING", "OK", "MSG foo.bar 9 - hello - -", "MSG foo 10 reply.to  - -",
        "MSG a.b 11 r abc - v1,v2", "MSG _INBOX.x.y 12 -  503 ", "ERR Permissions Violation", "PONG",
    ]

    @Test func wholeStream() throws {
        var p = ProtocolParser()
        #expect(Self.describe(try p.feed(Self.stream)) == Self.expected)
    }

    @Test func splitAtEveryByteBoundary() throws {
        for cut in 0...Self.stream.count {
            var p = ProtocolParser()
            var ops = try p.feed(Self.stream[..<cut])
            ops += try p.feed(Self.stream[cut...])
            #expect(Self.describe(ops) == Self.expected, "cut at \(cut)")
        }
        var p = ProtocolParser()
        var ops: [ServerOp] = []
        for b in Self.stream { ops += try p.feed([b]) }
        #expect(Self.describe(ops) == Self.expected)
    }

    @Test func statusLineParsed() throws {
        var p = ProtocolParser()
        let ops = try p.feed(Array("HMSG s 1 32 32\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n".utf8))
        guard case .msg(let m) = ops.first else { Issue.record("no message"); return }
        #expect(m.status == 408)
        #expect(m.statusDescription == "Request Timeout")
        #expect(m.payload.isEmpty)
    }

    @Test func longControlLineRefused() {
        var p = ProtocolParser()
        let junk = [UInt8](repeating: UInt8(ascii: "A"), count: 64 * 1024 + 10)
        #expect(throws: NATSError.self) { _ = try p.feed(Array("MSG ".utf8) + junk) }
        // Refused before any CRLF arrives, even when fed in pieces.
        var q = ProtocolParser()
        #expect(throws: NATSError.self) {
            for chunk in stride(from: 0, to: junk.count, by: 4096) {
                _ = try q.feed(junk[chunk..<min(chunk + 4096, junk.count)])
            }
        }
    }

    @Test func oversizePayloadRefusedFromTheFirstLine() throws {
        var p = ProtocolParser()
        _ = try p.feed(Array("INFO {\"server_id\":\"x\",\"max_payload\":100}\r\n".utf8))
        #expect(throws: NATSError.self) { _ = try p.feed(Array("MSG a 1 101\r\n".utf8)) }
        var q = ProtocolParser(maxPayload: 100)
        #expect(throws: NATSError.self) { _ = try q.feed(Array("HMSG a 1 12 5000\r\n".utf8)) }
    }

    @Test(arguments: ["MSG a 1 -5\r\n", "MSG a 1 +5\r\n", "MSG a 1 5x\r\n", "MSG a 1 0x10\r\n",
                      "MSG a x 5\r\n", "MSG a 1 99999999999\r\n", "HMSG a 1 20 10\r\n", "MSG a\r\n",
                      "MSG a 1 2 3 4 5\r\n", "FOO bar\r\n", "PING\n", "INFO {not json\r\n"])
    func malformedLinesRefused(_ line: String) {
        var p = ProtocolParser()
        #expect(throws: NATSError.self) { _ = try p.feed(Array(line.utf8)) }
    }

    @Test func payloadWithoutCRLFRefused() {
        var p = ProtocolParser()
        #expect(throws: NATSError.self) { _ = try p.feed(Array("MSG a 1 3\r\nabcXY".utf8)) }
        var q = ProtocolParser()
        #expect(throws: NATSError.self) { _ = try q.feed(Array("HMSG a 1 12 12\r\nNATS/1.0\r\nXY\r\n".utf8)) }
    }

    @Test func headersEncodeAndValidate() throws {
        var h = NATSHeaders()
        h.add("A", "1")
        h.add("A", "2")
        h["B"] = "x"
        let parsed = try NATSHeaders.parse(try h.encoded())
        #expect(parsed == h)
        #expect(parsed["A"] == "1")
        #expect(parsed["a"] == nil)
        #expect(parsed.values(for: "A") == ["1", "2"])
        var bad = NATSHeaders()
        bad["X"] = "v\r\nInjected: yes"
        #expect(throws: NATSError.self) { _ = try bad.encoded() }
        var badName = NATSHeaders()
        badName["Bad Name"] = "v"
        #expect(throws: NATSError.self) { _ = try badName.encoded() }
    }

    @Test func ackSubjectMetadata() {
        let v1 = JetStreamMessageMetadata(replySubject: "$JS.ACK.S.C.2.10.7.1700000000000000000.3")
        #expect(v1?.stream == "S")
        #expect(v1?.consumer == "C")
        #expect(v1?.delivered == 2)
        #expect(v1?.streamSequence == 10)
        #expect(v1?.consumerSequence == 7)
        #expect(v1?.pending == 3)
        let v2 = JetStreamMessageMetadata(replySubject: "$JS.ACK.hub.ACCHASH.S.C.1.5.4.1700000000000000000.0.tok")
        #expect(v2?.domain == "hub")
        #expect(v2?.streamSequence == 5)
        #expect(v2?.consumerSequence == 4)
        #expect(JetStreamMessageMetadata(replySubject: "_INBOX.abc") == nil)
    }

    @Test func rfc3339() {
        let d = RFC3339.parse("2024-05-01T10:00:00.123456789Z")
        #expect(d != nil)
        #expect(abs((d?.timeIntervalSince1970 ?? 0) - 1714557600.123456789) < 1e-5)
    }

    @Test func apiErrorParsing() {
        let e = JetStreamAPIError(code: 400, errorCode: 10071, description: "wrong last sequence: 5")
        #expect(e.isWrongLastSequence)
        #expect(e.currentLastSequence == 5)
        #expect((e as any Error).isWrongLastSequence)
    }
}
