"""`GET /events` over a WebSocket, against the real binary: the same events as SSE, resume
with `lastEventId`, the API's JSON errors for a refused upgrade, pings and dead peers, cleanup,
and how the upgrade sits in the guarded HTTP/1 channel (only a connection's first request, any
other upgrade served as plain HTTP, a first head that does not parse answered 400). SIGTERM and
revocation with a WebSocket open: test_events.py."""

import socket
import time

import pytest

from conftest import new_id
from event_clients import (BareWebSocket, Identity, events_target, first_block, metric, open_ws,
                           start_events_server, wait_metric, ws_message, ws_refusal)


@pytest.fixture(scope="module")
def events_server(tmp_root):
    s = start_events_server(tmp_root, "events-websocket")
    yield s
    assert s.stop(timeout=10) == 0


def test_a_websocket_gets_the_same_events_and_resumes_with_last_event_id(events_server):
    a = Identity(events_server)
    sse = a.open()
    first_block(sse)
    ws = a.open_ws(sign="query")     # a presigned URL, as a browser opens it
    start = ws_message(ws, events_only=False)
    assert start["type"] == "position" and int(start["id"]) >= 0, start
    a.ds.update("ws", [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}], DeviceId="tablet")
    message, event = ws_message(ws), sse.event()
    assert message["id"] == str(message["sequence"]) == event["_id"]
    assert {k: v for k, v in message.items() if k != "id"} == {k: v for k, v in event.items() if not k.startswith("_")}
    assert (message["datasetName"], message["syncCount"], message["deviceId"]) == ("ws", "1", "tablet")
    ws.close()
    a.put("ws", "k", "2"), a.put("other")                                      # missed
    resumed = a.open_ws({"lastEventId": message["id"]}, sign="query")
    missed = [ws_message(resumed) for _ in range(2)]
    assert [(m["datasetName"], m["syncCount"]) for m in missed] == [("ws", "2"), ("other", "1")]
    a.put("ws", "k", "3")
    assert (ws_message(resumed)["syncCount"], sse.events(3)[-1]["syncCount"]) == ("3", "3")
    resumed.close(), sse.close()


def test_a_refused_websocket_upgrade_gets_the_apis_json_error(events_server):
    a, b = Identity(events_server), Identity(events_server)
    status, headers, body = ws_refusal(events_server, sign=None)
    assert (status, headers["x-amzn-ErrorType"]) == (403, "NotAuthorizedException") and body["message"], body
    status, headers, body = ws_refusal(events_server, {"identityId": a.identity}, **b.keys())
    assert (status, headers["x-amzn-ErrorType"]) == (403, "NotAuthorizedException") and b.identity in body["message"]
    status, _, body = ws_refusal(events_server, {"lastEventId": "-1"}, **a.keys())
    assert status == 400 and "lastEventId" in body["message"]
    streams = [a.open() for _ in range(3)]     # the per-identity bound counts both kinds
    status, headers, body = ws_refusal(events_server, **a.keys())
    assert (status, headers["x-amzn-ErrorType"]) == (429, "TooManyRequestsException")
    for s in streams:
        s.close()


def test_a_websocket_upgrade_must_be_the_first_request_of_its_connection(events_server):
    target, headers = events_target(events_server)
    sock = socket.create_connection(("127.0.0.1", events_server.port), timeout=10)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: {events_server.host}\r\n\r\n".encode())
    sock.sendall((f"GET {target} HTTP/1.1\r\nHost: {events_server.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + extra + "\r\n").encode())
    data = b""
    while data.count(b"HTTP/1.1 ") < 2 or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    sock.close()
    second = data[data.index(b"HTTP/1.1 ", 1):]
    assert second.startswith(b"HTTP/1.1 400") and b"first request on its connection" in second, second


def test_the_server_pings_and_drops_a_websocket_that_never_answers(events_server):
    base = metric(events_server, "syncledger_event_streams")
    target, headers = events_target(events_server, {"identityPoolId": new_id()})
    bare = BareWebSocket(events_server, target, headers)
    assert bare.status == 101
    opcodes = []
    began = time.monotonic()
    while (frame := bare.frame()) is not None:
        opcodes.append(frame[0])
    # A position message, then a ping each second; the second tick finds the first unanswered.
    assert opcodes[0] == 0x1 and 0x9 in opcodes, opcodes
    assert time.monotonic() - began < 5
    bare.close()
    wait_metric(events_server, "syncledger_event_streams", base)


def test_websockets_that_clients_close_end_and_leave_nothing_behind(events_server):
    base = metric(events_server, "syncledger_event_streams")
    sockets = [open_ws(events_server, {"identityPoolId": new_id()}) for _ in range(10)]
    for ws in sockets:
        ws_message(ws, events_only=False)
    wait_metric(events_server, "syncledger_event_streams", base + 10)
    for ws in sockets[:5]:
        ws.close()                    # the closing handshake
    for ws in sockets[5:]:
        ws.socket.close()             # gone without one
    wait_metric(events_server, "syncledger_event_streams", base)
    wait_metric(events_server, "syncledger_event_stream_subscribers", base)


def test_a_first_request_asking_for_another_upgrade_is_served_as_usual(events_server):
    """Only a WebSocket upgrade of /events is upgraded; any other Upgrade header (curl --http2
    sends `Upgrade: h2c`) is ignored and the request served."""
    for path, upgrade, status in (("/health", "h2c", b"200"), ("/health", "websocket", b"200"), ("/events", "h2c", b"403")):
        sock = socket.create_connection(("127.0.0.1", events_server.port), timeout=10)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {events_server.host}\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                     f"Upgrade: {upgrade}\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, (path, upgrade, data)
            data += chunk
        sock.close()
        assert data.startswith(b"HTTP/1.1 " + status), (path, upgrade, data)


def test_a_first_request_that_does_not_parse_is_answered_400_at_once(events_server):
    """The upgrade handler reads a connection's first request before Hummingbird's loop
    exists; a head that does not parse still gets Hummingbird's 400, not a silent wait."""
    for raw in (b"GET /health HTTP/1.1\r\nHost no-colon\r\n\r\n", b"GARBAGE\r\n\r\n"):
        sock = socket.create_connection(("127.0.0.1", events_server.port), timeout=5)
        began = time.monotonic()
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sock.close()
        assert data.startswith(b"HTTP/1.1 400") and time.monotonic() - began < 2, data
