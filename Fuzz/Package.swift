// swift-tools-version: 6.1
import PackageDescription

// A libFuzzer target for the segment decoder. Build and run it with:
//   cd Fuzz && swift build -c release --sanitize=fuzzer
//   .build/release/SegmentFuzzer -max_total_time=60 corpus/
// `tools/fuzz` does both and seeds the corpus from a real segment.
let package = Package(
    name: "SyncLedgerFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "SyncLedger", path: "../"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
    ],
    targets: [
        .executableTarget(
            name: "SegmentFuzzer",
            dependencies: [.product(name: "SyncLedger", package: "SyncLedger"), .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
    ]
)
