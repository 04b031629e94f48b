import Testing
import Foundation
import NATS

@Suite("Three-node cluster failover")
struct ClusterTests {
    /// Publishes with a message id and an expected last sequence, retrying transient failures
    /// (time-outs, no responders during the election, disconnections, 503s) for up to 30 s.
    static func publishRetrying(_ js: JetStreamContext, _ i: Int) async throws -> PubAck {
        try await eventually("acknowledged publish \(i)", timeout: .seconds(30), interval: .milliseconds(100)) {
            do {
                return try await js.publish("orders.\(i)", payload: bytes("order \(i)"), messageID: "order-\(i)",
                                            expectedLastSequence: UInt64(i - 1), timeout: .seconds(2))
            } catch let e as JetStreamAPIError where e.isWrongLastSequence {
                throw HarnessError("acknowledged history diverged at \(i): \(e)") // surfaced on time-out
            }
        }
    }

    @Test func leaderKilledPublishesContinueExactlyOnce() async throws {
        let cluster = try await NATSTestCluster.start()
        let client = try await connectClient(cluster.urls, requestTimeout: .seconds(2))
        let js = JetStreamContext(client: client, timeout: .seconds(2))
        var config = StreamConfig(name: "ORDERS", subjects: ["orders.>"], storage: .file, numReplicas: 3)
        config.duplicateWindow = .seconds(120)
        _ = try await eventually("R3 stream created", timeout: .seconds(20), interval: .milliseconds(200)) {
            try await js.createStream(config)
        }
        let kv = try await eventually("R3 bucket created", timeout: .seconds(20), interval: .milliseconds(200)) {
            try await js.createKeyValue(bucket: "state", replicas: 3)
        }
        let rev1 = try await eventually("kv put") { try await kv.put("leader", bytes("v1")) }

        for i in 1...20 {
            let ack = try await Self.publishRetrying(js, i)
            #expect(ack.sequence == UInt64(i))
        }
        let info = try #require(try await js.streamInfo("ORDERS"))
        let leaderName = try #require(info.cluster?.leader)
        #expect(info.cluster?.replicas?.count == 2)
        let leader = try #require(cluster.server(named: leaderName))
        leader.stop(signal: SIGKILL)

        for i in 21...40 {
            let ack = try await Self.publishRetrying(js, i)
            #expect(ack.sequence == UInt64(i))
        }
        let newInfo = try await eventually("stream info after failover", timeout: .seconds(20)) {
            try await js.streamInfo("ORDERS")
        }
        #expect(newInfo.cluster?.leader != nil && newInfo.cluster?.leader != leaderName)
        #expect(newInfo.state.messages == 40 && newInfo.state.firstSeq == 1 && newInfo.state.lastSeq == 40)
        for seq in 1...40 {
            let m = try await eventually("message \(seq)") { try await js.getMessage(stream: "ORDERS", sequence: UInt64(seq)) }
            #expect(m.headers?["Nats-Msg-Id"] == "order-\(seq)")
            #expect(m.payload == bytes("order \(seq)"))
        }

        // KV compare-and-set across the failover.
        let rev2 = try await eventually("kv update after failover", timeout: .seconds(20)) {
            do {
                return try await kv.update("leader", bytes("v2"), lastRevision: rev1)
            } catch let e as KeyValueError where e.isWrongLastSequence {
                // An earlier attempt that timed out may have been applied.
                if let current = try await kv.get("leader"), current.value == bytes("v2") { return current.revision }
                throw e
            }
        }
        await #expect(throws: KeyValueError.self) { try await kv.update("leader", bytes("stale"), lastRevision: rev1) }
        #expect(try await kv.get("leader")?.revision == rev2)
        await client.close()
    }

    /// A replicated stream refuses a compare-and-set that races another on the same key with
    /// err_code 10164 ("wrong last sequence", no number) rather than 10071: the client must read
    /// both as a lost race, or a caller that retries lost races fails instead.
    @Test func racingCompareAndSetsOnAReplicatedBucketLoseAsWrongRevisions() async throws {
        let cluster = try await NATSTestCluster.start()
        let client = try await connectClient(cluster.urls, requestTimeout: .seconds(5))
        let js = JetStreamContext(client: client, timeout: .seconds(5))
        let kv = try await eventually("R3 bucket created", timeout: .seconds(20), interval: .milliseconds(200)) {
            try await js.createKeyValue(bucket: "race", replicas: 3)
        }
        var revision = try await eventually("kv put") { try await kv.put("k", bytes("0")) }
        for round in 1...5 {
            let base = revision
            let outcomes = await withTaskGroup(of: Result<UInt64, any Error>.self) { group in
                for i in 0..<16 {
                    group.addTask {
                        do { return .success(try await kv.update("k", bytes("\(round)-\(i)"), lastRevision: base)) } catch { return .failure(error) }
                    }
                }
                var all: [Result<UInt64, any Error>] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            let won = outcomes.compactMap { try? $0.get() }
            #expect(won.count == 1, "round \(round): one update wins")
            for case .failure(let error) in outcomes {
                #expect((error as? KeyValueError)?.isWrongLastSequence == true, "round \(round): a lost race is a wrong revision, not \(error)")
            }
            revision = try #require(won.first)
        }
        await client.close()
    }
}
