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

    /// Matches `method` and the decoded path segments against the model's request URIs.
    static func match(method: String, segments: [String]) -> Route? {
        guard segments.first == "identitypools" else { return nil }
        let s = Array(segments.dropFirst())
        switch (method, s.count) {
        case ("GET", 0): return Route(operation: .listIdentityPoolUsage)
        case ("GET", 1): return Route(operation: .describeIdentityPoolUsage, pool: s[0])
        default: break
        }
        guard s.count >= 2 else { return nil }
        let pool = s[0]
        if s.count == 2 {
            switch (method, s[1]) {
            case ("POST", "bulkpublish"): return Route(operation: .bulkPublish, pool: pool)
            case ("POST", "getBulkPublishDetails"): return Route(operation: .getBulkPublishDetails, pool: pool)
            case ("GET", "events"): return Route(operation: .getCognitoEvents, pool: pool)
            case ("POST", "events"): return Route(operation: .setCognitoEvents, pool: pool)
            case ("GET", "configuration"): return Route(operation: .getIdentityPoolConfiguration, pool: pool)
            case ("POST", "configuration"): return Route(operation: .setIdentityPoolConfiguration, pool: pool)
            default: return nil
            }
        }
        if s[1] == "identity", s.count == 4, s[3] == "device", method == "POST" {
            return Route(operation: .registerDevice, pool: pool, identity: s[2])
        }
        guard s[1] == "identities" else { return nil }
        let identity = s[2]
        switch (method, s.count) {
        case ("GET", 3): return Route(operation: .describeIdentityUsage, pool: pool, identity: identity)
        case ("GET", 4) where s[3] == "datasets": return Route(operation: .listDatasets, pool: pool, identity: identity)
        default: break
        }
        guard s.count >= 5, s[3] == "datasets" else { return nil }
        let dataset = s[4]
        switch (method, s.count) {
        case ("GET", 5): return Route(operation: .describeDataset, pool: pool, identity: identity, dataset: dataset)
        case ("POST", 5): return Route(operation: .updateRecords, pool: pool, identity: identity, dataset: dataset)
        case ("DELETE", 5): return Route(operation: .deleteDataset, pool: pool, identity: identity, dataset: dataset)
        case ("GET", 6) where s[5] == "records": return Route(operation: .listRecords, pool: pool, identity: identity, dataset: dataset)
        case ("POST", 7) where s[5] == "subscriptions":
            return Route(operation: .subscribeToDataset, pool: pool, identity: identity, dataset: dataset, deviceID: s[6])
        case ("DELETE", 7) where s[5] == "subscriptions":
            return Route(operation: .unsubscribeFromDataset, pool: pool, identity: identity, dataset: dataset, deviceID: s[6])
        default: return nil
        }
    }
}
