/// The request and response bodies of the Cognito Sync REST API (2014-06-30), as botocore's
/// `cognito-sync` model defines them: members in AWS's PascalCase, dates as epoch seconds
/// (a JSON number, a fraction for the milliseconds). The server and the client library share
/// them, so both read and write the same JSON.
///
/// Decode with ``WireJSON/decode(_:from:)`` (a failure names the member: ``WireDecodingError``)
/// and encode with ``WireJSON/encode(_:)``; the shapes code their dates as epoch seconds whatever
/// the encoder's date strategy, so Foundation's own coders give the same JSON.
public enum CognitoSync {
    /// `/identitypools/{pool}/identities/{identity}/datasets`, each name percent-encoded as
    /// SigV4 encodes it (ListDatasets).
    public static func datasetsPath(pool: String, identity: String) -> String {
        "/identitypools/\(SigV4.uriEncode(pool))/identities/\(SigV4.uriEncode(identity))/datasets"
    }

    /// `…/datasets/{dataset}`: DescribeDataset, DeleteDataset, and UpdateRecords (POST).
    public static func datasetPath(pool: String, identity: String, dataset: String) -> String {
        datasetsPath(pool: pool, identity: identity) + "/" + SigV4.uriEncode(dataset)
    }

    /// `…/datasets/{dataset}/records`: ListRecords.
    public static func recordsPath(pool: String, identity: String, dataset: String) -> String {
        datasetPath(pool: pool, identity: identity, dataset: dataset) + "/records"
    }
}
