"""Clients of `GET /events` for the wire tests: a Server-Sent Events reader over a raw socket
(chunked transfer decoding and the WHATWG parsing rules, read by a thread into a queue, so a
test waits on the events themselves with a timeout), a WebSocket client (the `websockets`
package) and a bare one that shows control frames, and the two ways to sign: an Authorization
header or a presigned URL (botocore's SigV4QueryAuth)."""

import base64
import json
import os
import queue
import socket
import struct
import threading
import time
from urllib.parse import quote, urlencode, urlsplit

from websockets.exceptions import InvalidStatus

from test_transport import metric  # noqa: F401 (the one reader of /metrics samples; tests import it from here too)
from websockets.sync.client import connect

from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import ADMIN_KEY, ADMIN_SECRET, REGION, SERVICE, Dataset, new_id, start_server

EOF = object()


def events_target(server, params=None, key=ADMIN_KEY, secret=ADMIN_SECRET, token=None, sign="header",
                  headers=None, expires=60):
    """The request target (`/events?…`) and headers for `GET /events` with `params`, signed with
    an Authorization header (`sign="header"`), as a presigned URL (`sign="query"`), or not
    (`sign=None`). Headers given are signed too when signing with a header."""
    query = urlencode(params or {}, quote_via=quote, safe="~")
    url = server.url + "/events" + ("?" + query if query else "")
    request = AWSRequest(method="GET", url=url, headers=dict(headers or {}))
    if sign == "header":
        SigV4Auth(Credentials(key, secret, token), SERVICE, REGION).add_auth(request)
    elif sign == "query":
        SigV4QueryAuth(Credentials(key, secret, token), SERVICE, REGION, expires=expires).add_auth(request)
    parts = urlsplit(request.url)
    target = parts.path + ("?" + parts.query if parts.query else "")
    return target, dict(request.headers.items())


class SSE:
    """One `GET /events` over a raw socket. `status`, `headers` and (for an error) `error` are
    set once the response head is read; events arrive on a queue read by `block`/`event`."""

    def __init__(self, server, target, headers, timeout=10, source=None):
        # `source`: the loopback address to connect from (the server bounds streams per address).
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        head = f"GET {target} HTTP/1.1\r\nHost: {server.host}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
        self.sock.sendall((head + "\r\n").encode())
        self.file = self.sock.makefile("rb")
        status_line = self.file.readline().decode("latin-1")
        assert status_line.startswith("HTTP/1.1 "), repr(status_line)
        self.status = int(status_line.split()[1])
        self.headers = {}
        while True:
            line = self.file.readline().decode("latin-1").rstrip("\r\n")
            if not line:
                break
            name, value = line.split(":", 1)
            self.headers[name.strip().lower()] = value.strip()
        self.blocks = queue.Queue()
        self.error = None
        if self.status != 200:
            body = self.file.read(int(self.headers.get("content-length", "0")))
            self.error = json.loads(body) if body else None
            self.close()
            return
        self.sock.settimeout(None)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        pending = {}
        buffer = ""
        try:
            while True:
                size_line = self.file.readline()
                if not size_line:
                    break
                size = int(size_line.strip().split(b";")[0], 16)
                if size == 0:
                    break
                buffer += self.file.read(size).decode("utf-8")
                self.file.readline()  # the CRLF after the chunk
                while "\n" in buffer:
                    line, buffer = buffer.split("\n", 1)
                    line = line.rstrip("\r")
                    if line == "":
                        if pending:
                            self.blocks.put(pending)
                        pending = {}
                    elif line.startswith(":"):
                        pending.setdefault("comments", []).append(line[1:].strip())
                    else:
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "data" and "data" in pending:
                            pending["data"] += "\n" + value
                        else:
                            pending[name] = value
        except (OSError, ValueError):
            pass
        self.blocks.put(EOF)

    def block(self, timeout=5):
        """The next block (a dict of its fields, `comments` for comment lines), or EOF."""
        try:
            return self.blocks.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event-stream block within {timeout} s") from None

    def event(self, timeout=5):
        """The next event (a block with data), parsed: its JSON plus `_id` and `_event`.
        Raises if the stream ends first."""
        while True:
            block = self.block(timeout)
            assert block is not EOF, "the event stream ended"
            if "data" in block:
                data = json.loads(block["data"])
                data["_id"] = block.get("id")
                data["_event"] = block.get("event")
                return data

    def events(self, count, timeout=5):
        return [self.event(timeout) for _ in range(count)]

    def ended(self, timeout=5):
        """Waits for the end of the stream, skipping what comes before it."""
        while self.block(timeout) is not EOF:
            pass

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def open_sse(server, params=None, source=None, **kwargs):
    """Opens `GET /events` (see `events_target` for the arguments) from address `source`
    (default: the system's choice, 127.0.0.1)."""
    target, headers = events_target(server, params, **kwargs)
    return SSE(server, target, headers, source=source)


def expect_refused(stream, code, status):
    """Asserts an `SSE` was answered with the API's JSON error; returns its message."""
    assert stream.status == status, (stream.status, stream.error)
    assert stream.headers.get("x-amzn-errortype") == code, stream.headers
    assert stream.headers.get("content-type") == "application/json", stream.headers
    assert isinstance(stream.error, dict) and stream.error.get("message"), stream.error
    return stream.error["message"]


# -- WebSocket ---------------------------------------------------------------------------------

def open_ws(server, params=None, **kwargs):
    """`GET /events` upgraded to a WebSocket with the `websockets` client (it answers pings by
    itself). Raises `websockets.exceptions.InvalidStatus` when the upgrade is refused."""
    target, headers = events_target(server, params, **kwargs)
    return connect(f"ws://{server.host}{target}", additional_headers={k: v for k, v in headers.items() if k.lower() != "host"},
                   proxy=None, open_timeout=5, ping_interval=None, compression=None, close_timeout=2, legacy=True)


def ws_refusal(server, params=None, **kwargs):
    """The refusal of a WebSocket upgrade: (status, headers, parsed JSON body)."""
    try:
        ws = open_ws(server, params, **kwargs)
    except InvalidStatus as refused:
        response = refused.response
        return response.status_code, response.headers, json.loads(response.body)
    ws.close()
    raise AssertionError("the upgrade was accepted")


def ws_message(ws, timeout=5, events_only=True):
    """The next message, parsed; position messages are skipped unless `events_only` is false."""
    while True:
        message = json.loads(ws.recv(timeout=timeout))
        if not events_only or message.get("type") != "position":
            return message


class BareWebSocket:
    """A WebSocket client that answers nothing by itself and returns every frame the server
    sends, control frames included: (opcode, payload)."""

    def __init__(self, server, target, headers, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        head = (f"GET {target} HTTP/1.1\r\nHost: {server.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n")
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
        self.sock.sendall((head + "\r\n").encode())
        self.file = self.sock.makefile("rb")
        self.status = int(self.file.readline().split()[1])
        while self.file.readline() not in (b"\r\n", b""):
            pass

    def frame(self):
        """The next frame, or None when the server closed the connection."""
        try:
            first = self.file.read(2)
            if len(first) < 2:
                return None
            opcode, length = first[0] & 0x0F, first[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", self.file.read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self.file.read(8))[0]
            return opcode, self.file.read(length)
        except OSError:
            return None

    def send_close(self):
        mask = os.urandom(4)
        payload = struct.pack("!H", 1000)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x88, 0x80 | len(payload)]) + mask + masked)

    def close(self):
        self.sock.close()


# -- test helpers ------------------------------------------------------------------------------

def start_events_server(tmp_root, name):
    """A server for event tests: keep-alives every second, at most 3 streams per identity."""
    return start_server(tmp_root, name, ["--fast", "--events-keepalive", "1", "--events-per-identity", "3"])


class Identity:
    """A fresh identity with its own credential and sync helpers through it."""

    def __init__(self, server, pool=None):
        self.pool, self.identity = pool or new_id(), new_id()
        self.cred = server.mint(self.pool, self.identity)
        self.ds = Dataset(server.client_for(self.cred), self.pool, self.identity)
        self.server = server

    def open(self, params=None, **kwargs):
        return open_sse(self.server, params, key=self.cred["AccessKeyId"], secret=self.cred["SecretAccessKey"], **kwargs)

    def open_ws(self, params=None, **kwargs):
        return open_ws(self.server, params, key=self.cred["AccessKeyId"], secret=self.cred["SecretAccessKey"], **kwargs)

    def keys(self):
        return dict(key=self.cred["AccessKeyId"], secret=self.cred["SecretAccessKey"])

    def put(self, dataset, key="k", value="v", **kw):
        return self.ds.put(dataset, {key: value}, **kw)


def wait_metric(server, name, value, timeout=5):
    deadline = time.monotonic() + timeout
    while (current := metric(server, name)) != value:
        assert time.monotonic() < deadline, f"{name} is {current}, not {value}, after {timeout} s"
        time.sleep(0.02)


def first_block(stream):
    """The block a stream starts with: `retry` and the position it starts after."""
    block = stream.block()
    assert block is not EOF and block.get("retry") == "3000" and "data" not in block, block
    return int(block["id"])
