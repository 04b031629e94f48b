import HTTPTypes
import Hummingbird

/// The 17 operations of Cognito Sync 2014-06-30, as botocore's model names them.
public enum CognitoOperation: String, Sendable, CaseIterable {
    case bulkPublish = "BulkPublish"
    case deleteDataset = "DeleteDataset"
    case describeDataset = "DescribeDataset"
    case describeIdentityPoolUsage = "DescribeIdentityPoolUsage"
    case describeIdentityUsage = "DescribeIdentityUsage"
    case getBulkPublishDetails = "GetBulkPublishDetails"
    case getCognitoEvents = "GetCognitoEvents"
    case getIdentityPoolConfiguration = "GetIdentityPoolConfiguration"
    case listDatasets = "ListDatasets"
    case listIdentityPoolUsage = "ListIdentityPoolUsage"
    case listRecords = "ListRecords"
    case registerDevice = "RegisterDevice"
    case setCognitoEvents = "SetCognitoEvents"
    case setIdentityPoolConfiguration = "SetIdentityPoolConfiguration"
    case subscribeToDataset = "SubscribeToDataset"
    case unsubscribeFromDataset = "UnsubscribeFromDataset"
    case updateRecords = "UpdateRecords"

    /// Operations that change nothing (a read-only follower serves these).
    var isRead: Bool {
        switch self {
        case .describeDataset, .describeIdentityPoolUsage, .describeIdentityUsage, .getBulkPublishDetails, .getCognitoEvents,
             .getIdentityPoolConfiguration, .listDatasets, .listIdentityPoolUsage, .listRecords: true
        default: false
        }
    }

    /// Operations on one identity's data, which that identity's credential may call; the
    /// others are pool-level and need the admin credential.
    var isIdentityLevel: Bool {
        switch self {
        case .deleteDataset, .describeDataset, .describeIdentityUsage, .listDatasets, .listRecords,
             .registerDevice, .subscribeToDataset, .unsubscribeFromDataset, .updateRecords: true
        default: false
        }
    }
}

/// A request matched to an operation, with its path parameters (percent-decoded, not yet
/// validated).
struct Route {
    let operation: CognitoOperation
    var pool: String?
    var identity: String?
    var dataset: String?
    var deviceID: String?

    /// The model's request URIs, as the router's paths: `:pool`, `:identity`, `:dataset` and
    /// `:device` are the path parameters.
    static let table: [(method: HTTPRequest.Method, path: String, operation: CognitoOperation)] = [
        (.get, "/identitypools", .listIdentityPoolUsage),
        (.get, "/identitypools/:pool", .describeIdentityPoolUsage),
        (.post, "/identitypools/:pool/bulkpublish", .bulkPublish),
        (.post, "/identitypools/:pool/getBulkPublishDetails", .getBulkPublishDetails),
        (.get, "/identitypools/:pool/events", .getCognitoEvents),
        (.post, "/identitypools/:pool/events", .setCognitoEvents),
        (.get, "/identitypools/:pool/configuration", .getIdentityPoolConfiguration),
        (.post, "/identitypools/:pool/configuration", .setIdentityPoolConfiguration),
        (.post, "/identitypools/:pool/identity/:identity/device", .registerDevice),
        (.get, "/identitypools/:pool/identities/:identity", .describeIdentityUsage),
        (.get, "/identitypools/:pool/identities/:identity/datasets", .listDatasets),
        (.get, "/identitypools/:pool/identities/:identity/datasets/:dataset", .describeDataset),
        (.post, "/identitypools/:pool/identities/:identity/datasets/:dataset", .updateRecords),
        (.delete, "/identitypools/:pool/identities/:identity/datasets/:dataset", .deleteDataset),
        (.get, "/identitypools/:pool/identities/:identity/datasets/:dataset/records", .listRecords),
        (.post, "/identitypools/:pool/identities/:identity/datasets/:dataset/subscriptions/:device", .subscribeToDataset),
        (.delete, "/identitypools/:pool/identities/:identity/datasets/:dataset/subscriptions/:device", .unsubscribeFromDataset),
    ]

    /// The route of `operation` with the parameters the router matched.
    init(_ operation: CognitoOperation, _ context: APIRequest) {
        self.init(operation: operation, pool: context.parameter("pool"), identity: context.parameter("identity"),
                  dataset: context.parameter("dataset"), deviceID: context.parameter("device"))
    }

    init(operation: CognitoOperation, pool: String? = nil, identity: String? = nil, dataset: String? = nil, deviceID: String? = nil) {
        self.operation = operation
        self.pool = pool
        self.identity = identity
        self.dataset = dataset
        self.deviceID = deviceID
    }
}
