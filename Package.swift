// swift-tools-version: 6.1
import PackageDescription

/// Settings every Swift target shares: Swift 6 language mode (strict concurrency) is the
/// tools-version default; these add the upcoming features we rely on.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "SyncLedger",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SyncLedger", targets: ["SyncLedger"]),
        .library(name: "SyncLedgerWire", targets: ["SyncLedgerWire"]),
        .library(name: "LedgerStorage", targets: ["LedgerStorage"]),
        .library(name: "SyncLedgerServer", targets: ["SyncLedgerServer"]),
        .library(name: "SyncLedgerClient", targets: ["SyncLedgerClient"]),
        .executable(name: "syncledger", targets: ["syncledger"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
    ],
    targets: [
        // C libraries from Debian's liblmdb-dev and libzstd-dev. Only LedgerStorage imports them.
        .systemLibrary(
            name: "CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        .systemLibrary(
            name: "CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"])]
        ),
        // The storage layer: the only code that touches C and unsafe pointers.
        .target(
            name: "LedgerStorage",
            dependencies: ["CLMDB", "CZstd", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // The wire vocabulary the server and the client share: SigV4, names, Timestamp,
        // RecordPatch and the Cognito Sync request and response shapes (docs/client.md).
        .target(
            name: "SyncLedgerWire",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // The domain: streams, log entries, views, Cognito semantics, replay, verify.
        // Re-exports SyncLedgerWire.
        .target(
            name: "SyncLedger",
            dependencies: [
                "SyncLedgerWire",
                "LedgerStorage",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        // A NATS client on SwiftNIO: core protocol, reconnect, request/reply, JetStream, KV
        // (docs/nats.md). Cluster mode commits each shard's log to JetStream through it.
        .target(
            name: "NATS",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The Cognito Sync REST API over the ledger: routes, SigV4, wire shapes, errors, metrics.
        .target(
            name: "SyncLedgerServer",
            dependencies: [
                "SyncLedger",
                "LedgerStorage",
                "NATS",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        // The client library: a local store synchronized with a server over the Cognito Sync API.
        .target(
            name: "SyncLedgerClient",
            dependencies: [
                "SyncLedgerWire",
                "LedgerStorage",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "syncledger",
            dependencies: [
                "SyncLedger",
                "LedgerStorage",
                "SyncLedgerServer",
                "SyncLedgerClient",
                "NATS",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The load tool: N identities through the Cognito sync loop over loopback.
        .executableTarget(
            name: "syncledger-load",
            dependencies: [
                "SyncLedgerClient",
                "LedgerStorage",
                "SyncLedger",
                "SyncLedgerServer",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The message benchmark's footprint half: idempotency keys after 1 M messages and their purge.
        .executableTarget(
            name: "message-footprint",
            dependencies: ["SyncLedger", "LedgerStorage"],
            swiftSettings: swiftSettings
        ),
        // The proof benchmark: digest and proof sizes and costs against the ledger's size.
        .executableTarget(
            name: "proof-bench",
            dependencies: ["SyncLedger"],
            swiftSettings: swiftSettings
        ),
        // The audit benchmark: blame and diff of one stream ÷ a raw scan of it, large and small ledgers.
        .executableTarget(
            name: "audit-bench",
            dependencies: ["SyncLedger"],
            swiftSettings: swiftSettings
        ),
        // A test helper: writes acknowledged updates until it is killed (the crash test).
        .executableTarget(
            name: "ledger-crash-writer",
            dependencies: ["SyncLedger"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncLedgerWireTests",
            dependencies: ["SyncLedgerWire"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "LedgerStorageTests",
            dependencies: ["LedgerStorage"],
            swiftSettings: swiftSettings
        ),
        // Fixtures shared by the test targets.
        .target(
            name: "SyncLedgerTestSupport",
            dependencies: ["SyncLedger"],
            path: "Tests/SyncLedgerTestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncLedgerServerTests",
            dependencies: [
                "SyncLedgerServer", "SyncLedger", "SyncLedgerClient", "SyncLedgerTestSupport", "NATS",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncLedgerTests",
            dependencies: ["SyncLedger", "LedgerStorage", "SyncLedgerTestSupport", .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "_CryptoExtras", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // The NATS client against real nats-server processes (a single server and a 3-node cluster).
        .testTarget(
            name: "NATSTests",
            dependencies: ["NATS", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncLedgerClientTests",
            dependencies: ["SyncLedgerClient", "SyncLedger", "SyncLedgerTestSupport"],
            swiftSettings: swiftSettings
        ),
    ]
)
