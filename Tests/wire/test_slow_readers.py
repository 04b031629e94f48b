"""Clients that ask and never read, against the real binary: slow readers beyond
--max-connections (GET /health from a fresh connection must answer within 2 s throughout, and
the server's memory stay bounded), answers stalled at the limit making room and closed at
--write-timeout, SSE and WebSocket event streams whose client stopped reading closed by the
same timeout (their slot returns), and where /metrics is served: to the admin signature on the
API's listener, unsigned on --metrics-listen.

Every "quiet" socket here has a small receive buffer and segment size, so that the server's
kernel buffers little for it and the server itself sees its writes wait, as for a client far
away; nothing reads its answers."""

import concurrent.futures
import os
import socket
import subprocess
import time

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

import dos_attacks as dos
import slow_readers
from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, SERVICE, Dataset, new_id, start_server
from event_clients import SSE, events_target, first_block, metric

MiB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    """{sample: value} of the unsigned /metrics of a --metrics-listen port."""
    response = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert response.status_code == 200, response.text[:300]
    out = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.1)
    return value


def signed_get(server, path, key=ADMIN_KEY, secret=ADMIN_SECRET):
    """The bytes of a keep-alive GET of `path` signed with SigV4 (valid to resend for minutes)."""
    request = AWSRequest(method="GET", url=f"http://{server.host}{path}")
    SigV4Auth(Credentials(key, secret), SERVICE, REGION).add_auth(request)
    head = f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "host")
    return (head + "\r\n").encode()


# -- the attack --------------------------------------------------------------------------------

def test_slow_readers_beyond_the_connection_limit_do_not_lock_out_health(tmp_root):
    """The attack of issue 22: 70 sockets against --max-connections 50, each pipelining 300
    GET /metrics and never reading. Before, every connection stayed busy (never evicted, no
    timeout on a write that made no progress): /health was refused for as long as they stayed
    open (75 s observed with 1,105 sockets at the defaults) and the server grew from 42 to
    754 MiB. Now /health answers within 2 s every second, the server closes every attacker
    (past 8 pipelined requests the next is refused and the connection closed) and its memory
    stays within 64 MiB of rest."""
    limit, sockets = 50, 70
    server = start_server(tmp_root, "slow-readers", ["--fast", "--max-connections", str(limit), "--write-timeout", "5"])
    try:
        result = slow_readers.attack(server.port, server.process.pid, sockets, 300, seconds=12)
        assert result.opened == sockets
        assert result.probes and not result.refused(2.0), f"/health refused or late: {result.refused(2.0)}"
        assert result.peak_rss - result.rest_rss < 64 * MiB, (result.rest_rss / MiB, result.peak_rss / MiB)
        still = [i for i, t in enumerate(result.closed_at) if t is None]
        assert not still, f"{len(still)} attackers still open after 12 s"
        assert metric(server, "syncledger_http_refusals_total", reason="too_many_pipelined") >= sockets - limit
    finally:
        server.stop()


def test_stalled_answers_make_room_at_the_limit_and_are_closed_at_the_write_timeout(tmp_root):
    """Clients with the admin credential each pipeline 16 signed GET /metrics (within the
    pipelining cap, raised to 16 here) and read nothing: their answers stall, and every connection is busy. A
    newcomer takes the place of the one stalled the longest (before: refused at once), and the
    write timeout closes the rest. The metrics listener answers throughout."""
    limit, write_timeout = 8, 6
    metrics_port = free_port()
    server = start_server(tmp_root, "stalled", ["--fast", "--max-connections", str(limit), "--write-timeout", str(write_timeout),
                                                "--max-pipelined-requests", "16", "--metrics-listen", f"127.0.0.1:{metrics_port}"])
    attackers = []
    try:
        # Make /metrics long enough that 16 answers are far more than the kernel buffers.
        Dataset(server.client(), new_id(), new_id()).put("d", {"k": "v"})
        request = signed_get(server, "/metrics")
        for _ in range(limit):
            s = slow_readers.slow_reader(server.port, "/metrics", 16, request)
            assert s is not None
            attackers.append(s)
        stalled = 'syncledger_http_stalled_connections'
        wait_for(lambda: scrape(metrics_port).get(stalled) == limit, write_timeout - 1, f"{limit} stalled connections")
        status, took = dos.health(server.port, timeout=2)
        assert status == 200 and took < 2, (status, took)
        samples = scrape(metrics_port)
        assert samples['syncledger_http_refusals_total{reason="stalled_connection_evicted"}'] >= 1, samples
        assert samples['syncledger_http_refusals_total{reason="connection_refused"}'] == 0, samples
        # The others: closed once they have stalled for the write timeout.
        times = slow_readers.wait_hung_up(attackers, write_timeout + 10)
        assert all(t is not None for t in times), times
        assert scrape(metrics_port)['syncledger_http_refusals_total{reason="write_timeout"}'] >= limit - 1
        assert wait_for(lambda: scrape(metrics_port)["syncledger_http_connections"] == 0, 5, "connections back to 0")
    finally:
        dos.close_all(attackers)
        server.stop()


def test_a_request_read_and_in_progress_still_keeps_its_connection(tmp_root):
    """What did not change: connections busy with requests in progress whose clients read
    (long-polls of the feed: nothing waits to be sent) are never cut for a newcomer, and the
    newcomer is closed at once. Only stalled answers make room."""
    server = start_server(tmp_root, "busy-reading", ["--fast", "--max-connections", "2", "--write-timeout", "3"])
    polls = []
    try:
        query = "after=18446744073709551614&wait=8"
        for _ in range(2):
            s = dos.connect(server.port)
            s.sendall(signed_get(server, "/segments/feed?" + query))
            polls.append(s)
        dos.wait_read_by_server(server.port, polls)
        # Both requests were read and wait for the feed: a newcomer finds no room.
        probe = dos.connect(server.port)
        assert slow_readers.wait_hung_up([probe], 2)[0] is not None, "the newcomer was not closed at once"
        probe.close()
        # The polls are untouched (a write timeout of 3 s does not apply: nothing waits to be sent).
        assert slow_readers.wait_hung_up(polls, 4) == [None, None]
    finally:
        dos.close_all(polls)
        server.stop()


# -- event streams -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def events_server(tmp_root):
    """At most one event stream, a write timeout of 3 s, keep-alives rarer than the tests last
    (so that an unanswered WebSocket ping does not end a stream first), and 600 entries in the
    log: the history a stream replays from position 0 is far more than the kernel buffers for
    a quiet socket."""
    s = start_server(tmp_root, "stalled-events", ["--fast", "--write-timeout", "3", "--max-event-streams", "1",
                                                  "--events-keepalive", "60"])
    pool = new_id()

    def fill(count):
        client = s.client()
        for _ in range(count):
            Dataset(client, pool, new_id()).put("d", {"k": "v"})

    with concurrent.futures.ThreadPoolExecutor(6) as executor:
        list(executor.map(fill, [100] * 6))
    yield s
    assert s.stop() == 0


def open_quietly(server, websocket=False):
    """`GET /events` from position 0 (the admin's stream of every identity) on a quiet socket
    that never reads, as SSE or as a WebSocket upgrade."""
    target, headers = events_target(server, {}, headers={"Last-Event-ID": "0"})
    s = slow_readers.quiet_socket(server.port)
    assert s is not None
    head = f"GET {target} HTTP/1.1\r\nHost: {server.host}\r\n"
    if websocket:
        head += ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n")
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
    s.sendall((head + "\r\n").encode())
    return s


@pytest.mark.parametrize("websocket", [False, True], ids=["sse", "websocket"])
def test_an_event_stream_whose_client_stopped_reading_is_closed_and_gives_back_its_slot(events_server, websocket):
    """The stream replays the log and its client reads nothing: its bytes stall, and the write
    timeout (3 s) closes the connection; the stream's place under --max-event-streams 1 comes
    back, so a new stream opens. Before, nothing timed out a write that made no progress: the
    stream, and its slot, stayed until the client went away."""
    server = events_server
    # The only slot is free (a stream of an earlier test may still be closing).
    wait_for(lambda: metric(server, "syncledger_event_streams") == 0, 5, "no stream open")
    before = metric(server, "syncledger_http_refusals_total", reason="write_timeout")
    s = open_quietly(server, websocket)
    try:
        wait_for(lambda: metric(server, "syncledger_event_streams") == 1, 5, "the stream opened")
        closed = slow_readers.wait_hung_up([s], 3 + 10)[0]
        assert closed is not None, "the stalled stream was not closed"
        assert metric(server, "syncledger_http_refusals_total", reason="write_timeout") == before + 1
        wait_for(lambda: metric(server, "syncledger_event_streams") == 0, 5, "the stream's slot came back")
    finally:
        s.close()
    # Its slot is free: a stream that reads opens, and hears the history from its start.
    target, headers = events_target(server, {}, headers={"Last-Event-ID": "0"})
    stream = SSE(server, target, headers)
    try:
        assert stream.status == 200, stream.error
        assert first_block(stream) is not None
    finally:
        stream.close()


# -- where /metrics is served -------------------------------------------------------------------

def test_metrics_needs_the_admin_signature_on_the_api_listener(server):
    unsigned = server.get("/metrics")
    assert unsigned.status_code == 403, unsigned.text[:300]
    assert unsigned.headers.get("x-amzn-ErrorType") == "NotAuthorizedException"
    assert "not signed" in unsigned.json()["message"]
    pool, identity = new_id(), new_id()
    cred = server.mint(pool, identity)
    theirs = server.raw("GET", "/metrics", key=cred["AccessKeyId"], secret=cred["SecretAccessKey"])
    assert theirs.status_code == 403 and "--metrics-listen" in theirs.json()["message"], theirs.content[:300]
    assert "# TYPE syncledger_requests_total counter" in server.metrics()


def test_metrics_listen_serves_metrics_unsigned_on_its_own_listener_only(tmp_root):
    port = free_port()
    server = start_server(tmp_root, "metrics-listen", ["--fast", "--metrics-listen", f"127.0.0.1:{port}"])
    try:
        samples = wait_for(lambda: scrape_or_none(port), 10, "the metrics listener")
        assert "syncledger_http_connections" in samples
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=10).json() == {"status": "ok"}
        other = requests.get(f"http://127.0.0.1:{port}/identitypools", timeout=10)
        assert other.status_code == 404 and "--metrics-listen" in other.text
        # The API's listener still wants the admin signature.
        assert server.get("/metrics").status_code == 403
        assert "syncledger_http_connections" in server.metrics()
    finally:
        assert server.stop() == 0


def scrape_or_none(port):
    try:
        return scrape(port)
    except (requests.ConnectionError, AssertionError):
        return None


@pytest.mark.parametrize("value, says", [("nonsense", "HOST:PORT"), ("127.0.0.1:70000", "0-65535"), ("[::1]9090", "HOST:PORT")])
def test_a_bad_metrics_listen_address_is_refused_at_start(tmp_root, value, says):
    out = subprocess.run([BINARY, "serve", "--data", os.path.join(tmp_root, "never"), "--metrics-listen", value],
                         capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert "--metrics-listen" in out.stderr.decode() and says in out.stderr.decode(), out.stderr.decode()


def test_a_metrics_listen_port_in_use_is_refused_at_start(tmp_root):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = subprocess.run([BINARY, "serve", "--data", os.path.join(tmp_root, "metrics-taken"), "--port", "0",
                              "--metrics-listen", f"127.0.0.1:{port}"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    message = out.stderr.decode()
    assert f"--metrics-listen 127.0.0.1:{port}" in message and "already in use" in message, message
