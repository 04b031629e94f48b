"""A customer's webhook endpoint that checks SyncLedger's webhook signature, and the reference
verifier for it.

The signature scheme (SyncLedger's own):

    X-SyncLedger-Timestamp: <unix seconds, decimal digits>
    X-SyncLedger-Signature: v1=<lowercase hex HMAC-SHA256(key = the secret's UTF-8 bytes,
                                                         message = timestamp + "." + raw body)>

The timestamp in the message is the header's text exactly as sent. A receiver must:
1. compute the HMAC over the raw body bytes (before any JSON parsing) and compare it with
   the header in constant time (`verify_signature`);
2. refuse a timestamp more than 300 s away from its own clock, in either direction
   (`timestamp_is_fresh`), so a captured request cannot be replayed later.
"""

import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass, field

from ._server import BackgroundServer, DownSwitch, Recorder, Scripts

TIMESTAMP_HEADER = "X-SyncLedger-Timestamp"
SIGNATURE_HEADER = "X-SyncLedger-Signature"
TOLERANCE_SECONDS = 300

_TIMESTAMP = re.compile(r"^[0-9]{1,15}$")
_SIGNATURE = re.compile(r"^v1=([0-9a-f]{64})$")


def _key(secret):
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


def compute_signature(secret, timestamp, body):
    """The header value for `body` (bytes) sent at `timestamp` (str or int):
    "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body))."""
    message = str(timestamp).encode("ascii") + b"." + body
    return "v1=" + hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def verify_signature(secret, timestamp, body, header):
    """The reference check of a SyncLedger webhook signature.

    secret     the webhook's shared secret (str, used as its UTF-8 bytes)
    timestamp  the X-SyncLedger-Timestamp header value, exactly as received (str of digits)
    body       the raw request body (bytes), before any parsing
    header     the X-SyncLedger-Signature header value ("v1=<64 lowercase hex>")

    Returns True only if the header has exactly that form and equals
    HMAC-SHA256(secret, timestamp + "." + body), compared in constant time. It does not look at
    the clock: also check `timestamp_is_fresh`."""
    if not isinstance(timestamp, str) or not _TIMESTAMP.match(timestamp):
        return False
    if not isinstance(header, str) or not _SIGNATURE.match(header):
        return False
    return hmac.compare_digest(compute_signature(secret, timestamp, body), header)


def timestamp_is_fresh(timestamp, now=None, tolerance=TOLERANCE_SECONDS):
    """True if `timestamp` (decimal digits) is within `tolerance` seconds of `now` (default: the
    current time), either way."""
    if not isinstance(timestamp, str) or not _TIMESTAMP.match(timestamp):
        return False
    now = time.time() if now is None else now
    return abs(now - int(timestamp)) <= tolerance


def sign_headers(secret, body, timestamp=None):
    """The two headers a sender adds (for tests playing SyncLedger)."""
    timestamp = str(int(time.time()) if timestamp is None else timestamp)
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: compute_signature(secret, timestamp, body),
            "Content-Type": "application/json"}


@dataclass
class WebhookRequest:
    """One request to the receiver. `payload` is the parsed JSON (None if it did not parse);
    `cause` is "accepted", "invalid" (bad signature/timestamp/JSON; `detail` says which),
    "scripted" or "down"."""
    path: str
    headers: dict
    payload: object
    body: bytes
    received_at: float
    http_version: str
    method: str = "POST"
    status: int = 200
    reason: str = None
    cause: str = "accepted"
    detail: str = None
    response_headers: list = field(default_factory=list)

    @property
    def accepted(self):
        return self.cause == "accepted"


class WebhookReceiver(Recorder, DownSwitch, BackgroundServer):
    """A webhook endpoint on `http://127.0.0.1:<port>`: `POST <any path>` with a JSON body signed
    as described in this module's docstring.

    Constructor: `secret` (str), `tolerance` (seconds, default 300), `tls` (None = plain HTTP, the
    default; or (cert, key) / True for HTTPS).

    Answers: 200 `{"ok": true}` when accepted; 405 for another method; 401 for a missing or bad
    signature or a timestamp outside the tolerance; 415 when Content-Type is not application/json;
    400 when the body is not JSON; scripted statuses; 503 while down.
    """

    _name = "WebhookReceiver"

    def __init__(self, secret, *, tolerance=TOLERANCE_SECONDS, tls=None):
        Recorder.__init__(self)
        DownSwitch.__init__(self)
        BackgroundServer.__init__(self, tls=tls, alpn=("http/1.1",))
        self.secret = secret
        self.tolerance = tolerance
        self._scripts = Scripts()

    def script(self, responses=(), path=None):
        """Queues answers for the next valid requests (to `path`, or any path when None), one per
        request: a status (e.g. 500), (status, {header: value}) such as (429, {"Retry-After": "2"}),
        or None to accept one normally."""
        self._scripts.add(path, [None if r is None else _answer(r) for r in responses])

    def set_path_response(self, path, status=None, headers=None):
        """Answers every valid request to `path` with `status` until `set_path_response(path)`."""
        self._scripts.set_permanent(path, None if status is None else _answer((status, headers or {})))

    def reset(self):
        self.clear()
        self._scripts.reset()
        self.set_down(False)
        self.down_count = 0

    def handle(self, request):
        now = time.time()
        try:
            payload = json.loads(request.body) if request.body else None
        except (ValueError, UnicodeDecodeError):
            payload = None
        record = WebhookRequest(path=request.path, headers=request.headers, payload=payload, body=request.body,
                                received_at=now, http_version=request.http_version, method=request.method)
        if self._check_down():
            return self._answer(record, 503, "down", "down")
        if request.method != "POST":
            return self._answer(record, 405, "invalid", f"method {request.method}")
        timestamp = request.header(TIMESTAMP_HEADER.lower())
        signature = request.header(SIGNATURE_HEADER.lower())
        if request.header_count(TIMESTAMP_HEADER.lower()) > 1 or request.header_count(SIGNATURE_HEADER.lower()) > 1:
            return self._answer(record, 401, "invalid", "a signature header is repeated")
        if timestamp is None or signature is None:
            return self._answer(record, 401, "invalid", f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}")
        if not verify_signature(self.secret, timestamp, request.body, signature):
            return self._answer(record, 401, "invalid", f"bad signature {signature[:80]!r} for timestamp {timestamp!r}")
        if not timestamp_is_fresh(timestamp, now, self.tolerance):
            return self._answer(record, 401, "invalid", f"timestamp {timestamp} is {now - int(timestamp):.0f} s off")
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return self._answer(record, 415, "invalid", f"Content-Type {content_type!r}")
        if payload is None and request.body.strip() != b"null":
            return self._answer(record, 400, "invalid", "the body is not JSON")
        answer, kind = self._scripts.take(request.path)
        if answer is not None:
            status, headers = answer
            return self._answer(record, status, kind, f"{kind} answer", headers)
        record.status, record.cause = 200, "accepted"
        self._record(record)
        return 200, [("content-type", "application/json")], b'{"ok":true}'

    def _answer(self, record, status, cause, detail, headers=None):
        record.status, record.cause, record.detail = status, cause, detail
        record.reason = detail
        record.response_headers = list((headers or {}).items())
        self._record(record)
        body = json.dumps({"error": detail if cause == "invalid" else cause}).encode()
        return status, [("content-type", "application/json"), *record.response_headers], body


def _answer(answer):
    if isinstance(answer, int):
        return answer, {}
    status, headers = answer
    return status, dict(headers or {})
