import Crypto
import SyncLedger

/// libFuzzer's entry point: every input must decode to a segment or be refused with a typed
/// error — never crash, hang or leak.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    // Reseal the trailing checksum on odd-length inputs, so mutations also reach the header and
    // entry checks behind it instead of stopping at the checksum.
    if bytes.count > 32, bytes.count % 2 == 1 {
        let body = Array(bytes.dropLast(32))
        bytes = body + Array(SHA256.hash(data: body))
    }
    do {
        let segment = try Segment.decode(bytes)
        // Whatever decodes must encode and decode to the same entries.
        let again = try Segment.decode(try segment.encoded())
        precondition(again == segment, "a decoded segment does not round-trip")
        precondition(again.entries.map(\.hash) == segment.entries.map(\.hash))
    } catch is LedgerError {
        // Refused with a typed error: the expected outcome for almost every input.
    } catch {
        preconditionFailure("an untyped error escaped the decoder: \(error)")
    }
    return 0
}
