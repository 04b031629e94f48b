/// The wire vocabulary SyncLedger shares with its clients — SigV4, the names, ``Timestamp``,
/// ``RecordPatch``, ``LedgerError``, ``Limits`` and the Cognito Sync shapes — lives in the
/// `SyncLedgerWire` module, which the client library links without this domain. Re-exported
/// here, so that whoever imports `SyncLedger` has it as before.
@_exported public import SyncLedgerWire

extension StreamName {
    /// Whether it is one of SyncLedger's own streams rather than a Cognito dataset: a system
    /// stream of a pool (identity `_syncledger:0`) or an identity's reserved dataset (its
    /// messages). They count in no dataset limit or usage, and no push or event is made of them.
    public var isInternal: Bool { identity == Ledger.systemIdentity || dataset.isReserved }
}
