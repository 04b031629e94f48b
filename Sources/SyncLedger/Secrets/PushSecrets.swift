import Foundation
import LedgerStorage

/// How one push application (an SNS platform application ARN in a pool's
/// `PushSync.ApplicationArns`, as Cognito names them) is delivered, with its secrets. Kept in
/// the ``SecretStore``: never in the ledger, never replicated, exported or logged.
public struct PushTransportConfiguration: Sendable, Equatable, Codable {
    /// The application ARN it serves, `arn:aws:sns:REGION:ACCOUNT:app/PLATFORM/NAME`.
    public var arn: String
    /// How it is delivered.
    public var kind: PushTransportKind
    /// APNs: the `.p8` signing key (PKCS#8 PEM, P-256).
    public var apnsKey: String?
    /// APNs: the key's 10-character id (the JWT's `kid`).
    public var apnsKeyID: String?
    /// APNs: the team id (the JWT's `iss`).
    public var apnsTeamID: String?
    /// APNs: the app's bundle id (`apns-topic`).
    public var apnsTopic: String?
    /// FCM: the service-account JSON file's contents.
    public var fcmServiceAccount: String?
    /// Webhook: where notifications are POSTed.
    public var webhookURL: String?
    /// Webhook: the HMAC-SHA256 signing secret.
    public var webhookSecret: String?
    /// When it was configured.
    public var configured: Timestamp

    /// A configuration of `kind` for `arn`; fill in the fields of that kind.
    public init(arn: String, kind: PushTransportKind, configured: Timestamp = .now) {
        self.arn = arn
        self.kind = kind
        self.configured = configured
    }

    /// The platform an application ARN names (`…:app/GCM/MyApp` → GCM), or nil when it is not
    /// an SNS platform application ARN of a platform Cognito knows.
    public static func platform(ofARN arn: String) -> Platform? {
        let parts = arn.split(separator: ":", maxSplits: 5, omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "arn", parts[2] == "sns", arn.utf8.count <= 2048 else { return nil }
        let resource = parts[5].split(separator: "/", omittingEmptySubsequences: false)
        guard resource.count == 3, resource[0] == "app", !resource[2].isEmpty else { return nil }
        return Platform(rawValue: String(resource[1]))
    }

    /// What may be shown of it: the kind, the ARN and the non-secret fields; never a key or a
    /// secret (the webhook secret shows as its length).
    public var redacted: [String: String] {
        var fields = ["arn": arn, "kind": kind.rawValue, "configured": configured.description]
        if let apnsKeyID { fields["keyId"] = apnsKeyID }
        if let apnsTeamID { fields["teamId"] = apnsTeamID }
        if let apnsTopic { fields["topic"] = apnsTopic }
        if let account = fcmServiceAccount.flatMap(FCMServiceAccount.init(json:)) {
            fields["projectId"] = account.projectID
            fields["clientEmail"] = account.clientEmail
        }
        if let webhookURL { fields["url"] = webhookURL }
        return fields
    }
}

/// The fields of a Google service-account key file that the OAuth grant needs.
public struct FCMServiceAccount: Sendable, Equatable {
    /// `project_id`: the FCM project messages are sent in.
    public var projectID: String
    /// `client_email`: the JWT's `iss`.
    public var clientEmail: String
    /// `private_key`: RSA, PKCS#8 PEM.
    public var privateKey: String
    /// `private_key_id`: the JWT's `kid`.
    public var privateKeyID: String?
    /// `token_uri`: where the grant is sent.
    public var tokenURI: String

    /// Parses a service-account JSON file; nil when a required field is missing.
    public init?(json: String) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
              let project = object["project_id"] as? String, let email = object["client_email"] as? String,
              let key = object["private_key"] as? String, !project.isEmpty, !email.isEmpty, key.contains("PRIVATE KEY")
        else { return nil }
        projectID = project
        clientEmail = email
        privateKey = key
        privateKeyID = object["private_key_id"] as? String
        tokenURI = (object["token_uri"] as? String) ?? "https://oauth2.googleapis.com/token"
    }
}

extension SecretStore {
    /// Stores (replacing) the transport of an application ARN.
    public func storePushTransport(_ configuration: PushTransportConfiguration) throws {
        let bytes = Array(try JSONEncoder().encode(configuration))
        try write { txn in try txn.put(push, key: Array(configuration.arn.utf8), value: bytes) }
    }

    /// The transport configured for an application ARN, or nil.
    public func pushTransport(arn: String) throws -> PushTransportConfiguration? {
        try read { txn in try txn.get(push, key: Array(arn.utf8)) }.map { bytes in
            do { return try JSONDecoder().decode(PushTransportConfiguration.self, from: Data(bytes)) } catch {
                throw LedgerError(.corruptData, "the push transport of \(arn) does not decode")
            }
        }
    }

    /// Every configured push transport, by ARN.
    public func pushTransports() throws -> [PushTransportConfiguration] {
        try read { txn in
            try txn.withCursor(push) { cursor in
                var result: [PushTransportConfiguration] = []
                var pair = try cursor.first()
                while let current = pair {
                    if let c = try? JSONDecoder().decode(PushTransportConfiguration.self, from: Data(current.value)) { result.append(c) }
                    pair = try cursor.next()
                }
                return result
            }
        }
    }

    /// Removes the transport of an application ARN.
    /// - Throws: `.notFound` when none is configured.
    public func removePushTransport(arn: String) throws {
        guard try write({ txn in try txn.delete(push, key: Array(arn.utf8)) }) else {
            throw LedgerError(.notFound, "no push transport is configured for \(arn)")
        }
    }
}
