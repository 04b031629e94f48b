import Testing
@testable import SyncLedgerServer

/// What a follower takes from outside before anything authenticates it: the `--follow` URL it
/// is given, and a leader's error body it logs.
@Suite struct FollowerInputTests {
    @Test func aLeadersErrorBodyLosesItsControlAndFormatCharacters() {
        let body = Array("\u{1B}[31mboom\r\nforged line\u{202E}txet\u{0}\u{7}\u{2028}end\u{85}é".utf8)
        let text = ReplicationFailure.printable(body)
        #expect(text == " [31mboom  forged line txet   end é")
        #expect(!text.unicodeScalars.contains { $0.properties.generalCategory == .control || $0.properties.generalCategory == .format })
    }

    @Test func aLeadersErrorBodyIsCutAt300BytesAndABrokenSequenceIsReplaced() {
        let body = [UInt8](repeating: 0x61, count: 299) + Array("é".utf8) + [UInt8](repeating: 0x62, count: 100)
        let text = ReplicationFailure.printable(body)
        #expect(text == String(repeating: "a", count: 299) + "\u{FFFD}")
        #expect(ReplicationFailure.printable([0xFF, 0x41]) == "\u{FFFD}A")
    }

    @Test func aFollowURLWithAUserOrPasswordIsRefusedWithoutEchoingIt() {
        for url in ["http://admin:secret-pw@leader:8080", "https://secret-pw@leader", "http://a:secret-pw@[::1]:1/", "a:secret-pw@leader:1",
                    "HTTP://a:secret-pw@leader"] {
            var configuration = ServerConfiguration()
            configuration.follow = url
            #expect(throws: StartupError.self) { try configuration.validate() }
            do { try configuration.validate() } catch let error as StartupError {
                #expect(error.message.contains("--follow") && !error.message.contains("secret-pw"))
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        for url in ["http://leader:8080", "https://leader.example", "http://[::1]:9/", "http://leader:1/?a=b@c", "http://leader:1/x@y"] {
            var configuration = ServerConfiguration()
            configuration.follow = url
            #expect(throws: Never.self) { try configuration.validate() }
        }
    }
}
