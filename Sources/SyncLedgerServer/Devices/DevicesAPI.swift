import Foundation
import HTTPTypes
import SyncLedger

/// The device registry's endpoints (`/devices/…`, docs/devices.md): device info and token
/// sync, login and logout, listing, and custom notifications. SigV4-signed like the Cognito
/// operations; the pool comes from an identity's credential, or — for the admin — from the
/// request.
/// The operations of `/devices` and `/messages`, as logs and metrics name them, with their
/// routes (`:code` is a device code).
enum RegistryOperation: String, Sendable, CaseIterable {
    case syncDevice = "SyncDevice"
    case syncDeviceToken = "SyncDeviceToken"
    case loginDevice = "LoginDevice"
    case logoutDevice = "LogoutDevice"
    case notifyDevices = "NotifyDevices"
    case listDevices = "ListDevices"
    case describeDevice = "DescribeDevice"
    case deleteDevice = "DeleteDevice"
    case sendMessage = "SendMessage"
    case receiveMessages = "ReceiveMessages"
    case acknowledgeMessages = "AcknowledgeMessages"
    case listMessageConsumers = "ListMessageConsumers"

    /// The operation's method and path.
    var route: (method: HTTPRequest.Method, path: String) {
        switch self {
        case .syncDevice: (.post, "/devices/sync")
        case .syncDeviceToken: (.post, "/devices/sync-token")
        case .loginDevice: (.post, "/devices/login")
        case .logoutDevice: (.post, "/devices/logout")
        case .notifyDevices: (.post, "/devices/notify")
        case .listDevices: (.get, "/devices")
        case .describeDevice: (.get, "/devices/:code")
        case .deleteDevice: (.delete, "/devices/:code")
        case .sendMessage: (.post, "/messages")
        case .receiveMessages: (.get, "/messages")
        case .acknowledgeMessages: (.post, "/messages/ack")
        case .listMessageConsumers: (.get, "/messages/consumers")
        }
    }

    /// Whether it is one of `/messages`.
    var isMessage: Bool { route.path.hasPrefix("/messages") }
}

extension CognitoAPI {
    /// Runs a `/devices` operation the router matched, its signature checked.
    /// Returns the answer and the identity involved (for the request log).
    func handleDevices(_ operation: RegistryOperation, _ context: APIRequest) async throws -> (WireResponse, String?) {
        let (query, request, credential) = (context.query, context.wire, try context.signer())
        let who = identityScope(credential)
        switch operation {
        case .syncDevice:
            try requireLeader("SyncDevice")
            let json = try body(request)
            let pool = try poolFor(credential, json["IdentityPoolId"])
            let code = try string(json["DeviceCode"], "DeviceCode")
            var info = DeviceInfo()
            if let text = try string(json["Platform"], "Platform") {
                guard let platform = Platform(rawValue: text) else {
                    throw WireError.invalidParameter("Platform must be one of \(Platform.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(text.prefix(40))\"")
                }
                info.platform = platform
            }
            info.osVersion = try string(json["OsVersion"], "OsVersion")
            info.appVersion = try string(json["AppVersion"], "AppVersion")
            info.model = try string(json["Model"], "Model")
            info.locale = try string(json["Locale"], "Locale")
            info.settings = try stringMap(json["Settings"], "Settings")
            let result = try await ledger.syncDevice(pool: pool, caller: registryCaller(credential), code: code, info: info)
            return (.json(deviceCodeBody(result)), who)
        case .syncDeviceToken:
            try requireLeader("SyncDeviceToken")
            let json = try body(request)
            let pool = try poolFor(credential, json["IdentityPoolId"])
            let code = try string(json["DeviceCode"], "DeviceCode", required: true)!
            let token = try string(json["Token"], "Token")
            try await ledger.syncToken(pool: pool, caller: registryCaller(credential), code: code, token: token)
            return (.json(deviceCodeBody(code)), who)
        case .loginDevice:
            try requireLeader("LoginDevice")
            guard case .identity(let poolText, let identityText) = credential.scope else {
                throw WireError.notAuthorized("a login is made with the credentials of the identity that logs in, not the admin's")
            }
            let json = try body(request)
            let code = try string(json["DeviceCode"], "DeviceCode", required: true)!
            let subscribeAll = try boolean(json["SubscribeAll"], "SubscribeAll")
            let device = try await ledger.login(pool: try IdentityPoolID(poolText), identity: try IdentityID(identityText), code: code, subscribeAll: subscribeAll)
            return (.json(deviceBody(device)), who)
        case .logoutDevice:
            try requireLeader("LogoutDevice")
            let json = try body(request)
            let pool = try poolFor(credential, json["IdentityPoolId"])
            let code = try string(json["DeviceCode"], "DeviceCode", required: true)!
            let caller = try registryCaller(credential)
            let device = try await ledger.logout(pool: pool, caller: caller, code: code)
            return (.json(deviceBody(device, redacted: caller.isCreatorOnly(of: device))), who)
        case .notifyDevices:
            try requireLeader("NotifyDevices")
            guard case .admin = credential.scope else {
                throw WireError.notAuthorized("NotifyDevices needs the developer (admin) credential")
            }
            let json = try body(request)
            let pool = try IdentityPoolID(try string(json["IdentityPoolId"], "IdentityPoolId", required: true)!)
            let identity = try IdentityID(try string(json["IdentityId"], "IdentityId", required: true)!)
            guard let data = try stringMap(json["Data"], "Data") else { throw WireError.invalidParameter("Data is required") }
            guard let push else {
                throw WireError(type: "InvalidConfigurationException", status: 400, message: "push delivery is off on this server (syncledger serve --no-push, or a follower): nothing can be sent")
            }
            let ledger = self.ledger
            let (id, notifications) = try await offPool { try ledger.customNotifications(pool: pool, identity: identity, data: data) }
            try await offPool { try push.enqueueCustom(notifications) }
            var w = JSONWriter()
            w.beginObject(); w.member("NotificationId", id); w.member("DeviceCount", int: notifications.count); w.endObject()
            return (.json(w), identity.rawValue)
        case .listDevices:
            let (pool, identity) = try identityFor(credential, query)
            let ledger = self.ledger
            let devices = try await offPool { try ledger.visibleDevices(pool: pool, identity: identity) }
            var w = JSONWriter(capacity: 128 + devices.count * 256)
            w.beginObject()
            w.member("IdentityPoolId", pool.rawValue)
            w.member("IdentityId", identity.rawValue)
            w.key("Devices"); w.beginArray()
            for device in devices { writeDevice(&w, device) }
            w.endArray()
            w.endObject()
            return (.json(w), identity.rawValue)
        case .describeDevice:
            let code = context.parameter("code") ?? ""
            let pool = try poolFor(credential, queryValue(query, "IdentityPoolId").map { .string($0) })
            try Ledger.validateDeviceCode(code)
            let caller = try registryCaller(credential)
            let ledger = self.ledger
            guard let device = try await offPool({ try ledger.device(pool: pool, id: code) }), caller.mayReach(device) else {
                throw WireError.notFound("no device with code \"\(code)\" in identity pool \(pool) that these credentials may use")
            }
            return (.json(deviceBody(device, redacted: caller.isCreatorOnly(of: device))), who)
        case .deleteDevice:
            let code = context.parameter("code") ?? ""
            try requireLeader("DeleteDevice")
            let pool = try poolFor(credential, queryValue(query, "IdentityPoolId").map { .string($0) })
            let caller = try registryCaller(credential)
            let device = try await ledger.removeDevice(pool: pool, caller: caller, code: code)
            return (.json(deviceBody(device, redacted: caller.isCreatorOnly(of: device))), who)
        default:
            throw WireError.unknownOperation("\(operation.rawValue) is not a device operation")
        }
    }

    /// The identity of an identity credential (for logs), nil for the admin.
    func identityScope(_ credential: Credential) -> String? {
        if case .identity(_, let identity) = credential.scope { return identity }
        return nil
    }

    func requireLeader(_ operation: String) throws {
        if let leader = followedLeader {
            throw WireError.notAuthorized("this server is a read-only follower of \(leader); send \(operation) to the leader")
        }
    }

    func registryCaller(_ credential: Credential) throws -> RegistryCaller {
        switch credential.scope {
        case .admin: return .admin(credential.accessKeyID)
        case .identity(_, let identity): return .identity(try IdentityID(identity))
        }
    }

    /// The pool of an identity credential; the admin names it (`IdentityPoolId`).
    func poolFor(_ credential: Credential, _ named: JSON?) throws -> IdentityPoolID {
        switch credential.scope {
        case .identity(let pool, _):
            if let text = try string(named, "IdentityPoolId"), text != pool {
                throw WireError.notAuthorized("access key \(credential.accessKeyID) may reach only identity pool \(pool)")
            }
            return try IdentityPoolID(pool)
        case .admin:
            guard let text = try string(named, "IdentityPoolId") else {
                throw WireError.invalidParameter("IdentityPoolId is required with the admin credential")
            }
            return try IdentityPoolID(text)
        }
    }

    /// The identity whose devices are listed: the caller's own, or — for the admin — the one
    /// named by `IdentityPoolId` and `IdentityId` in the query.
    func identityFor(_ credential: Credential, _ query: [(String, String)]) throws -> (IdentityPoolID, IdentityID) {
        switch credential.scope {
        case .identity(let pool, let identity):
            if let asked = queryValue(query, "IdentityId"), asked != identity {
                throw WireError.notAuthorized("access key \(credential.accessKeyID) may reach only identity \(identity)")
            }
            return (try IdentityPoolID(pool), try IdentityID(identity))
        case .admin:
            guard let pool = queryValue(query, "IdentityPoolId"), let identity = queryValue(query, "IdentityId") else {
                throw WireError.invalidParameter("IdentityPoolId and IdentityId are required with the admin credential")
            }
            return (try IdentityPoolID(pool), try IdentityID(identity))
        }
    }

    func boolean(_ value: JSON?, _ path: String) throws -> Bool? {
        switch value {
        case nil, .null?: return nil
        case .bool(let b)?: return b
        case let other?: throw WireError.invalidParameter("\(path) must be a boolean, not \(other.typeName)")
        }
    }

    /// A JSON object of strings (each key once), or nil when absent.
    func stringMap(_ value: JSON?, _ path: String) throws -> [String: String]? {
        switch value {
        case nil, .null?: return nil
        case .object(let members)?:
            var map: [String: String] = [:]
            for (key, item) in members {
                guard case .string(let text) = item else {
                    throw WireError.invalidParameter("\(path).\(key.prefix(40)) must be a string, not \(item.typeName)")
                }
                guard map.updateValue(text, forKey: key) == nil else {
                    throw WireError.invalidParameter("\(path) has the key \"\(key.prefix(40))\" twice")
                }
            }
            return map
        case let other?: throw WireError.invalidParameter("\(path) must be an object of strings, not \(other.typeName)")
        }
    }

    private func deviceCodeBody(_ code: String) -> JSONWriter {
        var w = JSONWriter()
        w.beginObject(); w.member("DeviceCode", code); w.endObject()
        return w
    }

    private func deviceBody(_ device: Device, redacted: Bool = false) -> JSONWriter {
        var w = JSONWriter()
        w.beginObject(); w.key("Device")
        if redacted { writeRedactedDevice(&w, device) } else { writeDevice(&w, device) }
        w.endObject()
        return w
    }

    /// A device as its creator sees it while another identity is logged in on it
    /// (``RegistryCaller/isCreatorOnly(of:)``): what the app reported about the hardware,
    /// that somebody is logged in, and `Redacted`; not who (for a guest identity its id is
    /// enough to get its credentials), nor the settings, the token state or when it changed.
    func writeRedactedDevice(_ w: inout JSONWriter, _ d: Device) {
        w.beginObject()
        w.member("DeviceCode", d.id)
        w.member("Platform", d.platform?.rawValue)
        w.member("OsVersion", d.osVersion)
        w.member("AppVersion", d.appVersion)
        w.member("Model", d.model)
        w.member("Locale", d.locale)
        w.member("LoggedIn", bool: true)
        w.member("Redacted", bool: true)
        w.member("CreationDate", date: d.created?.milliseconds)
        w.endObject()
    }

    /// A device as the API shows it: never its token (a token lets anyone who has the
    /// transport's key push to the device), only whether it has one.
    func writeDevice(_ w: inout JSONWriter, _ d: Device) {
        w.beginObject()
        w.member("DeviceCode", d.id)
        w.member("Platform", d.platform?.rawValue)
        w.member("OsVersion", d.osVersion)
        w.member("AppVersion", d.appVersion)
        w.member("Model", d.model)
        w.member("Locale", d.locale)
        if let settings = d.settings {
            w.key("Settings"); w.beginObject()
            for (k, v) in settings.sorted(by: { $0.key < $1.key }) { w.member(k, v) }
            w.endObject()
        }
        w.member("IdentityId", d.identity)
        w.member("LoggedIn", bool: d.isLoggedIn)
        w.member("SubscribeAll", bool: d.subscribesAll ?? false)
        w.member("HasToken", bool: d.token != nil)
        w.member("PushEnabled", bool: d.isEnabled)
        w.member("TokenDisabledReason", d.disabledReason)
        w.member("CreationDate", date: d.created?.milliseconds)
        w.member("LastModifiedDate", date: d.updated?.milliseconds)
        w.member("TokenRegisteredDate", date: d.registered?.milliseconds)
        w.endObject()
    }
}
