import Testing
@testable import SyncLedgerServer

/// Which WEBHOOK device addresses lie under a transport's URL (`WebhookSender.isUnder`): the
/// table of docs/devices.md, "WEBHOOK devices". The wire test posts through the real server.
@Suite struct WebhookAddressTests {
    let base = "https://relay.example.com/syncledger"

    @Test(arguments: [
        "https://relay.example.com/syncledger",
        "https://relay.example.com/syncledger/",
        "https://relay.example.com/syncledger/device-17",
        "https://RELAY.example.com/syncledger/a/b",
        "https://relay.example.com/sync%6Cedger/x",          // the same segment, encoded
        "https://relay.example.com/syncledger/v1..2/...x",   // dots inside segments
        "https://relay.example.com/syncledger/a%20b",
    ])
    func under(_ address: String) {
        #expect(WebhookSender.isUnder(address, base: base))
        #expect(WebhookSender.isUnder(address, base: base + "/"))
    }

    @Test(arguments: [
        "https://relay.example.com/syncledger-evil/x",
        "https://relay.example.com/other",
        "https://elsewhere.example/syncledger/x",
        "http://relay.example.com/syncledger/x",              // another scheme
        "https://relay.example.com:8443/syncledger/x",        // another port
        "https://relay.example.com/syncledger/../admin",
        "https://relay.example.com/syncledger/./x",
        "https://relay.example.com/syncledger/x/..",
        "https://relay.example.com/syncledger/%2e%2e/admin",
        "https://relay.example.com/syncledger/%2E%2e/admin",
        "https://relay.example.com/syncledger/.%2E/admin",
        "https://relay.example.com/syncledger/%2e",
        "https://relay.example.com/syncledger/..;/admin",
        "https://relay.example.com/syncledger/..%2fadmin",
        "https://relay.example.com/syncledger/x%5C..%5Cadmin",
        "https://relay.example.com/syncledger/x?next=/admin",
        "https://relay.example.com/syncledger/x?",
        "https://relay.example.com/syncledger/x#admin",
        "https://relay.example.com/syncledger/%zz",           // does not decode
        "https://user:pw@relay.example.com/syncledger/x",     // credentials
    ])
    func notUnder(_ address: String) {
        #expect(!WebhookSender.isUnder(address, base: base))
        #expect(!WebhookSender.isUnder(address, base: base + "/"))
    }
}
