/// Request ids in UUID form (version 4, lower case), as Cognito's `x-amzn-RequestId`.
///
/// Made from the standard library's system generator (`getrandom(2)`), not Foundation's `UUID()`,
/// which on Linux opens, reads and closes `/dev/urandom` for each id: four system calls on every
/// request (measured: the most frequent system call of a server answering signed reads).
enum RequestID {
    /// A fresh id, e.g. `3f0c9a2e-5b1d-4c7e-9a41-0d2f6b8e1c55`.
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        let high = (generator.next() as UInt64) & ~0xF000 | 0x4000  // version 4
        let low = (generator.next() as UInt64) & ~(0xC000 << 48) | (0x8000 << 48)  // variant 10
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(36)
        func put(_ value: UInt64, nibbles: Int) {
            for i in stride(from: nibbles - 1, through: 0, by: -1) { out.append(digits[Int((value >> (UInt64(i) * 4)) & 0xF)]) }
        }
        put(high >> 32, nibbles: 8)
        out.append(UInt8(ascii: "-"))
        put(high >> 16, nibbles: 4)
        out.append(UInt8(ascii: "-"))
        put(high, nibbles: 4)
        out.append(UInt8(ascii: "-"))
        put(low >> 48, nibbles: 4)
        out.append(UInt8(ascii: "-"))
        put(low, nibbles: 12)
        return String(decoding: out, as: UTF8.self)
    }
}
