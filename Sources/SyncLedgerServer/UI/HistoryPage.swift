import Crypto
import Foundation
import SyncLedger

/// The history browser at `/ui/`: one HTML document with its style sheet and script inline,
/// built into the server (nothing is fetched from elsewhere), holding no data.
///
/// No request to it is unsigned: the document itself opens only from a URL presigned with the
/// admin credential (`syncledger ui-url`), and the script signs every data request
/// (`/admin/ui/…`, see ``CognitoAPI/handleHistoryUI(_:query:request:credential:)``) with SigV4
/// from the admin key typed into its sign-in form. The Content-Security-Policy allows only this
/// script and style (by hash) and connections to this server. Docs: docs/ui.md.
enum HistoryPage {
    /// The path of the page.
    static let path = "/ui/"

    /// The script: the signer, then the views.
    static let script = scriptCore + "\n" + scriptViews

    /// The document served.
    static let html: [UInt8] = Array(
        template.replacingOccurrences(of: "<style>STYLE</style>", with: "<style>" + style + "</style>")
            .replacingOccurrences(of: "<script>SCRIPT</script>", with: "<script>" + script + "</script>").utf8)

    /// The Content-Security-Policy: the inline script and style by their SHA-256, requests to
    /// this origin only, no frames, no forms posted anywhere, no plug-ins.
    static let contentSecurityPolicy: String = {
        func hash(_ text: String) -> String { "'sha256-" + Data(SHA256.hash(data: Array(text.utf8))).base64EncodedString() + "'" }
        return "default-src 'none'; script-src \(hash(script)); style-src \(hash(style)); connect-src 'self'; img-src data:; "
            + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }()

    /// Headers of the page and of its refusals.
    static let headers: [(String, String)] = [
        ("content-security-policy", contentSecurityPolicy), ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"), ("referrer-policy", "no-referrer"), ("x-frame-options", "DENY"),
    ]

    /// A refusal a person reads in the browser.
    static func refusal(_ error: WireError) -> WireResponse {
        let hint = "\n\nThe history browser opens only from a URL presigned with the admin credential:\n  syncledger ui-url --data DIR --url http://HOST:PORT\n"
        return WireResponse(status: error.statusCode, headers: headers + [("content-type", "text/plain; charset=utf-8"), ("x-amzn-ErrorType", error.type)],
                            body: Array("\(error.type): \(error.message)\(hint)".utf8))
    }
}

extension CognitoAPI {
    /// `GET /ui/`: the history browser's document, for a URL presigned with the admin credential
    /// (or a request signed with it). Anything else gets a plain-text refusal.
    func handleHistoryPage(_ request: WireRequest) async -> (WireResponse, String, String?) {
        var response: WireResponse
        do {
            guard request.header("host") != nil else { throw WireError.invalidParameter("the request has no Host header") }
            guard request.method == "GET" || request.method == "HEAD" else { throw WireError.unknownOperation("the history browser answers GET only") }
            guard let query = SigV4.queryPairs(request.rawQuery) else {
                throw WireError.invalidParameter("the query string has a malformed percent-escape or is not UTF-8")
            }
            let credential = try authenticator.authenticate(request, queryPairs: query)
            guard credential.scope == .admin else {
                throw WireError.notAuthorized("the history browser needs the developer (admin) credential; \(credential.accessKeyID) is an identity's")
            }
            response = WireResponse(status: 200, headers: HistoryPage.headers + [("content-type", "text/html; charset=utf-8")],
                                    body: request.method == "HEAD" ? [] : HistoryPage.html)
        } catch {
            response = HistoryPage.refusal(WireError(any: error))
        }
        response.headers.append(("x-amzn-RequestId", RequestID.make()))
        return (response, "UI.Page", nil)
    }
}
