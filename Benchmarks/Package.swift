// swift-tools-version: 6.1
import PackageDescription

/// SwiftPM names a path dependency after its directory, so the main package's identity is the
/// name of the directory this one sits in (`main` in /work/main, but a clone may differ).
let ledgerPackage: String = {
    let parent = Context.packageDirectory.split(separator: "/").dropLast().last
    return parent.map { String($0).lowercased() } ?? "syncledger"
}()

/// The SyncLedger benchmark suite, a package of its own so that the main package does not depend
/// on ordo-one/benchmark. Run it with `tools/bench` (or, from this directory,
/// `swift package --disable-sandbox benchmark`).
///
/// Each benchmark target lives in `Benchmarks/<Name>/` and is an executable target using the
/// `BenchmarkPlugin`, as ordo-one/benchmark expects.
let package = Package(
    name: "SyncLedgerBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../"),
        // The malloc interposer is the only trait: the default set would also enable the Linux
        // Swift 6.3 runtime interposer, which pulls in a package we do not need.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // The write path: Ledger.updateRecords with 1 and 64 callers, durable and fast, beside
        // raw LMDB baselines doing the same commits without the ledger.
        .executableTarget(
            name: "WritePath",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "SyncLedger", package: ledgerPackage),
                .product(name: "LedgerStorage", package: ledgerPackage),
            ],
            path: "Benchmarks/WritePath",
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
    ]
)
