"""A local stand-in for Firebase Cloud Messaging HTTP v1 and Google's OAuth 2 token endpoint.

Two endpoints on one HTTPS server (reference: client-push-identity-protocols.md §4, Google's
"Using OAuth 2.0 for Server to Server Applications" and the FCM v1 REST reference):

`POST /token` — the service-account JWT-bearer grant (RFC 7523), as oauth2.googleapis.com/token:
- `Content-Type: application/x-www-form-urlencoded`, each parameter once;
  `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` (else 400 unsupported_grant_type) and
  `assertion=<JWT>` (else 400 invalid_request).
- The JWT: header alg RS256 (typ, if present, "JWT"; kid, if present, the key file's
  private_key_id); claims iss = the account's client_email, scope (space-separated) containing
  https://www.googleapis.com/auth/firebase.messaging or …/auth/cloud-platform (else 400
  invalid_scope), aud = this endpoint's URL (`token_url`), integer iat and exp with
  iat ≤ now + skew, exp > now and exp − iat ≤ 3600 (else 400 invalid_grant); the RS256
  signature verifies with the account's public key (else 400 invalid_grant "Invalid JWT
  Signature.").
- Answers `{"access_token": "ya29.…", "expires_in": <expires_in>, "token_type": "Bearer"}`.

`POST /v1/projects/<project_id>/messages:send` — FCM HTTP v1:
- `Authorization: Bearer <access token this server issued and that has not expired>`, else 401
  UNAUTHENTICATED (with `WWW-Authenticate: Bearer …`). Another project → 403 PERMISSION_DENIED.
- `Content-Type: application/json`; body `{"message": Message, "validate_only"|"validateOnly":
  bool}`; an unknown field anywhere checked → 400 `Invalid JSON payload received. Unknown name …`.
- Message: exactly one of token/topic/condition; `data` a map string → string (a non-string value
  → 400 `Invalid value at 'message.data[<i>].value' (TYPE_STRING), <value>`); data keys must not be
  `from`, `message_type`, or start with `google`/`gcm`; keys + values ≤ 4096 bytes (2048 for a
  topic); `android.priority` "NORMAL" or "HIGH"; `android.ttl` a Duration string like "86400s"
  (at most 4 weeks); `android.data` like `data`; `apns.headers` a string map, `apns.payload` an
  object whose `aps` is an object. Stand-in extras: `apns.headers.apns-priority` must be "5" or
  "10", and "10" with apns-push-type background is refused.
- Success: 200 `{"name": "projects/<p>/messages/<id>"}` (validate_only: `…/fake_message_id`,
  recorded with cause "validate_only" but not in `received`).
- Errors: `{"error": {"code", "message", "status", "details": [...]}}`; FCM errors carry
  `{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": …}`, JSON type
  errors a `google.rpc.BadRequest` with fieldViolations.
"""

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import serialization

from . import certs, tokens
from ._server import BackgroundServer, DownSwitch, Recorder, Scripts
from .fcm_rules import (
    FCM_ERRORS,
    FCM_ERROR_TYPE,
    FCM_SCOPES,
    JWT_BEARER,
    MAX_ASSERTION_LIFETIME,
    _BAD_TIMEFRAME,
    _MISSING_CREDENTIAL,
    _Refusal,
    _SEND_PATH,
    _UNAUTHENTICATED,
    FcmMessageRules,
)


@dataclass
class FcmRequest:
    """One send request. `message` is the parsed `message` object (None if it did not parse);
    `status` what was answered, with `reason` the FCM errorCode (or the google.rpc status when
    there is none); `cause` is "accepted", "validate_only", "invalid" (`detail` says which rule),
    "unauthenticated", "scripted", "permanent" or "down"."""
    project_id: str
    message: object
    body: object
    raw: bytes
    headers: dict
    received_at: float
    http_version: str
    access_token: str = None
    name: str = None
    validate_only: bool = False
    status: int = 200
    reason: str = None
    cause: str = "accepted"
    detail: str = None
    response_body: dict = field(default_factory=dict)

    @property
    def accepted(self):
        return self.cause == "accepted"

    def _field(self, name):
        return self.message.get(name) if isinstance(self.message, dict) else None

    @property
    def token(self):
        return self._field("token")

    @property
    def topic(self):
        return self._field("topic")

    @property
    def condition(self):
        return self._field("condition")

    @property
    def data(self):
        return self._field("data")

    @property
    def android(self):
        return self._field("android")

    @property
    def apns(self):
        return self._field("apns")


@dataclass
class OAuthRequest:
    """One request to the token endpoint: `claims`/`header` of the assertion when it decoded,
    `access_token` when granted, else `error`/`error_description`."""
    assertion: str
    header: dict
    claims: dict
    received_at: float
    status: int = 200
    access_token: str = None
    error: str = None
    error_description: str = None

    @property
    def granted(self):
        return self.access_token is not None


class _OAuthRefusal(Exception):
    def __init__(self, status, error, description):
        super().__init__(description)
        self.status, self.error, self.description = status, error, description


class FcmStandIn(FcmMessageRules, Recorder, DownSwitch, BackgroundServer):
    """FCM v1 + the OAuth token endpoint on `https://127.0.0.1:<port>`.

    Constructor:
      project_id          the project in the send URL (and the default for make_service_account)
      client_email, public_key, private_key_id
                          a service account to trust (optional here; see trust_service_account and
                          make_service_account). public_key: RSAPublicKey or PEM.
      tls                 (cert path, key path); default a fresh self-signed certificate (`ca_file`)
      expires_in          the `expires_in` of granted access tokens (default 3599)
      clock_skew          seconds of slack for an assertion's iat in the future (default 10)

    Attributes: `url` (send API base: POST `<url>/v1/projects/<p>/messages:send`), `token_url`
    (`<url>/token`, the service account's token_uri), `ca_file`, `grants_issued`,
    `access_tokens`, `oauth_requests`.
    """

    _name = "FcmStandIn"

    def __init__(self, project_id="syncledger-push-test", client_email=None, public_key=None,
                 private_key_id=None, *, tls=True, expires_in=3599, clock_skew=10):
        Recorder.__init__(self)
        DownSwitch.__init__(self)
        BackgroundServer.__init__(self, tls=tls, alpn=("h2", "http/1.1"))
        self.project_id = project_id
        self.expires_in = expires_in
        self.clock_skew = clock_skew
        self._accounts = {}            # client_email → (public key, private_key_id or None)
        self._access = {}              # access token → expiry (time.monotonic())
        self._access_order = []
        self._oauth = []
        self._oauth_scripts = Scripts()
        self._scripts = Scripts()
        self._down_retry_after = None
        self._oauth_down = False
        self._grants = 0
        self._lock = threading.Lock()
        if client_email is not None:
            self.trust_service_account(client_email, public_key, private_key_id)

    # -- configuration ----------------------------------------------------------------------

    @property
    def token_url(self):
        """What goes into the service account's `token_uri` (and the assertion's `aud`)."""
        return self.url + "/token"

    def send_url(self, project_id=None):
        return f"{self.url}/v1/projects/{project_id or self.project_id}/messages:send"

    def trust_service_account(self, client_email, public_key, private_key_id=None):
        """Accepts assertions from `client_email` signed with `public_key`; if `private_key_id` is
        given, an assertion header `kid` must equal it."""
        if isinstance(public_key, (bytes, str)):
            public_key = serialization.load_pem_public_key(
                public_key.encode() if isinstance(public_key, str) else public_key)
        with self._lock:
            self._accounts[client_email] = (public_key, private_key_id)

    def make_service_account(self, directory, project_id=None, client_email=None, private_key=None):
        """Writes a service-account key file whose token_uri is this stand-in's `token_url`,
        trusts it, and returns certs.ServiceAccount(path, public_key, client_email, project_id).
        Call after start() (the URL needs the port). `private_key`: reuse this RSA key."""
        account = certs.make_fcm_service_account(directory, self.token_url, project_id or self.project_id,
                                                 client_email, private_key=private_key)
        key_id = certs.read_service_account(account.path)["private_key_id"]
        self.trust_service_account(account.client_email, account.public_key, key_id)
        return account

    def script(self, token=None, responses=()):
        """Queues answers for the next valid sends to `token` (a registration token, or a topic or
        condition string; None: any), one per request. Each is (status, errorCode) or (status,
        errorCode, extra) with extra keys `retry_after` (seconds or an HTTP date, sent as
        Retry-After), `message` (the error message) and `status` (the google.rpc status); or None
        to let one through. E.g. (404, "UNREGISTERED"), (503, "UNAVAILABLE", {"retry_after": 2})."""
        self._scripts.add(token, [None if r is None else _answer(r) for r in responses])

    def set_token_response(self, token, status=None, error_code=None, extra=None):
        """Answers every valid send to `token` this way until `set_token_response(token)`."""
        self._scripts.set_permanent(token, None if status is None else _answer((status, error_code, extra)))

    def script_oauth(self, responses=()):
        """Queues token-endpoint answers for the next valid grants: (status, error, description)
        e.g. (400, "invalid_grant", "Invalid JWT Signature."), (503, "temporarily_unavailable",
        "…"), or None to grant normally."""
        self._oauth_scripts.add(None, list(responses))

    def set_down(self, down=True, retry_after=None, oauth=False):
        """While down every send gets 503 UNAVAILABLE (with Retry-After if given), counted in
        `down_count`; with oauth=True the token endpoint answers 503 too."""
        DownSwitch.set_down(self, down)
        self._down_retry_after = retry_after if down else None
        self._oauth_down = bool(down and oauth)

    def expire_access_tokens(self):
        """Makes every access token issued so far expired (the next send with one gets 401)."""
        with self._lock:
            for token in self._access:
                self._access[token] = float("-inf")

    def reset(self):
        """Clears records, scripts, down state, counters and issued tokens (trusted accounts
        stay)."""
        self.clear()
        self._scripts.reset()
        self._oauth_scripts.reset()
        self.set_down(False)
        self.down_count = 0
        with self._cond:
            self._oauth.clear()
        with self._lock:
            self._access.clear()
            self._access_order.clear()
            self._grants = 0

    # -- what was seen ----------------------------------------------------------------------

    @property
    def grants_issued(self):
        """How many access tokens the token endpoint granted."""
        with self._lock:
            return self._grants

    @property
    def access_tokens(self):
        with self._lock:
            return list(self._access_order)

    @property
    def oauth_requests(self):
        with self._cond:
            return list(self._oauth)

    def wait_for_grants(self, count=1, timeout=10.0):
        """Blocks until `count` access tokens have been granted; returns those OAuthRequests."""
        return self._wait(self._oauth, "grants", lambda r: r.granted, count, timeout)

    # -- request handling -------------------------------------------------------------------

    def handle(self, request):
        if request.path == "/token":
            return self._handle_token(request)
        match = _SEND_PATH.match(request.path)
        if match:
            return self._handle_send(request, match.group(1))
        return _google_error(404, "NOT_FOUND", f"The requested URL {request.path} was not found on this server.")

    # OAuth ---------------------------------------------------------------------------------

    def _handle_token(self, request):
        now = time.time()
        record = OAuthRequest(assertion=None, header=None, claims=None, received_at=now)
        try:
            if self._oauth_down:
                raise _OAuthRefusal(503, "temporarily_unavailable", "The service is currently unavailable.")
            self._check_grant(request, record, now)
            answer, _ = self._oauth_scripts.take(None)
            if answer is not None:
                raise _OAuthRefusal(*answer)
        except _OAuthRefusal as refusal:
            record.status, record.error, record.error_description = refusal.status, refusal.error, refusal.description
            with self._cond:
                self._oauth.append(record)
                self._cond.notify_all()
            return refusal.status, [("content-type", "application/json; charset=utf-8"),
                                    ("cache-control", "no-store")], \
                json.dumps({"error": refusal.error, "error_description": refusal.description}).encode()
        access_token = "ya29.standin-" + secrets.token_urlsafe(32)
        with self._lock:
            self._access[access_token] = time.monotonic() + self.expires_in
            self._access_order.append(access_token)
            self._grants += 1
        record.access_token = access_token
        with self._cond:
            self._oauth.append(record)
            self._cond.notify_all()
        body = {"access_token": access_token, "expires_in": self.expires_in, "token_type": "Bearer"}
        return 200, [("content-type", "application/json; charset=utf-8"), ("cache-control", "no-store")], \
            json.dumps(body).encode()

    def _check_grant(self, request, record, now):
        if request.method != "POST":
            raise _OAuthRefusal(405, "invalid_request", f"Method {request.method} is not allowed; use POST.")
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise _OAuthRefusal(400, "invalid_request",
                                f"Content-Type must be application/x-www-form-urlencoded, not {content_type!r}")
        try:
            form = parse_qs(request.body.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
        except (ValueError, UnicodeDecodeError) as error:
            raise _OAuthRefusal(400, "invalid_request", f"Malformed form body: {error}") from None
        for name, values in form.items():
            if len(values) > 1:
                raise _OAuthRefusal(400, "invalid_request", f"Parameter {name} is repeated.")
        grant_type = form.get("grant_type", [None])[0]
        if grant_type is None:
            raise _OAuthRefusal(400, "invalid_request", "Missing required parameter: grant_type")
        if grant_type != JWT_BEARER:
            raise _OAuthRefusal(400, "unsupported_grant_type", f"Invalid grant_type: {grant_type}")
        assertion = form.get("assertion", [None])[0]
        if not assertion:
            raise _OAuthRefusal(400, "invalid_request", "Missing required parameter: assertion")
        record.assertion = assertion
        try:
            header, claims, _, _ = tokens.decode_unverified(assertion)
        except tokens.JwtError as error:
            raise _OAuthRefusal(400, "invalid_grant", f"Invalid JWT: {error}") from None
        record.header, record.claims = header, claims
        if header.get("alg") != "RS256":
            raise _OAuthRefusal(400, "invalid_grant", f"Invalid JWT: alg {header.get('alg')!r}, expected RS256")
        if "typ" in header and header["typ"] != "JWT":
            raise _OAuthRefusal(400, "invalid_grant", f"Invalid JWT: typ {header['typ']!r}")
        with self._lock:
            account = self._accounts.get(claims.get("iss"))
        if account is None:
            raise _OAuthRefusal(400, "invalid_grant", "Invalid grant: account not found")
        public_key, key_id = account
        if "kid" in header and key_id is not None and header["kid"] != key_id:
            raise _OAuthRefusal(400, "invalid_grant", "Invalid JWT Signature.")
        try:
            tokens.verify(assertion, public_key, "RS256")
        except tokens.JwtError:
            raise _OAuthRefusal(400, "invalid_grant", "Invalid JWT Signature.") from None
        if claims.get("aud") != self.token_url:
            raise _OAuthRefusal(400, "invalid_grant",
                                f"Invalid JWT: Failed audience check. The right audience is {self.token_url}")
        iat, exp = claims.get("iat"), claims.get("exp")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (iat, exp)) \
                or iat > now + self.clock_skew or exp <= now or exp <= iat or exp - iat > MAX_ASSERTION_LIFETIME:
            raise _OAuthRefusal(400, "invalid_grant", _BAD_TIMEFRAME)
        scope = claims.get("scope")
        if not isinstance(scope, str) or not set(scope.split(" ")) & set(FCM_SCOPES):
            raise _OAuthRefusal(400, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")

    # Send ----------------------------------------------------------------------------------

    def _handle_send(self, request, project_id):
        now = time.time()
        body = message = None
        try:
            body = json.loads(request.body) if request.body else None
            message = body.get("message") if isinstance(body, dict) else None
        except (ValueError, UnicodeDecodeError):
            pass
        record = FcmRequest(project_id=project_id, message=message, body=body, raw=request.body,
                            headers=request.headers, received_at=now, http_version=request.http_version)
        try:
            if self._check_down():
                headers = [] if self._down_retry_after is None else [("retry-after", str(self._down_retry_after))]
                raise _Refusal(503, "UNAVAILABLE", FCM_ERRORS["UNAVAILABLE"][2],
                               [{"@type": FCM_ERROR_TYPE, "errorCode": "UNAVAILABLE"}],
                               reason="UNAVAILABLE", headers=headers, cause="down")
            if request.method != "POST":
                raise _Refusal(405, "INVALID_ARGUMENT", f"Method {request.method} is not allowed; use POST.")
            self._check_bearer(request, record)
            if project_id != self.project_id:
                raise _Refusal(403, "PERMISSION_DENIED",
                               f"Permission 'cloudmessaging.messages.create' denied on resource "
                               f"'//cloudresourcemanager.googleapis.com/projects/{project_id}' (or it may not exist).")
            self._validate(request, body)
            target = message.get("token") or message.get("topic") or message.get("condition")
            record.validate_only = bool(body.get("validate_only", body.get("validateOnly", False)))
            answer, kind = self._scripts.take(target)
            if answer is not None:
                status, code, extra = answer
                raise _scripted(status, code, extra, kind)
        except _Refusal as refusal:
            cause = refusal.cause or ("unauthenticated" if refusal.status == 401 else "invalid")
            error = {"code": refusal.status, "message": refusal.message, "status": refusal.rpc_status}
            if refusal.details:
                error["details"] = refusal.details
            record.status, record.reason, record.cause = refusal.status, refusal.reason, cause
            record.detail, record.response_body = refusal.detail, {"error": error}
            self._record(record)
            return refusal.status, [("content-type", "application/json; charset=UTF-8"), *refusal.headers], \
                json.dumps(record.response_body).encode()
        if record.validate_only:
            record.name, record.cause = f"projects/{project_id}/messages/fake_message_id", "validate_only"
        else:
            record.name = f"projects/{project_id}/messages/0:{int(now * 1e6)}%{secrets.token_hex(8)}"
        record.status, record.response_body = 200, {"name": record.name}
        self._record(record)
        return 200, [("content-type", "application/json; charset=UTF-8")], json.dumps(record.response_body).encode()

    def _check_bearer(self, request, record):
        challenge = [("www-authenticate", 'Bearer realm="https://accounts.google.com/"')]
        authorization = request.header("authorization")
        if not authorization or request.header_count("authorization") > 1:
            raise _Refusal(401, "UNAUTHENTICATED", _MISSING_CREDENTIAL, detail="no Authorization header",
                           headers=challenge)
        scheme, _, token = authorization.partition(" ")
        record.access_token = token
        with self._lock:
            expiry = self._access.get(token)
        if scheme.lower() != "bearer" or expiry is None or expiry <= time.monotonic():
            why = ("not `Bearer <token>`" if scheme.lower() != "bearer" else
                   "a token this server never issued" if expiry is None else "an expired access token")
            raise _Refusal(401, "UNAUTHENTICATED", _UNAUTHENTICATED, detail=why,
                           headers=[("www-authenticate", 'Bearer realm="https://accounts.google.com/", '
                                                         'error="invalid_token"')])

def _answer(answer):
    answer = tuple(answer)
    if len(answer) == 2:
        return answer[0], answer[1], {}
    if len(answer) == 3:
        return answer[0], answer[1], dict(answer[2] or {})
    raise ValueError(f"a scripted answer is (status, errorCode[, extra]), not {answer!r}")


def _scripted(status, code, extra, kind):
    default_status, rpc_status, message = FCM_ERRORS.get(code, (status, code, code))
    details = [{"@type": FCM_ERROR_TYPE, "errorCode": code}]
    if code == "QUOTA_EXCEEDED":
        details.append({"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [{"subject": "device", "description": "Device message rate exceeded."}]})
    headers = [] if extra.get("retry_after") is None else [("retry-after", str(extra["retry_after"]))]
    refusal = _Refusal(status, extra.get("status", rpc_status), extra.get("message", message), details,
                       detail=f"{kind} answer", reason=code, headers=headers, cause=kind)
    return refusal


def _google_error(status, rpc_status, message):
    return status, [("content-type", "application/json; charset=UTF-8")], \
        json.dumps({"error": {"code": status, "message": message, "status": rpc_status}}).encode()
