"""A local stand-in for Apple's APNs provider API (token-based authentication).

Apple's rules, as this server enforces them (reference: client-push-identity-protocols.md §3,
Apple's "Sending notification requests to APNs" and "Handling notification responses from
APNs", APNSwift's APNSTestServer):

- HTTP/2 over TLS only (ALPN "h2"). An HTTP/1.1 request gets 505 — APNs does not speak HTTP/1.1.
- `POST /3/device/<device token>`; another method → 405 MethodNotAllowed, another path → 404
  BadPath, no token → 400 MissingDeviceToken, a token that is not hex → 400 BadDeviceToken.
- `authorization: bearer <JWT>`; header {"alg":"ES256","kid":<Key ID>}, claims {"iss":<Team ID>,
  "iat":<epoch s>}, signed with the team's P-256 key as raw r||s. Missing → 403
  MissingProviderToken; malformed, wrong kid/iss/alg, bad signature, iat in the future → 403
  InvalidProviderToken; iat more than an hour old → 403 ExpiredProviderToken. Optionally, a new
  token less than `min_token_refresh_seconds` after the previous new one → 429
  TooManyProviderTokenUpdates (Apple: refresh no more than once every 20 minutes).
- A header sent twice → 400 DuplicateHeaders.
- `apns-topic` required with tokens (400 MissingTopic); empty or with whitespace → 400 BadTopic; not
  one of this stand-in's topics → 400 DeviceTokenNotForTopic.
- `apns-push-type` one of Apple's types → else 400 InvalidPushType. Apple only recommends the
  header; this stand-in requires it unless `require_push_type=False`.
- `apns-priority` "5" or "10" (absent means 10) → else 400 BadPriority; 10 with push type
  background → 400 BadPriority (Apple: "10 is an error for content-available-only").
- `apns-expiration` a decimal UNIX time (0 = now or never) → else 400 BadExpirationDate.
- `apns-collapse-id` at most 64 bytes → else 400 BadCollapseId.
- `apns-id` a lowercase canonical UUID when present → else 400 BadMessageId.
- Body: empty → 400 PayloadEmpty; more than 4096 bytes (5120 for voip) → 413 PayloadTooLarge; not
  a JSON object with an `aps` object → 400 InvalidPayload (stand-in reason: Apple documents none).
  Stand-in extra (`strict_background_payload`): a background push's `aps` must be exactly
  {"content-available": 1}-style — content-available 1 and nothing user-visible (alert, badge,
  sound) — else 400 InvalidPayload; Apple would deliver it wrongly rather than refuse it.
- Success: 200, empty body, `apns-id` header (the request's, else a fresh lowercase UUID). Errors:
  `{"reason": …}` (+ `"timestamp": <ms>` on 410), with an `apns-id` header too.

Every request is recorded (see `Recorder` in _server.py); the details of a refusal are in the
record's `detail`, not the response body (which stays exactly Apple's shape).
"""

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization

from . import tokens
from ._server import BackgroundServer, DownSwitch, Recorder, Scripts

APNS_PUSH_TYPES = frozenset({"alert", "background", "controls", "location", "voip", "complication",
                             "fileprovider", "mdm", "liveactivity", "pushtotalk", "widgets"})
MAX_PAYLOAD = 4096
MAX_VOIP_PAYLOAD = 5120
MAX_COLLAPSE_ID = 64

_HEX_TOKEN = re.compile(r"^[0-9a-fA-F]+$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_DIGITS = re.compile(r"^[0-9]+$")
_USER_VISIBLE_APS = ("alert", "badge", "sound")
# Headers APNs reads; each may appear at most once.
_SINGLE_HEADERS = ("authorization", "apns-id", "apns-topic", "apns-push-type", "apns-priority",
                   "apns-expiration", "apns-collapse-id")


@dataclass
class ApnsRequest:
    """One request to the stand-in. `payload` is the parsed JSON body (None when it did not
    parse); `status`/`reason` what was answered; `cause` is "accepted", "invalid" (a protocol rule
    was broken; `detail` says which), "scripted", "permanent" (a per-token answer), "down", or
    "http1"."""
    token: str
    headers: dict
    payload: object
    body: bytes
    received_at: float
    http_version: str
    method: str = "POST"
    path: str = ""
    provider_token: str = None
    apns_id: str = None
    status: int = 200
    reason: str = None
    cause: str = "accepted"
    detail: str = None
    response_body: dict = field(default_factory=dict)

    @property
    def accepted(self):
        return self.cause == "accepted"

    @property
    def push_type(self):
        return self.headers.get("apns-push-type")

    @property
    def priority(self):
        return self.headers.get("apns-priority")

    @property
    def topic(self):
        return self.headers.get("apns-topic")

    @property
    def collapse_id(self):
        return self.headers.get("apns-collapse-id")


class _Refusal(Exception):
    def __init__(self, status, reason, detail):
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


class ApnsStandIn(Recorder, DownSwitch, BackgroundServer):
    """APNs on `https://127.0.0.1:<port>` over HTTP/2.

    Constructor:
      team_id, key_id     the 10-character Team ID (JWT `iss`) and Key ID (JWT header `kid`)
      public_key          the ES256 public key (cryptography EllipticCurvePublicKey, or PEM bytes)
      topics              the allowed apns-topic value(s): a str or an iterable of str
      tls                 (cert path, key path) as from certs.make_tls_cert; default: a fresh
                          self-signed certificate in a temp directory (see `ca_file`)
      push_types          the accepted apns-push-type values (default: all of Apple's)
      require_push_type   refuse a request without apns-push-type (default True; Apple only
                          recommends it)
      max_token_age       seconds an `iat` stays valid (Apple: 3600)
      clock_skew          seconds of slack for an `iat` in the future (default 10)
      min_token_refresh_seconds  if set, a new provider token sooner than this after the previous
                          new one gets 429 TooManyProviderTokenUpdates (Apple: 20 minutes)
      strict_background_payload  refuse a background push whose `aps` has anything user-visible
                          or lacks content-available 1 (default True)

    Use: `with ApnsStandIn(...) as apns:` (or `.start()` / `.stop()`); `apns.url`, `apns.ca_file`.
    """

    _name = "ApnsStandIn"

    def __init__(self, team_id, key_id, public_key, topics, *, tls=True, push_types=APNS_PUSH_TYPES,
                 require_push_type=True, max_token_age=3600, clock_skew=10,
                 min_token_refresh_seconds=None, strict_background_payload=True):
        Recorder.__init__(self)
        DownSwitch.__init__(self)
        BackgroundServer.__init__(self, tls=tls, alpn=("h2", "http/1.1"))
        if isinstance(public_key, (bytes, str)):
            public_key = serialization.load_pem_public_key(
                public_key.encode() if isinstance(public_key, str) else public_key)
        self.team_id = team_id
        self._keys = {key_id: public_key}
        self.topics = frozenset([topics] if isinstance(topics, str) else topics)
        self.push_types = frozenset(push_types)
        self.require_push_type = require_push_type
        self.max_token_age = max_token_age
        self.clock_skew = clock_skew
        self.min_token_refresh_seconds = min_token_refresh_seconds
        self.strict_background_payload = strict_background_payload
        self._scripts = Scripts()
        self._token_lock = threading.Lock()
        self._provider_tokens = []       # distinct valid JWTs, in the order first seen
        self._provider_token_uses = {}   # JWT → number of requests that carried it
        self._last_new_token_at = None

    # -- configuration ----------------------------------------------------------------------

    @property
    def key_id(self):
        return next(iter(self._keys))

    def add_key(self, key_id, public_key):
        """Trusts another signing key (e.g. to test key rotation)."""
        self._keys[key_id] = public_key

    def script(self, token=None, responses=()):
        """Queues answers for the next requests to `token` (None: to any token), one per valid
        request. Each answer is (status, reason) or (status, reason, extra dict merged into the
        JSON body, e.g. {"timestamp": ms}), or None to let one request through normally. A 410
        without a timestamp gets the current time. Scripted answers apply only to requests that
        pass every check; malformed requests are still refused for what is wrong with them."""
        self._scripts.add(token, [None if r is None else _answer(r) for r in responses])

    def set_token_response(self, token, status=None, reason=None, extra=None):
        """Answers every valid request to `token` with (status, reason, extra) until cleared with
        `set_token_response(token)` (e.g. a token that is always 410 Unregistered)."""
        self._scripts.set_permanent(token, None if status is None else _answer((status, reason, extra)))

    def pending_scripts(self, token=Scripts._EMPTY):
        return self._scripts.pending(token)

    def reset(self):
        """Clears records, scripts, per-token answers, the down state and provider-token counts."""
        self.clear()
        self._scripts.reset()
        self.set_down(False)
        self.down_count = 0
        with self._token_lock:
            self._provider_tokens.clear()
            self._provider_token_uses.clear()
            self._last_new_token_at = None

    # -- provider tokens seen ---------------------------------------------------------------

    @property
    def provider_tokens(self):
        """The distinct valid provider tokens (JWTs) seen, in order first seen."""
        with self._token_lock:
            return list(self._provider_tokens)

    @property
    def provider_tokens_issued(self):
        """How many distinct provider tokens the sender has minted (as seen here)."""
        with self._token_lock:
            return len(self._provider_tokens)

    @property
    def provider_token_uses(self):
        """{JWT: number of requests that carried it}."""
        with self._token_lock:
            return dict(self._provider_token_uses)

    # -- request handling -------------------------------------------------------------------

    def handle(self, request):
        now = time.time()
        headers = request.headers
        path = request.path
        token = path[len("/3/device/"):] if path.startswith("/3/device/") else ""
        try:
            payload = json.loads(request.body) if request.body else None
        except (ValueError, UnicodeDecodeError):
            payload = None
        record = ApnsRequest(token=token, headers=headers, payload=payload, body=request.body,
                             received_at=now, http_version=request.http_version,
                             method=request.method, path=path)
        request_id = headers.get("apns-id")
        record.apns_id = request_id if request_id and _UUID.match(request_id) else str(uuid.uuid4())

        if self._check_down():
            return self._answer(record, 503, "ServiceUnavailable", "down")
        if request.http_version != "2":
            return self._answer(record, 505, "HTTPVersionNotSupported", "http1",
                                "APNs speaks HTTP/2 only (ALPN h2)")
        try:
            self._validate(request, record, now)
        except _Refusal as refusal:
            return self._answer(record, refusal.status, refusal.reason, "invalid", refusal.detail)

        answer, kind = self._scripts.take(token)
        if answer is not None:
            status, reason, extra = answer
            return self._answer(record, status, reason, kind, extra=extra)
        record.status, record.cause = 200, "accepted"
        self._record(record)
        return 200, [("apns-id", record.apns_id)], b""

    def _answer(self, record, status, reason, cause, detail=None, extra=None):
        body = {"reason": reason}
        if extra:
            body.update(extra)
        if status == 410 and "timestamp" not in body:
            body["timestamp"] = int(time.time() * 1000)
        record.status, record.reason, record.cause = status, reason, cause
        record.detail, record.response_body = detail, body
        self._record(record)
        return status, [("apns-id", record.apns_id), ("content-type", "application/json")], \
            json.dumps(body).encode()

    def _validate(self, request, record, now):
        """Raises _Refusal for the first rule the request breaks, in the order APNs checks:
        method/path, provider token, headers, device token, payload."""
        if request.method != "POST":
            raise _Refusal(405, "MethodNotAllowed", f"method {request.method}")
        if not request.path.startswith("/3/device/"):
            raise _Refusal(404, "BadPath", f"path {request.path!r}")
        if not record.token:
            raise _Refusal(400, "MissingDeviceToken", "no device token in the path")

        self._check_provider_token(request, record, now)

        for name in _SINGLE_HEADERS:
            if request.header_count(name) > 1:
                raise _Refusal(400, "DuplicateHeaders", f"{name} sent {request.header_count(name)} times")
        headers = record.headers

        topic = headers.get("apns-topic")
        if topic is None:
            raise _Refusal(400, "MissingTopic", "apns-topic is required with token authentication")
        if not topic or any(c.isspace() for c in topic):
            raise _Refusal(400, "BadTopic", f"apns-topic {topic!r}")
        if topic not in self.topics:
            raise _Refusal(400, "DeviceTokenNotForTopic", f"apns-topic {topic!r} is not one of {sorted(self.topics)}")

        push_type = headers.get("apns-push-type")
        if push_type is None:
            if self.require_push_type:
                raise _Refusal(400, "InvalidPushType", "apns-push-type is missing (required by the stand-in)")
        elif push_type not in self.push_types:
            raise _Refusal(400, "InvalidPushType", f"apns-push-type {push_type!r}")

        priority = headers.get("apns-priority", "10")
        if priority not in ("5", "10"):
            raise _Refusal(400, "BadPriority", f"apns-priority {priority!r}")
        if push_type == "background" and priority == "10":
            raise _Refusal(400, "BadPriority", "apns-priority 10 (or absent) with apns-push-type background")

        expiration = headers.get("apns-expiration")
        if expiration is not None and not _DIGITS.match(expiration):
            raise _Refusal(400, "BadExpirationDate", f"apns-expiration {expiration!r}")

        collapse_id = headers.get("apns-collapse-id")
        if collapse_id is not None and len(collapse_id.encode("latin-1")) > MAX_COLLAPSE_ID:
            raise _Refusal(400, "BadCollapseId", f"apns-collapse-id is {len(collapse_id.encode('latin-1'))} bytes")

        apns_id = headers.get("apns-id")
        if apns_id is not None and not _UUID.match(apns_id):
            raise _Refusal(400, "BadMessageId", f"apns-id {apns_id!r} is not a lowercase canonical UUID")

        if not _HEX_TOKEN.match(record.token) or len(record.token) % 2:
            raise _Refusal(400, "BadDeviceToken", f"device token {record.token[:80]!r} is not hex bytes")

        if request.body_size == 0:
            raise _Refusal(400, "PayloadEmpty", "empty body")
        limit = MAX_VOIP_PAYLOAD if push_type == "voip" else MAX_PAYLOAD
        if request.body_size > limit:
            raise _Refusal(413, "PayloadTooLarge", f"payload is {request.body_size} bytes, limit {limit}")
        payload = record.payload
        if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
            raise _Refusal(400, "InvalidPayload", "the body is not a JSON object with an `aps` object")
        if push_type == "background" and self.strict_background_payload:
            aps = payload["aps"]
            visible = [k for k in _USER_VISIBLE_APS if k in aps]
            if aps.get("content-available") != 1 or visible:
                raise _Refusal(400, "InvalidPayload",
                               f"a background push needs aps.content-available 1 and nothing user-visible; aps={aps}")

    def _check_provider_token(self, request, record, now):
        if request.header_count("authorization") > 1:
            raise _Refusal(400, "DuplicateHeaders", "authorization sent twice")
        authorization = request.header("authorization")
        if not authorization:
            raise _Refusal(403, "MissingProviderToken", "no authorization header")
        scheme, _, jwt = authorization.partition(" ")
        if scheme.lower() != "bearer" or not jwt or " " in jwt:
            raise _Refusal(403, "InvalidProviderToken", f"authorization is not `bearer <JWT>`: {authorization[:60]!r}")
        record.provider_token = jwt
        try:
            header, _, _, _ = tokens.decode_unverified(jwt)
            kid = header.get("kid")
            if kid not in self._keys:
                raise tokens.JwtError(f"kid {kid!r} is not the key id {sorted(self._keys)}")
            header, claims = tokens.verify(jwt, self._keys[kid], "ES256")
        except tokens.JwtError as error:
            raise _Refusal(403, "InvalidProviderToken", str(error)) from None
        if claims.get("iss") != self.team_id:
            raise _Refusal(403, "InvalidProviderToken", f"iss {claims.get('iss')!r} is not the team id {self.team_id!r}")
        iat = claims.get("iat")
        if not isinstance(iat, int) or isinstance(iat, bool):
            raise _Refusal(403, "InvalidProviderToken", f"iat {iat!r} is not an integer")
        if iat > now + self.clock_skew:
            raise _Refusal(403, "InvalidProviderToken", f"iat is {iat - now:.0f} s in the future")
        if now - iat > self.max_token_age:
            raise _Refusal(403, "ExpiredProviderToken", f"iat is {now - iat:.0f} s old (max {self.max_token_age})")
        with self._token_lock:
            new = jwt not in self._provider_token_uses
            if new:
                self._provider_tokens.append(jwt)
                self._provider_token_uses[jwt] = 0
                too_soon = (self.min_token_refresh_seconds is not None and self._last_new_token_at is not None
                            and now - self._last_new_token_at < self.min_token_refresh_seconds)
                self._last_new_token_at = now
            self._provider_token_uses[jwt] += 1
        if new and too_soon:
            raise _Refusal(429, "TooManyProviderTokenUpdates",
                           f"a new provider token within {self.min_token_refresh_seconds} s of the previous one")


def _answer(answer):
    answer = tuple(answer)
    if len(answer) == 2:
        return answer[0], answer[1], None
    if len(answer) == 3:
        return answer[0], answer[1], dict(answer[2] or {})
    raise ValueError(f"a scripted answer is (status, reason[, extra]), not {answer!r}")
