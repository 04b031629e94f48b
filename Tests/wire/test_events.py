"""`GET /events`, the live event stream, against the real binary: Server-Sent Events and
WebSocket, SigV4 (header and presigned URL), scopes (an identity hears only itself; an admin
filters), resume with `Last-Event-ID` from the log, keep-alives, bounds, and streams ending
when clients leave or the server stops. Every wait is on the events themselves, with a
timeout."""

import socket
import subprocess
import threading
import time

import pytest

from websockets.exceptions import ConnectionClosed

from conftest import BINARY, Dataset, new_id, start_server
from event_clients import (EOF, SSE, BareWebSocket, events_target, expect_refused, open_sse, open_ws, ws_message,
                           ws_refusal)


# -- servers and helpers -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def events_server(tmp_root):
    """Keep-alives every second, at most 3 streams per identity."""
    s = start_server(tmp_root, "events", ["--fast", "--events-keepalive", "1", "--events-per-identity", "3"])
    yield s
    assert s.stop(timeout=10) == 0


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


def metric(server, name, **labels):
    text = server.get("/metrics").text
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{wanted} is not in /metrics")


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


# -- events and scopes -------------------------------------------------------------------------

def test_a_change_reaches_its_identitys_stream_and_not_another(events_server):
    a, b = Identity(events_server), Identity(events_server)
    stream_a, stream_b = a.open(), b.open()
    assert stream_a.status == 200 and stream_a.headers["content-type"].startswith("text/event-stream"), stream_a.headers
    start = first_block(stream_a)
    first_block(stream_b)
    a.ds.update("settings", [{"Op": "replace", "Key": "color", "Value": "blue", "SyncCount": 0}], DeviceId="phone-1")
    event = stream_a.event()
    assert event["_event"] == "dataset" and event["_id"] == str(event["sequence"]) and event["sequence"] > start, event
    assert {k: v for k, v in event.items() if not k.startswith("_") and k != "sequence"} == {
        "source": "cognito-sync", "identityPoolId": a.pool, "identityId": a.identity, "datasetName": "settings",
        "syncCount": "1", "deleted": False, "deviceId": "phone-1"}
    # B's stream is in commit order: its first event is B's own change, so A's never reached it.
    b.put("mine")
    event_b = stream_b.event()
    assert (event_b["identityId"], event_b["datasetName"], event_b["syncCount"]) == (b.identity, "mine", "1"), event_b
    assert event_b["sequence"] > event["sequence"]
    a.ds.client.delete_dataset(**a.ds.ids("settings"))
    deleted = stream_a.event()
    assert (deleted["syncCount"], deleted["deleted"], deleted["deviceId"]) == ("2", True, None), deleted
    stream_a.close(), stream_b.close()


def test_an_identity_cannot_listen_to_another_identitys_events(events_server):
    a, b = Identity(events_server), Identity(events_server)
    for params in ({"identityPoolId": a.pool, "identityId": a.identity}, {"identityId": a.identity},
                   {"identityPoolId": a.pool}, {"identityPoolId": b.pool, "identityId": a.identity}):
        message = expect_refused(b.open(params), "NotAuthorizedException", 403)
        assert b.identity in message, message
    own = b.open({"identityPoolId": b.pool, "identityId": b.identity})
    assert own.status == 200
    own.close()


def test_unsigned_and_badly_signed_requests_are_refused(events_server):
    expect_refused(open_sse(events_server, sign=None), "NotAuthorizedException", 403)
    expect_refused(open_sse(events_server, secret="not-the-secret"), "NotAuthorizedException", 403)
    # A header added after signing, which the signature covers, breaks it.
    target, headers = events_target(events_server, {"datasetName": "x"})
    expect_refused(SSE(events_server, target.replace("datasetName=x", "datasetName=y"), headers), "NotAuthorizedException", 403)
    expect_refused(open_sse(events_server, {"nosuch": "1"}), "InvalidParameterException", 400)
    expect_refused(open_sse(events_server, {"identityId": "not an id"}), "InvalidParameterException", 400)


def test_a_browser_on_another_origin_may_open_and_resume_the_stream(events_server):
    """CORS: the stream and its errors allow any origin (they are authorized by signature, never
    by cookies), and the preflight a browser sends before a reconnect with Last-Event-ID is
    answered without a signature."""
    preflight = events_server.raw("OPTIONS", "/events", sign=False, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "last-event-id"})
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "last-event-id" in preflight.headers["access-control-allow-headers"]
    stream = open_sse(events_server, {"identityPoolId": new_id()}, headers={"Origin": "https://app.example"})
    assert stream.status == 200 and stream.headers["access-control-allow-origin"] == "*"
    stream.close()
    assert open_sse(events_server, sign=None).headers["access-control-allow-origin"] == "*"


def test_a_presigned_url_opens_the_stream_and_a_tampered_one_does_not(events_server):
    a = Identity(events_server)
    target, headers = events_target(events_server, key=a.cred["AccessKeyId"], secret=a.cred["SecretAccessKey"], sign="query")
    assert "X-Amz-Signature=" in target and "X-Amz-Expires=60" in target and "authorization" not in {k.lower() for k in headers}
    stream = SSE(events_server, target, headers)
    assert stream.status == 200, stream.error
    first_block(stream)
    a.put("presigned")
    event = stream.event()
    assert (event["identityId"], event["datasetName"]) == (a.identity, "presigned")
    stream.close()
    i = target.index("X-Amz-Signature=") + len("X-Amz-Signature=")
    tampered = target[:i] + ("0" if target[i] != "0" else "1") + target[i + 1:]
    expect_refused(SSE(events_server, tampered, headers), "NotAuthorizedException", 403)
    # lastEventId is part of what was signed: changing it breaks the signature.
    target, headers = events_target(events_server, {"lastEventId": str(event["sequence"])}, key=a.cred["AccessKeyId"],
                                    secret=a.cred["SecretAccessKey"], sign="query")
    assert SSE(events_server, target, headers).status == 200
    other = target.replace(f"lastEventId={event['sequence']}", "lastEventId=0")
    expect_refused(SSE(events_server, other, headers), "NotAuthorizedException", 403)


def test_an_admin_sees_every_identity_and_filters_by_dataset(events_server):
    pool = new_id()
    a, b = Identity(events_server, pool), Identity(events_server, pool)
    everything = open_sse(events_server, {"identityPoolId": pool})
    one_dataset = open_sse(events_server, {"identityPoolId": pool, "identityId": a.identity, "datasetName": "wanted"})
    first_block(everything), first_block(one_dataset)
    a.put("other"), b.put("wanted"), a.put("wanted")
    seen = [(e["identityId"], e["datasetName"]) for e in everything.events(3)]
    assert seen == [(a.identity, "other"), (b.identity, "wanted"), (a.identity, "wanted")]
    # Its first event is A's "wanted", though A's "other" and B's "wanted" came before it.
    only = one_dataset.event()
    assert (only["identityId"], only["datasetName"]) == (a.identity, "wanted")
    everything.close(), one_dataset.close()


# -- resume ------------------------------------------------------------------------------------

def test_last_event_id_resumes_with_exactly_the_missed_changes_then_live_ones(events_server):
    a, other = Identity(events_server), Identity(events_server)
    stream = a.open()
    first_block(stream)
    a.put("d", "k", "1")
    seen = stream.event()
    stream.close()
    a.put("d", "k", "2"), other.put("d"), a.put("e", "k", "1"), a.put("d", "k", "3")   # missed
    resumed = a.open(headers={"Last-Event-ID": seen["_id"]})
    assert first_block(resumed) == seen["sequence"]
    missed = resumed.events(3)
    assert [(e["datasetName"], e["syncCount"]) for e in missed] == [("d", "2"), ("e", "1"), ("d", "3")]
    assert [e["sequence"] for e in missed] == sorted({e["sequence"] for e in missed}) and missed[0]["sequence"] > seen["sequence"]
    a.put("d", "k", "4")
    live = resumed.event()
    assert (live["datasetName"], live["syncCount"]) == ("d", "4") and live["sequence"] > missed[-1]["sequence"]
    resumed.close()
    # The lastEventId parameter does the same (a browser's first connect cannot set headers).
    again = a.open({"lastEventId": str(missed[0]["sequence"])})
    assert [(e["datasetName"], e["syncCount"]) for e in again.events(3)] == [("e", "1"), ("d", "3"), ("d", "4")]
    again.close()


def test_resume_while_writes_go_on_has_no_gap_and_no_duplicate(events_server):
    """A stream resuming from the start of the log catches up while another thread writes: it
    must see every write of the dataset exactly once, in order, across the join to the hub."""
    a = Identity(events_server)
    count = 60
    done = threading.Event()

    def write():
        for i in range(count):
            a.put("busy", "k", str(i))
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    stream = a.open({"lastEventId": "0", "datasetName": "busy"})
    counts = [int(e["syncCount"]) for e in stream.events(count, timeout=20)]
    writer.join()
    assert counts == list(range(1, count + 1))
    a.put("busy", "k", "after")
    assert stream.event()["syncCount"] == str(count + 1)
    stream.close()


@pytest.mark.parametrize("bad", ["abc", "18446744073709551616", "-1", "+1", "1.5", "1 2", "1e3", "0x10",
                                 "99999999999999999999"])
def test_a_malformed_last_event_id_is_refused_400(events_server, bad):
    message = expect_refused(open_sse(events_server, headers={"Last-Event-ID": bad}), "InvalidParameterException", 400)
    assert "Last-Event-ID" in message, message
    expect_refused(open_sse(events_server, {"lastEventId": bad}), "InvalidParameterException", 400)


def test_an_event_id_past_the_end_of_the_log_is_refused_400(events_server):
    last = int(metric(events_server, "syncledger_log_sequence"))
    message = expect_refused(open_sse(events_server, headers={"Last-Event-ID": str(last + 1000)}), "InvalidParameterException", 400)
    assert "past the end of the log" in message
    assert events_server.get("/health").status_code == 200


# -- keep-alive, bounds, endings ---------------------------------------------------------------

def test_a_keep_alive_comment_arrives_at_the_configured_interval(events_server):
    stream = open_sse(events_server, {"identityPoolId": new_id()})
    start = first_block(stream)
    began = time.monotonic()
    block = stream.block(timeout=5)
    assert block is not EOF and block.get("comments") == ["keep-alive"], block
    assert time.monotonic() - began < 3
    assert int(block.get("id", start)) >= start
    stream.close()


def test_a_stream_ends_within_a_keep_alive_once_its_credential_is_revoked(events_server):
    a = Identity(events_server)
    stream, socket_stream = a.open(), a.open_ws()
    first_block(stream)
    before = metric(events_server, "syncledger_event_streams_closed_total", reason="revoked")
    out = subprocess.run([BINARY, "credentials", "revoke", a.cred["AccessKeyId"], "--data", events_server.data_dir],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    stream.ended(timeout=5)
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            socket_stream.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008, closed.value
    assert metric(events_server, "syncledger_event_streams_closed_total", reason="revoked") == before + 2
    expect_refused(a.open(), "NotAuthorizedException", 403)


def test_streams_per_identity_are_bounded_and_freed_on_disconnect(events_server):
    a = Identity(events_server)
    streams = [a.open() for _ in range(3)]
    assert all(s.status == 200 for s in streams)
    message = expect_refused(a.open(), "TooManyRequestsException", 429)
    assert "--events-per-identity" in message
    # An admin stream filtered to that identity counts too; another identity is unaffected.
    expect_refused(open_sse(events_server, {"identityPoolId": a.pool, "identityId": a.identity}), "TooManyRequestsException", 429)
    other = Identity(events_server).open()
    assert other.status == 200
    streams[0].close()
    deadline = time.monotonic() + 5
    while (again := a.open()).status != 200:
        assert time.monotonic() < deadline, again.error
        time.sleep(0.05)
    for s in streams[1:] + [other, again]:
        s.close()


def test_streams_that_clients_close_end_and_leave_nothing_behind(events_server):
    base = metric(events_server, "syncledger_event_streams")
    streams = [open_sse(events_server, {"identityPoolId": new_id()}) for _ in range(20)]
    for s in streams:
        first_block(s)
    wait_metric(events_server, "syncledger_event_stream_subscribers", base + 20)
    for s in streams:
        s.close()
    wait_metric(events_server, "syncledger_event_streams", base)
    wait_metric(events_server, "syncledger_event_stream_subscribers", base)


def test_with_the_stream_bound_reached_api_requests_are_still_served(tmp_root):
    server = start_server(tmp_root, "events-bounded", ["--fast", "--max-connections", "6", "--max-event-streams", "2"])
    try:
        a = Identity(server)
        streams = [open_sse(server, {"identityPoolId": a.pool}), a.open()]
        for s in streams:
            first_block(s)
        message = expect_refused(Identity(server).open(), "TooManyRequestsException", 429)
        assert "--max-event-streams" in message
        # Fill every other connection with idle sockets: a new request evicts one of them,
        # never a stream.
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        try:
            for _ in range(3):
                assert a.ds.client.list_datasets(IdentityPoolId=a.pool, IdentityId=a.identity)["Count"] >= 0
            a.put("still")
            for s in streams:
                assert s.event()["datasetName"] == "still"
        finally:
            for sock in idle:
                sock.close()
    finally:
        for s in streams:
            s.close()
        assert server.stop(timeout=10) == 0


def test_a_live_stream_outlives_the_connection_timeouts_and_sigterm_still_stops_the_server_promptly(tmp_root):
    server = start_server(tmp_root, "events-stop", ["--fast", "--idle-timeout", "0.5", "--header-timeout", "0.5",
                                                    "--body-timeout", "0.5", "--events-keepalive", "0.4"])
    a = Identity(server)
    streams = [a.open()] + [open_sse(server, {"identityPoolId": new_id()}) for _ in range(4)]
    for s in streams:
        first_block(s)
    socket_stream = a.open_ws()
    # Four keep-alives: the streams lived 1.6 s, past every timeout of 0.5 s, and still carry events.
    for _ in range(4):
        assert streams[0].block().get("comments") == ["keep-alive"]
    a.put("late")
    assert streams[0].event()["datasetName"] == "late"
    assert ws_message(socket_stream)["datasetName"] == "late"
    began = time.monotonic()
    assert server.stop(timeout=10) == 0
    assert time.monotonic() - began < 5
    for s in streams:
        s.ended()
        s.close()
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            socket_stream.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001, closed.value


# -- WebSocket ---------------------------------------------------------------------------------

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
