// swift-tools-version: 6.1
import PackageDescription

/// SwiftPM names a path dependency after its directory, so the main package's identity is the
/// name of the directory this one sits in (`main` in /work/main, but a clone may differ).
let ledgerPackage: String = {
    let parent = Context.packageDirectory.split(separator: "/").dropLast().last
    return parent.map { String($0).lowercased() } ?? "syncledger"
}()

/// The library products every benchmark target uses.
let ledgerProducts: [Target.Dependency] = [
    .product(name: "Benchmark", package: "benchmark"),
    .product(name: "SyncLedger", package: ledgerPackage),
    .product(name: "LedgerStorage", package: ledgerPackage),
    "BenchSupport",
]

/// The SyncLedger benchmark suite, a package of its own so that the main package does not depend
/// on ordo-one/benchmark. Run it with `tools/bench` (or, from this directory,
/// `swift package --disable-sandbox benchmark`).
///
/// Each benchmark target lives in `Benchmarks/<Name>/` and is an executable target using the
/// `BenchmarkPlugin`, as ordo-one/benchmark expects. Code they share lives in `Support/`.
/// Not a benchmark: `Profile` runs one replication phase (pull, encode, decode, merge) in a loop
/// for `perf record` (see tools/profile). The benchmark plugin would try to run every executable
/// target as a benchmark, so it is only declared when SYNCLEDGER_PROFILE is set.
let profileTargets: [Target] = Context.environment["SYNCLEDGER_PROFILE"] == nil ? [] : [
    .executableTarget(
        name: "Profile",
        dependencies: [
            .product(name: "SyncLedger", package: ledgerPackage),
            .product(name: "LedgerStorage", package: ledgerPackage),
            "BenchSupport",
        ],
        path: "Profile"
    ),
]

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
        // SQLite from the system (Debian: libsqlite3-dev), for the peer baseline of the merge.
        .systemLibrary(
            name: "CSQLite",
            path: "Support/CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // Fixture helpers, generated data, shared artifacts and the measured-benchmark harness.
        .target(
            name: "BenchSupport",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "SyncLedger", package: ledgerPackage),
            ],
            path: "Support/BenchSupport",
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        // The write path: Ledger.updateRecords with 1 and 64 callers, durable and fast, beside
        // raw LMDB baselines doing the same commits without the ledger.
        .executableTarget(
            name: "WritePath",
            dependencies: ledgerProducts,
            path: "Benchmarks/WritePath",
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
        // Replication: merge (vs raw LMDB and SQLite), segment codec and wire ratio (vs bare
        // zstd), serving a pull, export of 1M entries, disk bytes per event.
        .executableTarget(
            name: "Replication",
            dependencies: ledgerProducts + ["CSQLite"],
            path: "Benchmarks/Replication",
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
        // Reads: listRecords after N, replay of a long stream.
        .executableTarget(
            name: "Reads",
            dependencies: ledgerProducts,
            path: "Benchmarks/Reads",
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")],
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
    ] + profileTargets
)
