import Testing
import Foundation
import NATS

@Suite("Key-Value")
struct KeyValueTests {
    @Test func createUpdateDeleteAndWatch() async throws {
        let server = try await NATSServerProcess.start(jetstream: true)
        let client = try await connectClient([server.url])
        let js = JetStreamContext(client: client, timeout: .seconds(3))
        _ = try await eventually("JetStream ready") { try await js.accountInfo() }
        let kv = try await js.createKeyValue(bucket: "cfg", history: 5)
        #expect(try await js.keyValue(bucket: "cfg") != nil)
        #expect(try await js.keyValue(bucket: "nope") == nil)

        let r1 = try await kv.create("a", bytes("1"))
        await #expect(throws: KeyValueError.keyExists(revision: r1)) { try await kv.create("a", bytes("again")) }
        let r2 = try await kv.update("a", bytes("2"), lastRevision: r1)
        #expect(r2 > r1)
        do {
            try await kv.update("a", bytes("stale"), lastRevision: r1)
            Issue.record("expected wrongLastRevision")
        } catch let e as KeyValueError {
            #expect(e.isWrongLastSequence)
            #expect(e == .wrongLastRevision(current: r2))
        }
        let entry = try await kv.get("a")
        #expect(entry?.value == bytes("2") && entry?.revision == r2 && entry?.operation == .put)
        #expect(try await kv.get("missing") == nil)

        let rb = try await kv.put("b", bytes("x"))
        try await kv.delete("b", lastRevision: rb)
        #expect(try await kv.get("b") == nil)
        #expect(try await kv.entry("b")?.operation == .delete)
        let rb2 = try await kv.create("b", bytes("y"))
        #expect(try await kv.get("b")?.revision == rb2)
        #expect(Set(try await kv.keys()) == ["a", "b"])
        try await kv.purge("b")
        #expect(try await kv.get("b") == nil)
        #expect(try await kv.keys() == ["a"])
        await #expect(throws: KeyValueError.invalidKey(".bad")) { try await kv.put(".bad", []) }
        await #expect(throws: KeyValueError.invalidKey("sp ace")) { try await kv.put("sp ace", []) }

        // Watch: the latest entry of each key, then changes in order.
        _ = try await kv.put("c", bytes("c1"))
        let seen = Collector<String>()
        let watch = kv.watch()
        let reader = Task {
            do {
                for try await e in watch {
                    await seen.append("\(e.key)=\(String(decoding: e.value, as: UTF8.self)):\(e.operation.rawValue)")
                }
            } catch { await seen.fail(error) }
        }
        defer { reader.cancel() }
        _ = try await eventually("initial values") { await seen.count >= 3 ? true : nil }
        #expect(await seen.items == ["a=2:PUT", "b=:PURGE", "c=c1:PUT"])
        _ = try await kv.put("a", bytes("3"))
        try await kv.delete("c")
        _ = try await kv.put("d", bytes("d1"))
        _ = try await eventually("updates") { await seen.count >= 6 ? true : nil }
        #expect(await seen.items.suffix(3) == ["a=3:PUT", "c=:DEL", "d=d1:PUT"])
        #expect(await seen.failure == nil)

        // An empty bucket's watch sees only later changes.
        let empty = try await js.createKeyValue(bucket: "empty")
        let seen2 = Collector<String>()
        let w2 = empty.watch()
        let r2task = Task { for try await e in w2 { await seen2.append(e.key) } }
        defer { r2task.cancel() }
        _ = try await empty.put("k", bytes("v"))
        _ = try await eventually("watch of empty bucket") { await seen2.count >= 1 ? true : nil }
        #expect(await seen2.items == ["k"])
        await client.close()
        _ = server
    }
}
