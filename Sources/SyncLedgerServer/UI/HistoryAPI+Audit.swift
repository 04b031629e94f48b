import Foundation
import SyncLedger

/// The history browser's diff, dataset-as-of and status answers (see ``handleHistoryUI``).
extension CognitoAPI {
    /// `diff?pool&identity&dataset&from=N[&to=N]`: `{"From", "To", "Lines": [{"Key", "Change",
    /// "Before"|"BeforeErased", "After"|"AfterErased", "SyncCount", "Time", "Author", "Device"}],
    /// "More"}` — the records whose values differ between the two sync counts, in key order.
    func writeDiff(_ query: [(String, String)], to w: inout JSONWriter) async throws {
        let stream = try uiStream(query)
        guard let from = try queryInt(query, "from", range: 0...Int64.max).map(UInt64.init) else { throw WireError.invalidParameter("from is required") }
        let to = try queryInt(query, "to", range: 0...Int64.max).map(UInt64.init)
        let limit = Self.uiRecordLimit
        let ledger = self.ledger
        let (summary, lines, erasedBefore, erasedAfter) = try await offPool { () -> (DiffSummary, [DiffLine], Set<String>, Set<String>) in
            var lines: [DiffLine] = []
            let summary = try ledger.diff(stream, from: .syncCount(from), to: to.map { .syncCount($0) }) { line in
                lines.append(line)
                return lines.count <= limit
            }
            // A value a redaction erased replays as the empty string: which keys it was.
            return (summary, lines, try Self.erasedKeys(ledger, stream, at: summary.fromSyncCount),
                    try Self.erasedKeys(ledger, stream, at: summary.toSyncCount))
        }
        w.beginObject()
        w.member("From", int: summary.fromSyncCount)
        w.member("To", int: summary.toSyncCount)
        w.key("Lines"); w.beginArray()
        for line in lines.prefix(limit) {
            w.beginObject()
            w.member("Key", line.key)
            w.member("Change", line.change.rawValue)
            if erasedBefore.contains(line.key) { w.member("BeforeErased", bool: true) } else if let before = line.before { writeValue("Before", before, to: &w) }
            if erasedAfter.contains(line.key) { w.member("AfterErased", bool: true) } else if let after = line.after { writeValue("After", after, to: &w) }
            writeOrigin(line.origin, to: &w)
            w.endObject()
        }
        w.endArray()
        w.member("More", bool: lines.count > limit)
        w.endObject()
    }

    /// The keys whose value at `syncCount` a redaction erased (0: none).
    private static func erasedKeys(_ ledger: Ledger, _ stream: StreamName, at syncCount: UInt64) throws -> Set<String> {
        var keys = Set<String>()
        guard syncCount > 0 else { return keys }
        try ledger.blame(stream, at: .syncCount(syncCount)) { line in
            if line.erased { keys.insert(line.key) }
            return true
        }
        return keys
    }

    /// `dataset?pool&identity&dataset[&syncCount=N]` (default: now): `{"SyncCount", "Head",
    /// "Deleted", "Records": [{"Key", "Value"|"Erased", "SyncCount", "Time", "Author", "Device"}],
    /// "More"}` — each record with the entry that last set it.
    func writeDatasetAsOf(_ query: [(String, String)], to w: inout JSONWriter) async throws {
        let stream = try uiStream(query)
        let point = try queryInt(query, "syncCount", range: 0...Int64.max).map(UInt64.init)
        let limit = Self.uiRecordLimit
        let ledger = self.ledger
        let (head, summary, lines) = try await offPool { () -> (UInt64, BlameSummary, [BlameLine]) in
            let head = try ledger.browseStreamHead(stream)
            var lines: [BlameLine] = []
            // At the head, blame reads the stored view; at an earlier point it replays.
            let summary = try ledger.blame(stream, at: point.flatMap { $0 == head ? nil : .syncCount($0) }) { line in
                lines.append(line)
                return lines.count <= limit
            }
            return (head, summary, lines)
        }
        w.beginObject()
        w.member("SyncCount", int: summary.syncCount)
        w.member("Head", int: head)
        w.member("Deleted", bool: summary.deleted)
        w.key("Records"); w.beginArray()
        for line in lines.prefix(limit) {
            w.beginObject()
            w.member("Key", line.key)
            if line.erased { w.member("Erased", bool: true) } else if let value = line.value { writeValue("Value", value, to: &w) }
            writeOrigin(line.origin, to: &w)
            w.endObject()
        }
        w.endArray()
        w.member("More", bool: lines.count > limit)
        w.endObject()
    }

    /// `status[?pool&identity&dataset]`: `{"Digest": {"LedgerId", "TreeSize", "RootHash",
    /// "Time", "KeyId", "Signature", "SignatureValid"}, "PublicKey", "Verify": {"Dataset",
    /// "Entries", "Valid", "Problem", "Offset", "Milliseconds"}}` — the ledger's latest signed
    /// digest (checked against its public key) and, when a dataset is named, that dataset's
    /// hash chain and views verified now (its cost follows the dataset's entries).
    func writeStatus(_ query: [(String, String)], to w: inout JSONWriter) async throws {
        let stream = queryValue(query, "pool") == nil ? nil : try uiStream(query)
        let ledger = self.ledger
        let (digest, key, report, elapsed) = try await offPool { () -> (SignedDigest, DigestPublicKey, VerificationReport?, Double) in
            let digest = try ledger.signedDigest()
            let key = try ledger.digestPublicKey
            let start = ContinuousClock.now
            let report = try stream.map { try ledger.verify(stream: $0) }
            let d = (ContinuousClock.now - start).components
            return (digest, key, report, Double(d.seconds) * 1000 + Double(d.attoseconds) / 1e15)
        }
        w.beginObject()
        w.key("Digest"); w.beginObject()
        w.member("LedgerId", digest.ledgerID)
        w.member("TreeSize", int: digest.treeSize)
        w.member("RootHash", SigV4.hex(digest.rootHash))
        w.member("Time", int: digest.time.milliseconds)
        w.member("KeyId", digest.keyID)
        w.member("Signature", Data(digest.signature).base64EncodedString())
        w.member("SignatureValid", bool: digest.isSigned(by: key))
        w.endObject()
        w.member("PublicKey", key.pem)
        if let report, let stream {
            w.key("Verify"); w.beginObject()
            w.member("Dataset", stream.description)
            w.member("Entries", int: report.entries)
            w.member("Valid", bool: report.isValid)
            w.member("Problem", report.problem?.message)
            w.member("Offset", int: report.problem?.offset)
            w.member("Milliseconds", int: Int(elapsed.rounded()))
            w.endObject()
        }
        w.endObject()
    }

    private func writeOrigin(_ origin: Attribution, to w: inout JSONWriter) {
        w.member("SyncCount", int: origin.syncCount)
        w.member("Time", int: origin.time.milliseconds)
        w.member("Author", origin.author)
        w.member("Device", origin.device)
    }
}
