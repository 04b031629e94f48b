"""`GET /events`, the live event stream, against the real binary, as Server-Sent Events:
SigV4 (header and presigned URL), scopes (an identity hears only itself; an admin filters),
resume with `Last-Event-ID` from the log, keep-alives, bounds, and streams ending when clients
leave, their credential is revoked or the server stops. Every wait is on the events themselves,
with a timeout. The WebSocket form: test_events_websocket.py."""

import socket
import subprocess
import threading
import time

import pytest

from websockets.exceptions import ConnectionClosed

from conftest import BINARY, new_id, start_server
from event_clients import (EOF, SSE, Identity, events_target, expect_refused, first_block, metric, open_sse,
                           start_events_server, wait_metric, ws_message, ws_refusal)


# -- servers and helpers -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def events_server(tmp_root):
    s = start_events_server(tmp_root, "events")
    yield s
    assert s.stop(timeout=10) == 0


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
    deadline = time.monotonic() + 60
    while (again := a.open()).status != 200:
        assert time.monotonic() < deadline, again.error
        time.sleep(0.05)
    for s in streams[1:] + [other, again]:
        s.close()


def test_streams_per_client_address_are_bounded_however_many_identities_it_makes(tmp_root):
    """Issue 22, item 6e: identities are free, so one client could open `--events-per-identity`
    streams for each of any number of identities; the per-address bound stops it (429, counted),
    over SSE and WebSocket alike, while another address still gets in."""
    server = start_server(tmp_root, "events-per-source", ["--fast", "--events-per-source", "4"])
    try:
        pool = new_id()
        streams = [Identity(server, pool).open() for _ in range(3)]
        socket_stream = Identity(server, pool).open_ws()
        for s in streams:
            first_block(s)
        refused = metric(server, "syncledger_event_streams_refused_total", reason="per_source")
        message = expect_refused(Identity(server, pool).open(), "TooManyRequestsException", 429)
        assert "--events-per-source" in message and "127.0.0.1" in message, message
        status, headers, body = ws_refusal(server, **Identity(server, pool).keys())
        assert (status, headers["x-amzn-ErrorType"]) == (429, "TooManyRequestsException"), body
        assert metric(server, "syncledger_event_streams_refused_total", reason="per_source") == refused + 2
        # Another client address is not affected; a stream closed frees its address's place.
        elsewhere = Identity(server, pool)
        other = open_sse(server, source="127.0.0.2", key=elsewhere.cred["AccessKeyId"], secret=elsewhere.cred["SecretAccessKey"])
        assert other.status == 200, other.error
        streams[0].close()
        deadline = time.monotonic() + 60
        while (again := Identity(server, pool).open()).status != 200:
            assert time.monotonic() < deadline, again.error
            time.sleep(0.05)
        for s in streams[1:] + [other, again]:
            s.close()
        socket_stream.close()
    finally:
        assert server.stop(timeout=10) == 0


def test_behind_a_trusted_proxy_the_per_source_bound_counts_the_client_it_names(tmp_root):
    """The per-source bound finds the source as the identity throttle does (docs/identity.md,
    "The source"): from a `--trusted-proxy`, the client its X-Forwarded-For names, over SSE and
    WebSocket; from any other peer the header is ignored."""
    server = start_server(tmp_root, "events-per-source-proxy", ["--fast", "--events-per-source", "2", "--trusted-proxy", "127.0.0.1"])
    try:
        pool = new_id()
        behind = {"X-Forwarded-For": "192.0.2.50, 203.0.113.7"}
        streams = [Identity(server, pool).open(headers=behind) for _ in range(2)]
        assert all(s.status == 200 for s in streams), [s.error for s in streams]
        message = expect_refused(Identity(server, pool).open(headers={"X-Forwarded-For": "203.0.113.7"}), "TooManyRequestsException", 429)
        assert "203.0.113.7" in message, message
        status, headers, body = ws_refusal(server, headers={"X-Forwarded-For": "203.0.113.7"}, **Identity(server, pool).keys())
        assert status == 429 and "203.0.113.7" in body["message"], body
        # Another client behind the proxy, and the proxy's own requests, are other sources.
        others = [Identity(server, pool).open(headers={"X-Forwarded-For": "203.0.113.8"}), Identity(server, pool).open()]
        assert all(s.status == 200 for s in others), [s.error for s in others]
        # From a peer that is not trusted, the header names nobody: 127.0.0.2 is one source.
        untrusted = [Identity(server, pool).open(source="127.0.0.2", headers={"X-Forwarded-For": f"198.51.100.{i}"}) for i in range(3)]
        assert [s.status for s in untrusted] == [200, 200, 429], [s.error for s in untrusted]
        assert "127.0.0.2" in untrusted[2].error["message"]
        for s in streams + others + untrusted[:2]:
            s.close()
    finally:
        assert server.stop(timeout=10) == 0


def test_a_resume_from_further_back_than_the_bound_is_refused_with_a_re_sync_message(tmp_root):
    """Issue 22, item 6e: a resume reads every feed entry since its event id, whoever it is for:
    one from further back than `--events-max-resume` entries is refused (400) and says to
    re-sync; one within it resumes as usual."""
    server = start_server(tmp_root, "events-resume", ["--fast", "--events-max-resume", "20"])
    try:
        a = Identity(server)
        stream = a.open()
        first_block(stream)
        a.put("d", "k", "0")
        early = stream.event()
        stream.close()
        other = Identity(server)
        for i in range(25):   # other identities' entries push the id far back
            other.put("noise", "k", str(i))
        a.put("d", "k", "1")
        before = metric(server, "syncledger_event_streams_refused_total", reason="resume_too_old")
        for far in (early["_id"], "0"):
            message = expect_refused(a.open(headers={"Last-Event-ID": far}), "InvalidParameterException", 400)
            assert "--events-max-resume 20" in message and "re-sync" in message and "without an event id" in message, message
        status, headers, body = ws_refusal(server, {"lastEventId": early["_id"]}, **a.keys())
        assert (status, headers["x-amzn-ErrorType"]) == (400, "InvalidParameterException"), body
        assert metric(server, "syncledger_event_streams_refused_total", reason="resume_too_old") == before + 3
        # Within the bound it resumes as usual, and a fresh stream needs no event id.
        last = int(metric(server, "syncledger_log_sequence"))
        near = a.open(headers={"Last-Event-ID": str(last - 5)})
        assert first_block(near) == last - 5
        near.close()
        fresh = a.open()
        assert first_block(fresh) == last
        fresh.close()
    finally:
        assert server.stop(timeout=10) == 0


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
