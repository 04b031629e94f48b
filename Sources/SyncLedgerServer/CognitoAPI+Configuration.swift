import Foundation
import SyncLedger

/// Pool configuration on the wire: parsing PushSync and CognitoStreams, checking ARNs, and the answer's shape.
extension CognitoAPI {
    // MARK: Configuration

    func pushSync(_ value: JSON?) throws -> PushSyncConfiguration? {
        guard let value, value != .null else { return nil }
        guard case .object = value else { throw WireError.invalidParameter("PushSync must be an object, not \(value.typeName)") }
        var arns: [String]?
        switch value["ApplicationArns"] {
        case nil, .null?: break
        case .array(let items)?:
            arns = try items.enumerated().map { i, item in
                let arn = try string(item, "PushSync.ApplicationArns[\(i)]", required: true)!
                guard matchesApplicationArn(arn) else {
                    throw WireError.invalidParameter("PushSync.ApplicationArns[\(i)] \"\(arn.prefix(80))\" must match arn:aws:sns:[-0-9a-z]+:\\d+:app/[A-Z_]+/[a-zA-Z0-9_.-]+")
                }
                return arn
            }
        case let other?: throw WireError.invalidParameter("PushSync.ApplicationArns must be an array, not \(other.typeName)")
        }
        let role = try string(value["RoleArn"], "PushSync.RoleArn")
        if let role { try checkRoleArn(role, "PushSync.RoleArn") }
        return PushSyncConfiguration(applicationArns: arns, roleArn: role)
    }

    func cognitoStreams(_ value: JSON?) throws -> StreamsConfiguration? {
        guard let value, value != .null else { return nil }
        guard case .object = value else { throw WireError.invalidParameter("CognitoStreams must be an object, not \(value.typeName)") }
        let name = try string(value["StreamName"], "CognitoStreams.StreamName")
        if let name, !(1...128).contains(name.count) { throw WireError.invalidParameter("CognitoStreams.StreamName must be 1-128 characters") }
        let role = try string(value["RoleArn"], "CognitoStreams.RoleArn")
        if let role { try checkRoleArn(role, "CognitoStreams.RoleArn") }
        let status = try string(value["StreamingStatus"], "CognitoStreams.StreamingStatus")
        if let status, status != "ENABLED", status != "DISABLED" {
            throw WireError.invalidParameter("CognitoStreams.StreamingStatus must be ENABLED or DISABLED, not \"\(status.prefix(40))\"")
        }
        return StreamsConfiguration(streamName: name, roleArn: role, streamingStatus: status)
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

    func configurationBody(_ pool: IdentityPoolID, _ config: PoolConfiguration) -> JSONWriter {
        var w = JSONWriter()
        w.beginObject()
        w.member("IdentityPoolId", pool.rawValue)
        if let push = config.pushSync {
            w.key("PushSync"); w.beginObject()
            if let arns = push.applicationArns {
                w.key("ApplicationArns"); w.beginArray()
                for arn in arns { w.string(arn) }
                w.endArray()
            }
            w.member("RoleArn", push.roleArn)
            w.endObject()
        }
        if let streams = config.cognitoStreams {
            w.key("CognitoStreams"); w.beginObject()
            w.member("StreamName", streams.streamName)
            w.member("RoleArn", streams.roleArn)
            w.member("StreamingStatus", streams.streamingStatus)
            w.endObject()
        }
        w.endObject()
        return w
    }
}
