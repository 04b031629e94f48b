"""Time limits and the connection limit of `syncledger serve`, with raw sockets against the
real binary: a head sent a byte at a time (slowloris), a silent connection, a body that stalls,
an idle keep-alive connection, eviction of the longest-idle connection at --max-connections,
refusal when every connection is busy with a request in progress, and /health under 1,100 idle
connections. Clients that stop reading their answers: test_slow_readers.py."""

import resource
import socket
import time

import pytest

from conftest import Dataset, dataset_path, new_id, start_server
from test_transport import connect, head_bytes, metric, read_response, seconds_until_closed, signed_headers


@pytest.fixture(scope="module")
def quick(tmp_root):
    """A server with short time limits: heads 1 s, bodies 1.5 s, idle connections 2 s."""
    s = start_server(tmp_root, "transport-quick", ["--fast", "--header-timeout", "1", "--body-timeout", "1.5",
                                                   "--idle-timeout", "2"])
    yield s
    assert s.stop() == 0


def test_a_request_head_sent_a_byte_at_a_time_is_cut_at_the_header_timeout(quick):
    """Slowloris: the head never completes. --header-timeout 1 closes it although bytes keep
    coming (each would reset an idle timer)."""
    before = metric(quick, "syncledger_http_refusals_total", reason="header_timeout")
    with connect(quick) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        start = time.monotonic()
        closed = False
        for i in range(40):                       # up to 8 s of trickling
            try:
                sock.sendall(b"X-Slow-%d: y\r\n" % i)
            except ConnectionError:
                closed = True
                break
            sock.settimeout(0.2)
            try:
                if sock.recv(1024) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except ConnectionError:
                closed = True
                break
        elapsed = time.monotonic() - start
    assert closed, "the trickling head was never cut"
    assert 0.7 <= elapsed <= 3.5, elapsed
    assert metric(quick, "syncledger_http_refusals_total", reason="header_timeout") == before + 1


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(quick):
    with connect(quick) as sock:
        assert seconds_until_closed(sock, 6) <= 3


def test_a_complete_head_within_the_header_timeout_is_served(quick):
    with connect(quick) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(0.5)                           # half the header timeout: still in time
        sock.sendall(f"Host: {quick.host}\r\n\r\n".encode())
        status, _, body = read_response(sock)
    assert status == 200 and b'"ok"' in body


def test_a_body_that_does_not_arrive_in_time_is_cut(quick):
    ds = Dataset(quick.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    before = ds.snapshot("d")
    path = dataset_path(ds.pool, ds.identity, "d")
    with connect(quick) as sock:
        sock.sendall(head_bytes(quick, "POST", path, {"Content-Length": "1000"}) + b"{" * 10)
        elapsed = seconds_until_closed(sock, 8)
    assert 1.0 <= elapsed <= 4, elapsed
    assert ds.snapshot("d") == before
    assert metric(quick, "syncledger_http_refusals_total", reason="body_timeout") >= 1


def test_an_idle_keep_alive_connection_is_closed_at_the_idle_timeout(quick):
    """--idle-timeout 2 (longer than the 1 s header timeout): between requests the idle timeout
    applies, not the header timeout."""
    with connect(quick) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {quick.host}\r\n\r\n".encode())
        assert read_response(sock)[0] == 200
        elapsed = seconds_until_closed(sock, 8)
    assert 1.5 <= elapsed <= 4.5, elapsed


# -- connections -------------------------------------------------------------------------------

def get_health(sock, server):
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: {server.host}\r\n\r\n".encode())
    answer = read_response(sock)
    assert answer is not None and answer[0] == 200, answer


def test_at_the_connection_limit_the_longest_idle_connection_makes_room(tmp_root):
    s = start_server(tmp_root, "max-conn", ["--fast", "--max-connections", "4", "--header-timeout", "30",
                                            "--idle-timeout", "30"])
    try:
        # Each is idle since its answer, in this order. (A connection that never sent a byte is
        # idle since the server took it in, which under a loaded CPU can come after a later
        # connection's answer: the test would not know which is oldest.)
        oldest = connect(s)
        get_health(oldest, s)
        others = [connect(s) for _ in range(3)]
        for sock in others:
            get_health(sock, s)
        # A fifth connection is served, and the longest-idle one was closed for it.
        with connect(s) as sock:
            get_health(sock, s)
        assert seconds_until_closed(oldest, 3) < 3
        for sock in others:
            get_health(sock, s)                   # still open
        assert metric(s, "syncledger_http_refusals_total", reason="connection_evicted") >= 1
        for sock in [oldest, *others]:
            sock.close()
    finally:
        s.stop()


def closed_at_once(sock):
    """Whether the server closed `sock` without an answer (True), or kept it open (False)."""
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except socket.timeout:
        return False


def test_past_the_connection_limit_with_every_connection_busy_a_new_one_is_closed_at_once(tmp_root):
    """Every connection has a request read and in progress (a long-poll of the feed) and nothing
    waiting to be sent: a newcomer is closed at once. (A connection whose client stopped reading
    its answer does make room once stalled: test_slow_readers.py.)"""
    s = start_server(tmp_root, "max-conn-busy", ["--fast", "--max-connections", "3"])
    polls = []
    try:
        query = "after=18446744073709551614&wait=6"
        deadline = time.monotonic() + 20
        while True:
            # Three long-polls of the feed, each a request in progress for 6 s.
            polls = [p for p in polls if p.fileno() != -1]
            while len(polls) < 3:
                sock = connect(s)
                sock.sendall(head_bytes(s, "GET", "/segments/feed?" + query, signed_headers(s, "GET", "/segments/feed?" + query, b"")))
                polls.append(sock)
            probe = connect(s)
            refused = closed_at_once(probe)
            probe.close()
            if refused:
                break
            # The probe came before a poll's head was read and took that poll's place: again.
            for p in polls:
                p.setblocking(False)
                try:
                    gone = p.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except ConnectionError:
                    gone = True
                if gone:
                    p.close()
                else:
                    p.setblocking(True)
            assert time.monotonic() < deadline, "a connection past the limit was never closed"
        for sock in polls:
            sock.close()
        assert metric_when_free(s, "connection_refused") >= 1
    finally:
        for sock in polls:
            sock.close()
        s.stop()


def metric_when_free(server, reason):
    """Reads a refusal counter once a connection is free for /metrics again."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return metric(server, "syncledger_http_refusals_total", reason=reason)
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_health_answers_under_1100_idle_connections(tmp_root):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"this test process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096), hard))
    s = start_server(tmp_root, "many-idle", ["--fast"])        # default limits: 1000 connections
    held = []
    try:
        for _ in range(1100):
            held.append(connect(s))
        start = time.monotonic()
        with connect(s) as sock:
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: {s.host}\r\n\r\n".encode())
            sock.settimeout(5)
            answer = read_response(sock)
        assert answer is not None and answer[0] == 200, answer
        assert time.monotonic() - start < 2
        assert metric(s, "syncledger_http_connections") <= 1000
    finally:
        for sock in held:
            sock.close()
        s.stop()
