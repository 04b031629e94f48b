"""Requests for the HTTP fuzzer: JSON with duplicate members, the request as sent and the
response, sending over a raw socket (signed by signing.py), and the Cognito Sync operations as
botocore serializes them."""

import base64
import dataclasses
import hashlib
import json
import select
import socket
import time

import botocore.serialize
import botocore.session
from botocore.utils import percent_encode_sequence

from conftest import SERVICE

from .signing import _encode, signed_headers  # noqa: F401  (signed_headers: re-exported)

REQUEST_TIMEOUT = 30.0

# --------------------------------------------------------------------------------------------
# JSON with duplicate members and raw tokens

class Obj(list):
    """A JSON object as a list of (name, value) pairs: keeps order and duplicates."""

    def get(self, name, default=None):
        for k, v in self:
            if k == name:
                return v
        return default


class Raw:
    """A JSON token written as given (bytes): numbers beyond doubles, invalid UTF-8..."""

    def __init__(self, token):
        self.token = token

    def __repr__(self):
        return f"Raw({self.token[:60]!r})"


def to_json(value):
    if isinstance(value, Raw):
        return value.token
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    if isinstance(value, (int, float)):
        return json.dumps(value).encode()
    if isinstance(value, str):
        return json.dumps(value).encode()
    if isinstance(value, Obj):
        return b"{" + b",".join((k.token if isinstance(k, Raw) else json.dumps(k).encode()) + b":" + to_json(v)
                                for k, v in value) + b"}"
    if isinstance(value, dict):
        return to_json(Obj(value.items()))
    if isinstance(value, (list, tuple)):
        return b"[" + b",".join(to_json(v) for v in value) + b"]"
    raise TypeError(type(value))


def from_json(data):
    try:
        return json.loads(data, object_pairs_hook=Obj)
    except RecursionError:
        raise ValueError("nested too deep for Python's parser")


# --------------------------------------------------------------------------------------------
# Requests on the wire

@dataclasses.dataclass
class Request:
    op: str
    method: str
    segments: list          # raw (percent-encoded) path segments: path = "/" + "/".join(segments)
    query: list             # raw (name, value or None) pairs
    headers: list           # signed headers (name, value), besides what SigV4 adds
    body: bytes = b""
    cred: str = "admin"     # admin | identity | identity-token | other
    notes: list = dataclasses.field(default_factory=list)
    unsigned_headers: list = dataclasses.field(default_factory=list)
    drop_headers: list = dataclasses.field(default_factory=list)
    chunked: bool = False
    http10: bool = False
    sign: bool = True
    presign: bool = False   # SigV4 in the query string (botocore SigV4QueryAuth), bodiless requests only
    service: str = SERVICE  # the service signed for (Cognito Identity's operations: cognito-identity)
    skew: int = 0           # sign as if the clock were this many seconds off (expired or future signatures)
    expires: int = 900      # a presigned URL's X-Amz-Expires
    garble: bool = False    # change one character of the signature after signing
    stream: bool = False    # an event stream (SSE or WebSocket): its answer is the head alone
    after_upgrade: bytes = b""   # WebSocket frames sent once the server answered 101

    @property
    def path(self):
        return "/" + "/".join(self.segments)

    @property
    def query_string(self):
        return "&".join(k if v is None else f"{k}={v}" for k, v in self.query)

    @property
    def target(self):
        q = self.query_string
        return self.path + ("?" + q if q else "")

    def describe(self, limit=400):
        body = self.body
        shown = body[:limit]
        more = f" ... ({len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()[:16]})" if len(body) > limit else ""
        target = self.target
        if len(target) > 600:
            target = target[:600] + f"... ({len(self.target)} characters)"
        lines = [f"{self.op} as {self.cred}: {self.method} {target!r}"]
        if self.notes:
            lines.append("  mutations: " + "; ".join(self.notes))
        extra = self.headers + self.unsigned_headers
        if extra:
            lines.append("  headers: " + ", ".join(f"{k}: {v[:120]!r}" for k, v in extra))
        if self.drop_headers:
            lines.append("  without headers: " + ", ".join(self.drop_headers))
        if self.service != SERVICE or self.skew or self.garble:
            lines.append(f"  signed for {self.service}" + (f", clock {self.skew:+d} s" if self.skew else "")
                         + (", signature garbled" if self.garble else ""))
        if self.chunked or self.http10 or self.presign or self.stream:
            lines.append("  transport: " + ", ".join(x for x, on in (("chunked body", self.chunked), ("HTTP/1.0", self.http10),
                                                                     (f"presigned URL (expires {self.expires})", self.presign),
                                                                     ("event stream: head only", self.stream)) if on))
        lines.append(f"  body: {shown!r}{more}")
        if self.after_upgrade:
            lines.append(f"  after the upgrade: {self.after_upgrade[:200]!r}" + (f" ... ({len(self.after_upgrade)} bytes)"
                                                                                if len(self.after_upgrade) > 200 else ""))
        return "\n".join(lines)

    def to_json(self):
        return {"op": self.op, "method": self.method, "segments": self.segments, "query": self.query,
                "headers": self.headers, "unsigned_headers": self.unsigned_headers, "drop_headers": self.drop_headers,
                "body": base64.b64encode(self.body).decode(), "cred": self.cred, "notes": self.notes,
                "chunked": self.chunked, "http10": self.http10, "sign": self.sign, "presign": self.presign,
                "service": self.service, "skew": self.skew, "expires": self.expires, "garble": self.garble,
                "stream": self.stream, "after_upgrade": base64.b64encode(self.after_upgrade).decode()}


class NoResponse(Exception):
    """The connection closed (or failed) before a whole response arrived."""


class Hang(Exception):
    """No response within the timeout."""


@dataclasses.dataclass
class Response:
    status: int
    headers: dict
    body: bytes
    elapsed: float

    @property
    def error_type(self):
        return self.headers.get("x-amzn-errortype", "")

    def message(self, limit=300):
        text = self.body[:4000].decode("utf-8", "replace")
        try:
            text = json.loads(text).get("message", text)
        except (ValueError, AttributeError):
            pass
        return text[:limit]


def send(host, port, request, credential, timeout=REQUEST_TIMEOUT):
    """Signs and sends `request` on a new connection; returns a Response. Raises Hang when no
    whole response arrives within `timeout`, NoResponse when the connection closes first."""
    headers, target = signed_headers(request, credential, f"{host}:{port}")
    names = {k.lower() for k, _ in headers}
    drop = {h.lower() for h in request.drop_headers}
    lines = [_encode(request.method) + b" " + _encode(target) + (b" HTTP/1.0" if request.http10 else b" HTTP/1.1")]
    if "host" not in names and "host" not in drop:
        lines.append(_encode(f"Host: {host}:{port}"))
    for k, v in headers:
        if k.lower() not in drop:
            lines.append(_encode(f"{k}: {v}"))
    if request.chunked:
        lines.append(b"Transfer-Encoding: chunked")
    elif "content-length" not in drop:
        lines.append(b"Content-Length: " + str(len(request.body)).encode())
    if "connection" not in names and "connection" not in {k.lower() for k, _ in request.unsigned_headers}:
        lines.append(b"Connection: close")
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    if request.chunked:
        body, data, i, step = bytearray(), request.body, 0, max(1, len(request.body) // 3 or 1)
        while i < len(data):
            piece = data[i:i + step]
            body += b"%x\r\n" % len(piece) + piece + b"\r\n"
            i += step
        body += b"0\r\n\r\n"
        payload = head + bytes(body)
    else:
        payload = head + request.body
    start = time.monotonic()
    deadline = start + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as error:
        raise NoResponse(f"connect: {error}")
    try:
        _send_all(sock, payload, deadline)
        response = _read_response(sock, request.method, deadline, start, stream=request.stream)
        if response.status == 101 and request.after_upgrade:
            _frames(sock, request.after_upgrade, response)
        return response
    finally:
        sock.close()


def _frames(sock, frames, response):
    """Sends WebSocket `frames` after an upgrade, then reads what the server answers for up to
    half a second (or until it closes); appended to the response's body."""
    try:
        sock.sendall(frames)
    except OSError:
        return
    deadline = time.monotonic() + 0.5
    received = bytearray(response.body)
    while time.monotonic() < deadline and len(received) < 1 << 20:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        received += chunk
    response.body = bytes(received)


def _send_all(sock, payload, deadline):
    """Sends `payload`, but stops as soon as the server answers (it may refuse a request
    before reading its body) or closes."""
    view = memoryview(payload)
    sock.setblocking(False)
    try:
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang(f"the server stopped reading: {len(view)} of {len(payload)} bytes unsent, "
                           "and no answer")
            poller = select.poll()
            poller.register(sock, select.POLLIN | select.POLLOUT)
            events = poller.poll(left * 1000)
            mask = events[0][1] if events else 0
            if mask & (select.POLLIN | select.POLLHUP | select.POLLERR):
                return   # an early answer (or a close): read it
            if mask & select.POLLOUT:
                try:
                    sent = sock.send(view[:262144])
                except BlockingIOError:
                    continue
                except OSError:
                    return
                view = view[sent:]
    finally:
        sock.setblocking(True)


def _read_response(sock, method, deadline, start, stream=False):
    """The response on `sock`; of an event stream (`stream`) that started, the head and what
    arrived with it (a stream never ends: the caller closes it)."""
    buffer = b""

    def more():
        left = deadline - time.monotonic()
        if left <= 0:
            raise Hang(f"no whole response within {deadline - start:.0f} s (got {len(buffer)} bytes)")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            raise Hang(f"no whole response within {deadline - start:.0f} s (got {len(buffer)} bytes)")
        except OSError as error:
            raise NoResponse(f"{error} after {len(buffer)} bytes")
        return chunk

    while True:
        while b"\r\n\r\n" not in buffer:
            chunk = more()
            if not chunk:
                raise NoResponse(f"closed after {len(buffer)} bytes: {buffer[:200]!r}")
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            raise NoResponse(f"not an HTTP response: {lines[0][:200]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.decode("latin-1").strip().lower()] = value.decode("latin-1").strip()
        if status == 101 and stream:
            return Response(status, headers, buffer, time.monotonic() - start)
        if 100 <= status < 200:
            continue
        break
    if stream and status == 200 and headers.get("content-type", "").startswith("text/event-stream"):
        return Response(status, headers, buffer, time.monotonic() - start)
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            while b"\r\n" not in buffer:
                chunk = more()
                if not chunk:
                    raise NoResponse("closed inside a chunked body")
                buffer += chunk
            size_line, _, buffer = buffer.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(buffer) < size + 2:
                chunk = more()
                if not chunk:
                    raise NoResponse("closed inside a chunk")
                buffer += chunk
            body += buffer[:size]
            buffer = buffer[size + 2:]
            if size == 0:
                break
        body = bytes(body)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        while len(buffer) < length:
            chunk = more()
            if not chunk:
                raise NoResponse(f"closed after {len(buffer)} of {length} body bytes")
            buffer += chunk
        body = buffer[:length]
    else:
        while True:
            chunk = more()
            if not chunk:
                break
            buffer += chunk
        body = buffer
    return Response(status, headers, body, time.monotonic() - start)


# --------------------------------------------------------------------------------------------
# The Cognito Sync operations: botocore's model and serializer

_MODEL = botocore.session.get_session().get_service_model("cognito-sync")
_SERIALIZER = botocore.serialize.create_serializer("rest-json", include_validation=False)
OPERATIONS = sorted(_MODEL.operation_names)
IDENTITY_LEVEL = {"DeleteDataset", "DescribeDataset", "DescribeIdentityUsage", "ListDatasets", "ListRecords",
                  "RegisterDevice", "SubscribeToDataset", "UnsubscribeFromDataset", "UpdateRecords"}
SEGMENT_OPERATIONS = ["GetFeedSegment", "GetStreamSegment", "GetDigest", "PostSegment", "PostOfflineSegment"]
ALL_OPERATIONS = OPERATIONS + SEGMENT_OPERATIONS


def serialize(operation, params):
    """A valid request of `operation` as botocore serializes it."""
    r = _SERIALIZER.serialize_to_request(params, _MODEL.operation_model(operation))
    segments = r["url_path"].split("/")[1:]
    query = []
    encoded = percent_encode_sequence(r["query_string"]) if r["query_string"] else ""
    for part in encoded.split("&") if encoded else []:
        k, _, v = part.partition("=")
        query.append((k, v))
    body = r["body"] if isinstance(r["body"], bytes) else (r["body"] or "").encode()
    return Request(operation, r["method"], segments, query, list(r["headers"].items()), body)
