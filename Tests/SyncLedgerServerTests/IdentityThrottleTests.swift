import Foundation
import Synchronization
import Testing
@testable import SyncLedgerServer

/// ``TokenBucket`` and ``IdentityThrottle`` on an injected clock: no sleeping.
@Suite struct IdentityThrottleTests {
    private func take(_ bucket: inout TokenBucket, _ now: Double) -> Bool { bucket.take(now: now) }

    /// A clock the test moves by hand.
    final class FakeClock: Sendable {
        private let now = Mutex(1000.0)
        func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
        func set(_ seconds: Double) { now.withLock { $0 = seconds } }
        var read: @Sendable () -> Double { { [self] in now.withLock { $0 } } }
    }

    @Test func aFullBucketLetsABurstThroughThenRefusesUntilItRefills() {
        var bucket = TokenBucket(rate: 2, burst: 5, now: 0)
        for _ in 0..<5 { #expect(take(&bucket, 0)) }
        #expect(!take(&bucket, 0))
        #expect(bucket.secondsUntilToken(now: 0) == 0.5)
        #expect(!take(&bucket, 0.4))
        #expect(take(&bucket, 0.5))
        #expect(!take(&bucket, 0.5))
        // A long quiet spell fills it to its size, no further.
        #expect(bucket.isFull(now: 1000))
        for _ in 0..<5 { #expect(take(&bucket, 1000)) }
        #expect(!take(&bucket, 1000))
    }

    @Test func aClockThatGoesBackEarnsNothing() {
        var bucket = TokenBucket(rate: 10, burst: 1, now: 100)
        #expect(take(&bucket, 100))
        #expect(!take(&bucket, 50))
        #expect(!take(&bucket, 100))
        #expect(take(&bucket, 100.1))
    }

    @Test func aFractionOfATokenDoesNotPass() {
        var bucket = TokenBucket(rate: 1, burst: 1, now: 0)
        #expect(take(&bucket, 0))
        #expect(!take(&bucket, 0.999))
        #expect(take(&bucket, 1.0))
    }

    @Test func eachSourceAndEachPoolHasItsOwnBucket() {
        var options = IdentityThrottleOptions()
        (options.sourceRate, options.sourceBurst, options.poolRate, options.poolBurst) = (1, 3, 1, 5)
        let clock = FakeClock()
        let throttle = IdentityThrottle(options: options, clock: clock.read)
        for _ in 0..<3 { #expect(throttle.admit(source: "10.0.0.1", operation: "GetId") == nil) }
        let wait = throttle.admit(source: "10.0.0.1", operation: "GetId")
        #expect(wait == 1)
        #expect(throttle.admit(source: "10.0.0.2", operation: "GetId") == nil)
        for _ in 0..<5 { #expect(throttle.admit(pool: "us-east-1:a", operation: "GetId") == nil) }
        #expect(throttle.admit(pool: "us-east-1:a", operation: "GetCredentialsForIdentity") != nil)
        #expect(throttle.admit(pool: "us-east-1:b", operation: "GetId") == nil)
        clock.advance(1)
        #expect(throttle.admit(source: "10.0.0.1", operation: "GetId") == nil)
        #expect(throttle.admit(pool: "us-east-1:a", operation: "GetId") == nil)
        let metrics = MetricsRegistry.text(throttle.refresh)
        #expect(metrics.contains("syncledger_identity_throttled_total{operation=\"GetId\",limit=\"source\"} 1\n"))
        #expect(metrics.contains("syncledger_identity_throttled_total{operation=\"GetCredentialsForIdentity\",limit=\"pool\"} 1\n"))
        #expect(metrics.contains("syncledger_identity_throttle_rate{limit=\"source\"} 1.0\n"))
    }

    @Test func aRateOfZeroTurnsABucketOff() {
        var options = IdentityThrottleOptions()
        (options.sourceRate, options.sourceBurst, options.poolRate) = (0, 1, 0)
        let throttle = IdentityThrottle(options: options, clock: FakeClock().read)
        for _ in 0..<100 {
            #expect(throttle.admit(source: "10.0.0.1", operation: "GetId") == nil)
            #expect(throttle.admit(pool: "us-east-1:a", operation: "GetId") == nil)
        }
    }

    @Test func forwardedForIsBelievedOnlyFromATrustedProxy() {
        var options = IdentityThrottleOptions()
        options.trustedProxies = ["127.0.0.1", "10.0.0.9"]
        let throttle = IdentityThrottle(options: options, clock: FakeClock().read)
        // From an untrusted peer the header is the sender's to choose: ignored.
        #expect(throttle.source(peer: "192.0.2.7", forwardedFor: "203.0.113.5") == "192.0.2.7")
        // From a trusted proxy: the rightmost address that is not a trusted proxy.
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: "203.0.113.5") == "203.0.113.5")
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: "1.1.1.1, 203.0.113.5, 10.0.0.9") == "203.0.113.5")
        // Garbage in the chain stops it at the last address a trusted hop vouched for.
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: "not-an-address") == "127.0.0.1")
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: nil) == "127.0.0.1")
        // One spelling per address.
        #expect(throttle.source(peer: "::ffff:192.0.2.7", forwardedFor: nil) == "192.0.2.7")
        // An IPv6 source is its /64: rotating through the /64 is one source.
        #expect(throttle.source(peer: "2001:DB8:0:0::1", forwardedFor: nil) == "2001:db8::/64")
        #expect(throttle.source(peer: "2001:db8:0:0:ffff:1234:5678:9abc", forwardedFor: nil) == "2001:db8::/64")
        #expect(throttle.source(peer: "2001:db8:0:1::1", forwardedFor: nil) == "2001:db8:0:1::/64")
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: "2001:db8:aa:bb:1:2:3:4") == "2001:db8:aa:bb::/64")
        #expect(throttle.source(peer: nil, forwardedFor: "203.0.113.5") == "unknown")
        // A header of any length is read from the right: padding it does not make the request the proxy's.
        let padded = String(repeating: "198.51.100.1, ", count: 2000) + "203.0.113.5"
        #expect(padded.utf8.count > 4096)
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: padded) == "203.0.113.5")
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: String(repeating: "x", count: 10_000) + ", 203.0.113.5") == "203.0.113.5")
        // A chain of trusted hops longer than what is read stops at the last one read.
        #expect(throttle.source(peer: "127.0.0.1", forwardedFor: "203.0.113.5" + String(repeating: ", 10.0.0.9", count: 40)) == "10.0.0.9")
    }

    @Test func aFloodOfSourcesKeepsTheTableBounded() {
        var options = IdentityThrottleOptions()
        (options.sourceRate, options.sourceBurst, options.maxTracked) = (1, 2, 100)
        let clock = FakeClock()
        let throttle = IdentityThrottle(options: options, clock: clock.read)
        for i in 0..<1000 {
            #expect(throttle.admit(source: "10.0.\(i / 256).\(i % 256)", operation: "GetId") == nil)
            #expect(throttle.admit(source: "10.0.\(i / 256).\(i % 256)", operation: "GetId") == nil)
        }
        #expect(MetricsRegistry.text(throttle.refresh).contains("syncledger_identity_throttle_buckets{limit=\"source\"} "))
        let count = MetricsRegistry.text(throttle.refresh).split(separator: "\n").first { $0.hasPrefix("syncledger_identity_throttle_buckets{limit=\"source\"}") }
            .flatMap { Double($0.split(separator: " ").last!) }
        #expect(count != nil && count! <= 100)
        // The latest source's bucket is kept, empty.
        #expect(throttle.admit(source: "10.0.3.231", operation: "GetId") != nil)
    }

    @Test func badOptionsAreRefusedNamingTheFlag() {
        var options = IdentityThrottleOptions()
        options.sourceRate = -1
        #expect(throws: StartupError.self) { try options.validate() }
        options = IdentityThrottleOptions()
        options.poolBurst = 0
        #expect((try? options.validate()) == nil)
        options = IdentityThrottleOptions()
        options.trustedProxies = ["proxy.example"]
        do { try options.validate(); Issue.record("accepted a host name") } catch let error as StartupError {
            #expect(error.message.contains("--trusted-proxy"))
        } catch { Issue.record("\(error)") }
        #expect((try? IdentityThrottleOptions().validate()) != nil)
    }

    @Test func theCapWatchWarnsOnceEachTimeAPoolPassesEightyPercent() {
        let watch = IdentityCapWatch(cap: 10)
        // One registry scraped again and again, as a server's: a pool back under the mark
        // leaves it.
        let registry = MetricsRegistry()
        #expect(watch.threshold == 8)
        #expect(!watch.observe(pool: "p", records: 7))
        #expect(watch.observe(pool: "p", records: 8))
        #expect(!watch.observe(pool: "p", records: 9))
        #expect(registry.render(watch.refresh).contains("syncledger_identity_pool_records{pool=\"p\"} 9.0\n"))
        #expect(registry.render(watch.refresh).contains("syncledger_identity_pool_cap_warnings_total 1\n"))
        // Below the mark (identities deleted), then past it again: a second warning.
        #expect(!watch.observe(pool: "p", records: 5))
        #expect(!registry.render(watch.refresh).contains("pool=\"p\""))
        #expect(watch.observe(pool: "p", records: 8))
        #expect(registry.render(watch.refresh).contains("syncledger_identity_pool_cap_warnings_total 2\n"))
    }
}
