import Foundation
import Testing
import SyncLedgerTestSupport
@testable import SyncLedger

@Suite struct DeviceRegistryTests {
    let pool = try! IdentityPoolID("test:0")
    let alice = try! IdentityID("test:1")
    let bob = try! IdentityID("test:2")

    @Test func aDeviceLivesThroughTokensLoginsAndLogouts() async throws {
        try await withLedger { ledger in
            let a = stream("notes", identity: "1"), b = stream("notes", identity: "2")
            // First launch: no login, no push permission.
            let code = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil,
                                                   info: DeviceInfo(platform: .apns, osVersion: "17.0", model: "iPhone15,2", locale: "de_CH", settings: ["theme": "dark"]))
            var device = try #require(try ledger.device(pool: pool, id: code))
            #expect(device.owner == alice.rawValue && device.identity == nil && device.token == nil && device.settings == ["theme": "dark"])
            #expect(try ledger.subscribers(of: a).isEmpty)
            // Info again: latest wins, same code; the same info again writes nothing.
            let again = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: code, info: DeviceInfo(osVersion: "17.1"))
            #expect(again == code)
            #expect(try ledger.device(pool: pool, id: code)?.osVersion == "17.1")
            let entries = try ledger.entries(in: Ledger.devicesStream(pool)).count
            _ = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: code, info: DeviceInfo(osVersion: "17.1"))
            #expect(try ledger.entries(in: Ledger.devicesStream(pool)).count == entries)
            // The token arrives (upper-case hex is one token with lower case), then the login.
            try await ledger.syncToken(pool: pool, caller: .identity(alice), code: code, token: "AB01")
            try await ledger.login(pool: pool, identity: alice, code: code, subscribeAll: nil)
            #expect(try ledger.subscribers(of: a).map(\.token) == ["ab01"])
            // A second device of the same user: both receive.
            let second = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil, info: DeviceInfo(platform: .gcm))
            try await ledger.syncToken(pool: pool, caller: .identity(alice), code: second, token: "fcm-1")
            try await ledger.login(pool: pool, identity: alice, code: second, subscribeAll: nil)
            #expect(Set(try ledger.subscribers(of: a).map(\.id)) == [code, second])
            // The token rotates: the code, the link stay; the old token is gone.
            try await ledger.syncToken(pool: pool, caller: .identity(alice), code: code, token: "cd02")
            device = try #require(try ledger.device(pool: pool, id: code))
            #expect(device.token == "cd02" && device.identity == alice.rawValue)
            // The token shows up on the other device: it moves there (a token has one device).
            try await ledger.syncToken(pool: pool, caller: .identity(alice), code: second, token: "fcm-1")
            // Logout: registered still, no longer notified.
            try await ledger.logout(pool: pool, caller: .identity(alice), code: code)
            #expect(try ledger.subscribers(of: a).map(\.id) == [second])
            #expect(try ledger.device(pool: pool, id: code)?.token == "cd02")
            // Bob logs in on it: he gets his changes there, Alice does not.
            try await ledger.login(pool: pool, identity: bob, code: code, subscribeAll: nil)
            #expect(try ledger.subscribers(of: b).map(\.id) == [code])
            #expect(try ledger.subscribers(of: a).map(\.id) == [second])
            #expect(try ledger.devices(pool: pool, identity: bob).map(\.id) == [code])
            // Switching users directly drops the previous one's explicit subscriptions.
            try await ledger.subscribe(b, deviceID: code)
            try await ledger.login(pool: pool, identity: alice, code: code, subscribeAll: false)
            #expect(try ledger.subscribers(of: b).isEmpty)
            #expect(try ledger.subscribers(of: a).map(\.id) == [second])
            try await ledger.login(pool: pool, identity: bob, code: code, subscribeAll: false)
            #expect(try ledger.subscribers(of: b).isEmpty, "Bob's subscription went with his first logout")
            #expect(try ledger.verify().isValid)
        }
    }

    @Test func foreignAndUnknownCodesGetOneAnswerAndChangeNothing() async throws {
        var options = LedgerOptions()
        options.limits.maxDevicesPerIdentity = 2
        try await withLedger(options) { ledger in
            let code = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil, info: DeviceInfo(platform: .gcm))
            let before = try ledger.lastSequence
            let foreign = await expectLedgerError(.notFound) {
                _ = try await ledger.syncDevice(pool: pool, caller: .identity(bob), code: code, info: DeviceInfo(model: "x"))
            }
            let unknown = await expectLedgerError(.notFound) {
                _ = try await ledger.syncDevice(pool: pool, caller: .identity(bob), code: "00000000-0000-0000-0000-000000000000", info: DeviceInfo(model: "x"))
            }
            #expect(foreign?.message.replacingOccurrences(of: code, with: "X") == unknown?.message.replacingOccurrences(of: "00000000-0000-0000-0000-000000000000", with: "X"))
            await expectLedgerError(.notFound) { try await ledger.syncToken(pool: pool, caller: .identity(bob), code: code, token: "t") }
            await expectLedgerError(.notFound) { _ = try await ledger.logout(pool: pool, caller: .identity(bob), code: code) }
            await expectLedgerError(.invalidParameter) { try await ledger.syncToken(pool: pool, caller: .identity(alice), code: code, token: "has space") }
            await expectLedgerError(.invalidParameter) { try await ledger.syncToken(pool: pool, caller: .identity(alice), code: code, token: "") }
            await expectLedgerError(.invalidParameter) {
                _ = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: code, info: DeviceInfo(model: String(repeating: "m", count: 129)))
            }
            await expectLedgerError(.limitExceeded) {
                _ = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: code, info: DeviceInfo(settings: Dictionary(uniqueKeysWithValues: (0..<65).map { ("k\($0)", "v") })))
            }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil, info: DeviceInfo()) }
            await expectLedgerError(.invalidParameter) { _ = try await ledger.syncDevice(pool: pool, caller: .admin("AK"), code: nil, info: DeviceInfo(platform: .gcm)) }
            let webhook = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil, info: DeviceInfo(platform: .webhook))
            await expectLedgerError(.invalidParameter) { try await ledger.syncToken(pool: pool, caller: .identity(alice), code: webhook, token: "ftp://x") }
            await expectLedgerError(.limitExceeded) { _ = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil, info: DeviceInfo(platform: .gcm)) }
            #expect(try ledger.lastSequence == before + 1, "only the WEBHOOK device was written")
            // What an identity sees: its logged-in devices and the logged-out ones it created.
            #expect(try ledger.visibleDevices(pool: pool, identity: alice).map(\.id) == [code, webhook].sorted())
            try await ledger.login(pool: pool, identity: bob, code: code, subscribeAll: nil)
            #expect(try ledger.visibleDevices(pool: pool, identity: alice).map(\.id) == [webhook], "not who is logged in on its device")
            #expect(try ledger.visibleDevices(pool: pool, identity: bob).map(\.id) == [code])
            // Removing a device frees its place under the owner's limit; its code is unknown after.
            await expectLedgerError(.notFound) { _ = try await ledger.removeDevice(pool: pool, caller: .identity(bob), code: webhook) }
            try await ledger.removeDevice(pool: pool, caller: .identity(alice), code: webhook)
            #expect(try ledger.device(pool: pool, id: webhook) == nil)
            await expectLedgerError(.notFound) { try await ledger.syncToken(pool: pool, caller: .identity(alice), code: webhook, token: "https://x.example/a") }
            let third = try await ledger.syncDevice(pool: pool, caller: .identity(alice), code: nil, info: DeviceInfo(platform: .gcm))
            #expect(third != webhook)
            // The admin may reach any device of the pool.
            _ = try await ledger.syncDevice(pool: pool, caller: .admin("AK"), code: code, info: DeviceInfo(appVersion: "2"))
            #expect(try ledger.device(pool: pool, id: code)?.appVersion == "2")
        }
    }
}
