import Foundation
import SyncLedger

/// Pool configuration on the wire: parsing PushSync and CognitoStreams, checking ARNs, and the answer's shape.
extension CognitoAPI {
    // MARK: Configuration

    func pushSync(_ value: CognitoSync.PushSync?) throws -> PushSyncConfiguration? {
        guard let value else { return nil }
        for (i, arn) in (value.applicationArns ?? []).enumerated() where !matchesApplicationArn(arn) {
            throw WireError.invalidParameter("PushSync.ApplicationArns[\(i)] \"\(arn.prefix(80))\" must match arn:aws:sns:[-0-9a-z]+:\\d+:app/[A-Z_]+/[a-zA-Z0-9_.-]+")
        }
        if let role = value.roleArn { try checkRoleArn(role, "PushSync.RoleArn") }
        return PushSyncConfiguration(applicationArns: value.applicationArns, roleArn: value.roleArn)
    }

    func cognitoStreams(_ value: CognitoSync.CognitoStreams?) throws -> StreamsConfiguration? {
        guard let value else { return nil }
        if let name = value.streamName, !(1...128).contains(name.count) { throw WireError.invalidParameter("CognitoStreams.StreamName must be 1-128 characters") }
        if let role = value.roleArn { try checkRoleArn(role, "CognitoStreams.RoleArn") }
        if let status = value.streamingStatus, status != "ENABLED", status != "DISABLED" {
            throw WireError.invalidParameter("CognitoStreams.StreamingStatus must be ENABLED or DISABLED, not \"\(status.prefix(40))\"")
        }
        return StreamsConfiguration(streamName: value.streamName, roleArn: value.roleArn, streamingStatus: value.streamingStatus)
    }

    func checkRoleArn(_ arn: String, _ path: String) throws {
        // arn:aws:iam::\d+:role/.* , 20-2048 characters
        let parts = arn.split(separator: ":", maxSplits: 5, omittingEmptySubsequences: false)
        guard (20...2048).contains(arn.count), parts.count == 6, parts[0] == "arn", parts[1] == "aws", parts[2] == "iam", parts[3].isEmpty,
              !parts[4].isEmpty, parts[4].allSatisfy(\.isASCIIDigit), parts[5].hasPrefix("role/") else {
            throw WireError.invalidParameter("\(path) \"\(arn.prefix(80))\" must match arn:aws:iam::\\d+:role/.* (20-2048 characters)")
        }
    }

    func matchesApplicationArn(_ arn: String) -> Bool {
        let parts = arn.split(separator: ":", maxSplits: 5, omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "arn", parts[1] == "aws", parts[2] == "sns",
              !parts[3].isEmpty, parts[3].allSatisfy({ $0 == "-" || $0.isASCIIDigit || ("a"..."z").contains($0) }),
              !parts[4].isEmpty, parts[4].allSatisfy(\.isASCIIDigit) else { return false }
        let app = parts[5].split(separator: "/", omittingEmptySubsequences: false)
        return app.count == 3 && app[0] == "app"
            && !app[1].isEmpty && app[1].allSatisfy({ $0 == "_" || ("A"..."Z").contains($0) })
            && !app[2].isEmpty && app[2].allSatisfy({ $0.isASCIILetterOrDigit || $0 == "_" || $0 == "." || $0 == "-" })
    }

    func configurationBody(_ pool: IdentityPoolID, _ config: PoolConfiguration) -> CognitoSync.IdentityPoolConfigurationResponse {
        CognitoSync.IdentityPoolConfigurationResponse(
            identityPoolId: pool.rawValue,
            pushSync: config.pushSync.map { CognitoSync.PushSync(applicationArns: $0.applicationArns, roleArn: $0.roleArn) },
            cognitoStreams: config.cognitoStreams.map { CognitoSync.CognitoStreams(streamName: $0.streamName, roleArn: $0.roleArn, streamingStatus: $0.streamingStatus) })
    }
}
