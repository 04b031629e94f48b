import ArgumentParser
import Foundation
import SyncLedger

/// `syncledger ui-url`: a URL of the history browser presigned with the admin credential.
struct UIURL: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ui-url",
        abstract: "Print a URL that opens the history browser (/ui/), presigned with the admin credential.",
        discussion: """
        The server answers /ui/ only to a request signed with the admin credential: this prints a \
        URL signed with it (SigV4, presigned, valid --expires seconds), to open in a browser. The page \
        then asks for the admin access key and secret, and signs every data request itself. The \
        credential is $SYNCLEDGER_ACCESS_KEY_ID and $SYNCLEDGER_SECRET_ACCESS_KEY when both are set \
        (as the server takes them), else the admin credential the server generated in --data's secrets. \
        Nothing is sent anywhere: the URL is computed here. See docs/ui.md.
        """)
    @OptionGroup var data: DataDirectory
    @Option(help: "The server's base URL, as the browser will reach it (scheme, host and port).") var url = "http://127.0.0.1:8080"
    @Option(help: "Seconds the URL stays valid, 1-3600.") var expires = 900
    @Option(help: "The region in the signature's scope (the server's --region).") var region = "us-east-1"

    func validate() throws {
        guard (1...3600).contains(expires) else { throw ValidationError("--expires must be 1-3600 seconds") }
        guard let parts = URLComponents(string: url), ["http", "https"].contains(parts.scheme ?? ""), parts.host?.isEmpty == false else {
            throw ValidationError("--url must be http://HOST[:PORT] or https://HOST[:PORT], not \(url)")
        }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let accessKeyID: String
        let secret: String
        if let id = environment["SYNCLEDGER_ACCESS_KEY_ID"], !id.isEmpty, let s = environment["SYNCLEDGER_SECRET_ACCESS_KEY"], !s.isEmpty {
            (accessKeyID, secret) = (id, s)
        } else {
            let ledger = try data.open()
            defer { ledger.close() }
            guard let id = try ledger.secrets.generatedAdminAccessKeyID(), let credential = try ledger.secrets.credential(accessKeyID: id) else {
                throw ValidationError("no admin credential: set SYNCLEDGER_ACCESS_KEY_ID and SYNCLEDGER_SECRET_ACCESS_KEY, or start the server once so that it generates one in \(data.data)")
            }
            (accessKeyID, secret) = (credential.accessKeyID, credential.secretAccessKey)
        }
        print(Self.presign(base: url, accessKeyID: accessKeyID, secret: secret, region: region, expires: expires, date: Date()))
    }

    /// `base` + `/ui/?X-Amz-…`: a SigV4 presigned GET, signing the host header only (as the
    /// browser sends it: the port left out when it is the scheme's default).
    static func presign(base: String, accessKeyID: String, secret: String, region: String, expires: Int, date: Date) -> String {
        let parts = URLComponents(string: base)!
        let defaultPort = parts.scheme == "https" ? 443 : 80
        var host = parts.host!
        if host.contains(":") { host = "[\(host)]" }
        if let port = parts.port, port != defaultPort { host += ":\(port)" }
        let amzDate = SigV4.amzDate(date)
        let day = String(amzDate.prefix(8))
        let service = "cognito-sync"
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let path = "/ui/"
        var pairs = [
            ("X-Amz-Algorithm", SigV4.algorithm), ("X-Amz-Credential", "\(accessKeyID)/\(scope)"),
            ("X-Amz-Date", amzDate), ("X-Amz-Expires", String(expires)), ("X-Amz-SignedHeaders", "host"),
        ]
        let query = SigV4.canonicalQuery(pairs)
        let canonical = SigV4.canonicalRequest(method: "GET", canonicalURI: SigV4.canonicalURI(rawPath: path), canonicalQuery: query,
                                               headers: [("host", host)], signedHeaders: ["host"], payloadHash: "UNSIGNED-PAYLOAD")
        let signature = SigV4.signature(secret: secret, date: day, region: region, service: service,
                                        stringToSign: SigV4.stringToSign(amzDate: amzDate, scope: scope, canonicalRequest: canonical))
        pairs.append(("X-Amz-Signature", signature))
        let scheme = parts.scheme!
        return "\(scheme)://\(host)\(path)?" + SigV4.canonicalQuery(pairs)
    }
}
