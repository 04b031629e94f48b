import Foundation
import Testing
@testable import LedgerStorage

/// A fresh directory under the system temp folder, removed when the test is done.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("ledgerstorage-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

private func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

@Suite struct EnvironmentTests {
    @Test func putGetDeleteAndCursorOrder() throws {
        try withTemporaryDirectory { dir in
            let env = try Environment(path: dir)
            let db = try env.openDatabase("t")
            try env.write { (txn) throws in
                for k in ["b", "a", "c"] { try txn.put(db, key: bytes(k), value: bytes(k.uppercased())) }
            }
            try env.read { (txn) throws in
                #expect(try txn.get(db, key: bytes("a")) == bytes("A"))
                #expect(try txn.get(db, key: bytes("zz")) == nil)
                #expect(try txn.count(db) == 3)
                let keys = try txn.withCursor(db) { cursor -> [String] in
                    var result: [String] = []
                    var pair = try cursor.first()
                    while let p = pair { result.append(String(decoding: p.key, as: UTF8.self)); pair = try cursor.next() }
                    return result
                }
                #expect(keys == ["a", "b", "c"])
                #expect(try txn.withCursor(db) { try $0.seek(atLeast: bytes("bb"))?.key } == bytes("c"))
                #expect(try txn.withCursor(db) { try $0.seek(atLeast: []) }?.key == bytes("a"))
            }
            try env.write { (txn) throws in #expect(try txn.delete(db, key: bytes("b"))); #expect(try !txn.delete(db, key: bytes("b"))) }
            try env.read { (txn) throws in #expect(try txn.count(db) == 2) }
        }
    }

    @Test func abortOnThrowLeavesNothing() throws {
        struct Boom: Error {}
        try withTemporaryDirectory { dir in
            let env = try Environment(path: dir)
            let db = try env.openDatabase("t")
            #expect(throws: Boom.self) {
                try env.write { (txn) throws in
                    try txn.put(db, key: bytes("x"), value: bytes("1"))
                    throw Boom()
                }
            }
            try env.read { (txn) throws in #expect(try txn.get(db, key: bytes("x")) == nil) }
        }
    }

    @Test func nestedTransactionAbortKeepsParent() throws {
        struct Boom: Error {}
        try withTemporaryDirectory { dir in
            let env = try Environment(path: dir)
            let db = try env.openDatabase("t")
            try env.write { (txn) throws in
                try txn.put(db, key: bytes("parent"), value: bytes("1"))
                try txn.nested { (child) throws in try child.put(db, key: bytes("kept"), value: bytes("2")) }
                _ = try? txn.nested { child -> Void in
                    try child.put(db, key: bytes("dropped"), value: bytes("3"))
                    throw Boom()
                }
            }
            try env.read { (txn) throws in
                #expect(try txn.get(db, key: bytes("parent")) == bytes("1"))
                #expect(try txn.get(db, key: bytes("kept")) == bytes("2"))
                #expect(try txn.get(db, key: bytes("dropped")) == nil)
            }
        }
    }

    @Test func appendRefusesOutOfOrderKeys() throws {
        try withTemporaryDirectory { dir in
            let env = try Environment(path: dir)
            let db = try env.openDatabase("t")
            try env.write { (txn) throws in try txn.put(db, key: [0, 2], value: [1], flags: .append) }
            #expect(throws: LMDBError.keyExists) {
                try env.write { (txn) throws in try txn.put(db, key: [0, 1], value: [1], flags: .append) }
            }
        }
    }

    @Test func mapGrowsWhenFull() throws {
        try withTemporaryDirectory { dir in
            var options = EnvironmentOptions()
            options.initialMapSize = 1 << 20  // 1 MiB
            let env = try Environment(path: dir, options: options)
            let db = try env.openDatabase("t")
            let value = [UInt8](repeating: 7, count: 1000)
            for batch in 0..<40 {  // ~4 MB in all
                try env.write { (txn) throws in
                    for i in 0..<100 { try txn.put(db, key: Array("k\(batch)-\(i)".utf8), value: value) }
                }
            }
            #expect(env.mapSize > 1 << 20)
            try env.read { (txn) throws in
                #expect(try txn.count(db) == 4000)
                #expect(try txn.get(db, key: Array("k39-99".utf8)) == value)
            }
        }
    }

    @Test func notAnLMDBFileIsATypedError() throws {
        try withTemporaryDirectory { dir in
            try Data(repeating: 0x42, count: 16384).write(to: URL(fileURLWithPath: dir + "/data.mdb"))
            #expect(throws: LMDBError.invalid) { _ = try Environment(path: dir) }
        }
    }

    @Test func missingDirectoryIsATypedError() throws {
        #expect(throws: LMDBError(rawValue: ENOENT)) { _ = try Environment(path: "/nonexistent/syncledger/dir") }
    }

    @Test func errorsDescribeThemselves() {
        #expect(LMDBError.mapFull.description.contains("MDB_MAP_FULL"))
        #expect(LMDBError.noSpace.isDiskFull)
        #expect(!LMDBError.notFound.isDiskFull)
    }
}

@Suite struct ZstdTests {
    @Test func roundTrip() throws {
        let input = Array((0..<20000).map { UInt8(truncatingIfNeeded: $0 % 17) })
        let compressed = try Zstd.compress(input, level: 3)
        #expect(compressed.count < input.count / 10)
        #expect(try Zstd.decompress(compressed, limit: input.count) == input)
    }

    @Test func refusesGarbageAndOversizedFrames() throws {
        #expect(throws: ZstdError.self) { _ = try Zstd.decompress([1, 2, 3, 4, 5, 6, 7, 8], limit: 100) }
        let compressed = try Zstd.compress(Array(repeating: 1, count: 1000))
        #expect(throws: ZstdError.self) { _ = try Zstd.decompress(compressed, limit: 999) }
        var corrupt = compressed
        corrupt[corrupt.count - 2] ^= 0xFF
        #expect(throws: (any Error).self) {
            let out = try Zstd.decompress(corrupt, limit: 1000)
            if out != Array(repeating: 1, count: 1000) { throw ZstdError(description: "changed") }
        }
    }
}
