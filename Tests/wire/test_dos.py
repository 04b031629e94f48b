"""Denial of service: idle connections, slowloris heads, slow bodies, too many connections, and
large bodies held open. Each test runs its own server with small limits:

    --idle-timeout S        a connection with no request in progress for S seconds is closed
    --header-timeout S      a request head must be complete within S seconds of the connection
                            opening (or of the previous response)
    --body-timeout S        a request body must be complete within S seconds of its head
    --max-connections N     connections beyond N are closed at once after accept
    --max-body-bytes N      a larger declared body is refused before it is read
    --max-buffered-body-bytes N  body bytes are counted as they arrive (a declared length takes
                            nothing); a request whose arriving bytes would pass N gets 429
                            TooManyRequestsException, except within each connection's share
                            (a quarter of N split over --max-connections)

Every wait is on a socket with a timeout or a condition polled against a deadline (see
dos_attacks.py, shared with tools/attack).

SYNCLEDGER_DOS_DROP_UNKNOWN_FLAGS=1 drops the flags an older binary does not have, to see how
it behaves without them (the tests then show what it lacks; they are not expected to pass)."""

import contextlib
import functools
import hashlib
import os
import re
import subprocess
import time

import pytest

import conftest
import dos_attacks as dos
from conftest import ADMIN_KEY, ADMIN_SECRET, new_id

MiB = 1 << 20
ADMIN = (ADMIN_KEY, ADMIN_SECRET, None)


@functools.lru_cache(maxsize=1)
def _known_flags():
    out = subprocess.run([conftest.BINARY, "serve", "--help"], capture_output=True, timeout=30)
    return set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout.decode() + out.stderr.decode()))


def serve(tmp_root, name, *args):
    """A server of its own (fast mode) with these limits."""
    args = list(args)
    if os.environ.get("SYNCLEDGER_DOS_DROP_UNKNOWN_FLAGS"):
        known, kept, i = _known_flags(), [], 0
        while i < len(args):
            if args[i].startswith("--") and args[i] not in known:
                print(f"dropped {args[i]} {args[i + 1]} (unknown to {conftest.BINARY})")
                i += 2
                continue
            kept.append(args[i])
            i += 1
        args = kept
    return conftest.Server(os.path.join(tmp_root, name), ["--fast", *args])


@contextlib.contextmanager
def running(server):
    """Stops the server after the block; it must then exit 0 on SIGTERM (unless the block
    already failed)."""
    try:
        yield server
    except BaseException:
        server.stop(timeout=15)
        raise
    code = server.stop(timeout=15)
    assert code == 0, f"the server did not exit 0 within 15 s of SIGTERM after the attack (exit {code})"


def wait_until(condition, seconds, step=0.1):
    """Polls `condition()` until it returns a true value or `seconds` pass; returns the last
    value (polling a condition against a deadline, not sleeping in place of a signal)."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


def fmt(times):
    return ", ".join("open" if t is None else f"{t:.1f} s" for t in times)


# -- (a) many idle connections ---------------------------------------------------------------

IDLE = 1100


def test_idle_connections_do_not_starve_health(tmp_root):
    """1,100 idle connections, more than the usual default of 1,024 descriptors, are held and
    /health still answers at once. The server gets that default soft limit (as a service
    would) and --max-connections 1200, so it must manage its descriptors itself."""
    if dos.raise_own_nofile(IDLE + 1000) < IDLE + 500:
        pytest.skip("this process may not open enough descriptors for the test's own sockets")
    with dos.nofile_limit(1024):
        server = serve(tmp_root, "dos-idle", "--max-connections", "1200")
    with running(server):
        socks, errors = dos.open_idle(server.port, IDLE)
        try:
            assert not errors, f"only {len(socks)} of {IDLE} connections could be opened: {errors[0]}"
            status, seconds = dos.health(server.port, timeout=5)
            assert status == 200, (f"GET /health with {IDLE} idle connections held: {status} after {seconds:.1f} s "
                                   f"(the server has {dos.open_fds(server.process.pid)} descriptors open)")
            assert seconds < 5
            # It holds them (each accepted connection is one descriptor of the server).
            accepted = wait_until(lambda: dos.open_fds(server.process.pid) >= IDLE, 5)
            assert accepted, (f"the server holds {dos.open_fds(server.process.pid)} descriptors, "
                              f"not the {IDLE} idle connections under --max-connections 1200")
            closed = sum(1 for s in socks if dos.poll_closed(s))
            assert closed == 0, f"the server closed {closed} of {IDLE} idle connections long before any timeout"
        finally:
            dos.close_all(socks)
        assert server.process.poll() is None


# -- (b) slowloris and slow bodies -----------------------------------------------------------

HEADER_TIMEOUT = 2
MARGIN = 3


def test_slowloris_sockets_are_closed(tmp_root):
    server = serve(tmp_root, "dos-slowloris", "--header-timeout", str(HEADER_TIMEOUT), "--idle-timeout", "30")
    with running(server):
        # A head that arrives in pieces, complete well within the header timeout, is served.
        s = dos.connect(server.port)
        try:
            head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n".encode()
            for piece in (head[:10], head[10:30], head[30:]):
                readable, _ = dos.ready([s], 0.3)
                assert not readable, "the server answered or closed before the head was complete"
                s.sendall(piece)
            status, _, _ = dos.read_response(s, time.monotonic() + 5)
            assert status == 200
        finally:
            s.close()

        # Eight sockets that send a partial head, then a byte a second, forever.
        health = []
        times = dos.slowloris(server.port, 8, HEADER_TIMEOUT + MARGIN,
                              on_tick=lambda elapsed: health.append(dos.health(server.port, timeout=2)))
        assert all(t is not None for t in times), (f"slowloris sockets still open {HEADER_TIMEOUT + MARGIN} s after "
                                                   f"connecting with --header-timeout {HEADER_TIMEOUT}: closed at {fmt(times)}")
        assert health and all(status == 200 for status, _ in health), f"GET /health during the attack: {health}"
        assert server.process.poll() is None


def test_slow_body_is_cut_off(tmp_root):
    body_timeout = 2
    server = serve(tmp_root, "dos-slow-body", "--body-timeout", str(body_timeout), "--header-timeout", "10",
                   "--idle-timeout", "30")
    with running(server):
        # A body that arrives in two pieces within the timeout gets a normal answer.
        body = b"not a segment"
        s = dos.connect(server.port)
        try:
            s.sendall(dos.signed_head(server.port, "POST", "/segments", hashlib.sha256(body).hexdigest(), len(body), ADMIN)
                      + body[:5])
            readable, _ = dos.ready([s], 0.5)
            assert not readable, "the server answered or closed before the body was complete"
            s.sendall(body[5:])
            status, headers, _ = dos.read_response(s, time.monotonic() + 5)
            assert status == 400 and headers.get("x-amzn-errortype") == "InvalidParameterException", (status, headers)
        finally:
            s.close()
        # Bodies that trickle in a byte a second are cut off.
        times = dos.slow_body(server.port, 4, body_timeout + MARGIN, ADMIN)
        assert all(t is not None for t in times), (f"slow-body connections still open {body_timeout + MARGIN} s after "
                                                   f"their heads with --body-timeout {body_timeout}: closed at {fmt(times)}")
        status, _ = dos.health(server.port)
        assert status == 200


# -- (c) idle timeout ------------------------------------------------------------------------

def test_idle_connections_are_closed(tmp_root):
    idle_timeout = 2
    server = serve(tmp_root, "dos-idle-timeout", "--idle-timeout", str(idle_timeout), "--header-timeout", "10")
    with running(server):
        silent = dos.connect(server.port)          # never sends anything
        used = dos.connect(server.port)            # one request, then nothing
        active = dos.connect(server.port)          # a request every second: never idle that long
        socks = [silent, used, active]
        try:
            assert dos.get(server.port, sock=used, keep_alive=True)[0] == 200
            answers = []

            def tick(elapsed, still):
                try:
                    answers.append(dos.get(server.port, sock=active, keep_alive=True, timeout=2)[0])
                except (TimeoutError, ConnectionError, OSError) as error:
                    answers.append(repr(error))
                return []

            # All three watched for the whole time: the busy one must stay open throughout.
            times = dos.wait_closed(socks, idle_timeout + MARGIN, on_tick=tick, tick=1.0)
            assert all(t is not None for t in times[:2]), (f"idle connections still open {idle_timeout + MARGIN} s later "
                                                           f"with --idle-timeout {idle_timeout}: silent {fmt(times[:1])}, "
                                                           f"after one request {fmt(times[1:2])}")
            assert min(times[:2]) >= idle_timeout / 2, f"idle connections closed too early: {fmt(times[:2])}"
            assert times[2] is None and len(answers) >= idle_timeout + 2 and all(a == 200 for a in answers), \
                f"a connection busy with a request every second was not served throughout: closed {fmt(times[2:])}, {answers}"
        finally:
            dos.close_all(socks)


# -- (d) connection limit --------------------------------------------------------------------

def test_the_connection_limit_evicts_the_longest_idle(tmp_root):
    """At --max-connections, a new connection takes the place of the one idle the longest (so
    idle sockets cannot lock everyone out), and the server never holds more than the limit.
    (When every connection is in the middle of a request, the newcomer is closed at once:
    test_transport_limits.py.)"""
    limit = 20
    server = serve(tmp_root, "dos-max-connections", "--max-connections", str(limit), "--idle-timeout", "60",
                   "--header-timeout", "60")
    with running(server):
        holders = [dos.connect(server.port) for _ in range(limit)]
        extra = []
        try:
            for h in holders:   # each one served in turn, so the first is idle the longest
                assert dos.get(server.port, sock=h, keep_alive=True)[0] == 200
            extra = [dos.connect(server.port) for _ in range(5)]
            for e in extra:     # each newcomer is served ...
                assert dos.get(server.port, sock=e, keep_alive=True)[0] == 200
            # ... in the place of the five idle the longest, which the server closed.
            times = dos.wait_closed(holders[:5], 2)
            assert all(t is not None for t in times), f"the longest-idle connections were not closed: {fmt(times)}"
            for h in holders[5:]:
                assert dos.get(server.port, sock=h, keep_alive=True)[0] == 200
        finally:
            dos.close_all(holders + extra)
        # Once they are gone, new connections are served again.
        assert wait_until(lambda: dos.health(server.port, timeout=1)[0] == 200, 5), \
            "new connections were not served after the holders closed"


# -- (e) large bodies held open ----------------------------------------------------------------

def test_large_bodies_held_open_are_bounded(tmp_root):
    """32 bodies of 8 MiB sent round-robin up to one byte short, against a 32 MiB budget. The
    budget is taken as bytes arrive, so the 429s come while the bodies are being sent (each
    refused connection had sent some of its body; none is refused for its declared length), as
    the pool fills; each refusal gives its bytes back to the others, until at most
    budget / max_body bodies are held."""
    max_body, budget, count = 8 * MiB, 32 * MiB, 32
    server = serve(tmp_root, "dos-large-bodies", "--max-body-bytes", str(max_body),
                   "--max-buffered-body-bytes", str(budget))
    with running(server):
        pid = server.process.pid
        pool, identity = new_id(), new_id()
        cred = server.mint(pool, identity)
        as_identity = (cred["AccessKeyId"], cred["SecretAccessKey"], None)
        for _ in range(5):
            dos.health(server.port)
        base = dos.proc_status(pid)["VmHWM"]
        # Any identity: many UpdateRecords bodies just under the limit, each held one byte short
        # of complete.
        path = dos.update_records_path(pool, identity, "big")
        result = dos.large_body_attack(server.port, pid, count, max_body - 1, as_identity, path=path,
                                       content_type="application/json", seconds=30)
        growth = max(result.hwm, result.peak_rss) - base
        bound = 2 * budget + 48 * MiB
        refused = [i for i, (status, _) in result.answers.items() if status == 429]
        summary = (f"{count} bodies of {(max_body - 1) / MiB:.1f} MiB, {sum(result.sent) / MiB:.0f} MiB sent; "
                   f"answers {result.statuses()}, closed without an answer {len(result.closed)}; "
                   f"peak RSS {base / MiB:.0f} MiB at rest -> {max(result.hwm, result.peak_rss) / MiB:.0f} MiB")
        print(summary)
        assert growth <= bound, (f"peak RSS grew by {growth / MiB:.0f} MiB under the attack, more than "
                                 f"{bound / MiB:.0f} MiB (2 x --max-buffered-body-bytes + 48 MiB): {summary}")
        # Beyond the budget, requests are refused: a 429 (which a client still sending may see
        # only as a reset, so a close without an answer counts as refused too).
        wanted = count - budget // max_body - 1
        assert len(refused) + len(result.closed) >= wanted, (
            f"only {len(refused)} requests got 429 (and {len(result.closed)} were closed); with a budget of "
            f"{budget / MiB:.0f} MiB at least {wanted} of {count} must be refused: {summary}")
        assert refused, f"no request got 429: {summary}"
        assert all(result.sent[i] > 0 for i in refused), \
            f"requests were refused before they sent a byte of their bodies (by declared length): {summary}"
        assert all(status == 429 and kind == "TooManyRequestsException" for status, kind in result.answers.values()), \
            f"early answers other than 429 TooManyRequestsException: {result.answers}"
        # The budget comes back: a request with a 2 MiB body is judged on its content again (not
        # JSON: 400).
        body = b"\0" * (2 * MiB)

        def judged():
            r = server.raw("POST", path, body=body, headers={"Content-Type": "application/json"},
                           key=as_identity[0], secret=as_identity[1])
            return r if r.status_code != 429 else None

        r = wait_until(judged, 5, step=0.2)
        assert r and r.status_code == 400 and r.headers.get("x-amzn-ErrorType") == "InvalidParameterException", \
            f"after the attack a 2 MiB body was not judged on its content: {r and (r.status_code, r.text[:200])}"
        assert dos.health(server.port)[0] == 200


# -- (f) a body over the limit is refused before it is read ---------------------------------------

@pytest.mark.parametrize("variant", ["10-GiB", "limit+1", "10-GiB-expect-continue", "chunked-over-limit"])
def test_oversize_body_is_refused_before_it_is_read(tmp_root, variant):
    limit = 1 * MiB
    server = serve(tmp_root, f"dos-oversize-{variant}", "--max-body-bytes", str(limit))
    with running(server):
        s = dos.connect(server.port)
        try:
            if variant == "chunked-over-limit":
                head = dos.signed_head(server.port, "POST", "/segments", dos.NEVER_SENT_HASH, 0, ADMIN)
                head = head.replace(b"Content-Length: 0\r\n", b"Transfer-Encoding: chunked\r\n")
                size = limit + 64 * 1024
                s.sendall(head + b"%x\r\n" % (10 << 30) + b"\0" * size)   # a 10 GiB chunk, never finished
            else:
                declared = 10 << 30 if variant.startswith("10-GiB") else limit + 1
                s.sendall(dos.oversize_head(server.port, declared, ADMIN, expect_continue="expect" in variant))
            try:
                status, headers, body = dos.read_response(s, time.monotonic() + 5)
            except TimeoutError:
                pytest.fail(f"{variant}: no answer within 5 s; the server waits for (or reads) a body over "
                            f"--max-body-bytes {limit} instead of refusing it")
            except ConnectionError as error:
                pytest.fail(f"{variant}: the server closed the connection without an answer: {error}")
            assert 400 <= status < 500, (variant, status, headers, body[:200])
        finally:
            s.close()
        assert dos.health(server.port)[0] == 200


# -- (g) bodies declared but not sent ------------------------------------------------------------

def declared_head(port, path, length):
    """An unsigned POST head declaring a `length`-byte body (which it never sends): anyone can
    send it, and the server must wait for the body before it can judge the request."""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-amz-json-1.1\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def answered(sock):
    """The status of an answer waiting on `sock`, "closed" when the server closed it, None when
    nothing came."""
    readable, _ = dos.ready([sock], 0)
    if not readable:
        return None
    try:
        return dos.read_response(sock, time.monotonic() + 2)[0]
    except (ConnectionError, TimeoutError):
        return "closed"


def transport_metric(server, sample):
    for line in server.metrics().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{sample} is not in /metrics")


def test_bodies_declared_and_never_sent_do_not_take_the_budget(tmp_root):
    """Connections that declare the largest body and send nothing hold none of
    --max-buffered-body-bytes (it is taken as bytes arrive): a signed UpdateRecords from boto3
    still succeeds. Before, each head took its declared length at once, and four of them
    pinned the whole budget for --body-timeout: everyone else got 429."""
    max_body, count = 1 * MiB, 16
    server = serve(tmp_root, "dos-declared", "--max-body-bytes", str(max_body),
                   "--max-buffered-body-bytes", str(4 * max_body), "--body-timeout", "60", "--header-timeout", "60")
    with running(server):
        pool, identity = new_id(), new_id()
        path = dos.update_records_path(pool, identity, "d")
        attackers = [dos.connect(server.port) for _ in range(count)]
        try:
            for s in attackers:
                s.sendall(declared_head(server.port, path, max_body))
            dos.wait_read_by_server(server.port, attackers)
            # Anyone's UpdateRecords (here the identity's own, with boto3 and no retries).
            honest = conftest.Dataset(server.client_for(server.mint(pool, identity)), pool, identity)
            honest.put("d", {"k": "v"})
            assert honest.records("d") == {"k": ("v", 1)}
            answers = [answered(s) for s in attackers]
            assert answers == [None] * count, f"the declared bodies were answered or closed: {answers}"
            assert transport_metric(server, "syncledger_http_buffered_body_bytes") == 0
            # The connection asking for /metrics may itself still count as receiving while it is
            # answered (its request's end is read after the answer starts): count or count + 1.
            receiving = transport_metric(server, 'syncledger_http_connections_by_state{state="receiving"}')
            assert receiving in (count, count + 1), receiving
        finally:
            dos.close_all(attackers)


def test_connections_waiting_for_their_bodies_do_not_lock_out_health(tmp_root):
    """--max-connections sockets each send a head declaring a 1-byte body and never send it.
    They are still receiving, not busy: a new connection takes the place of the one whose
    request started the longest ago, round after round. Before, they counted as busy and every
    new connection — /health too — was closed at once until --body-timeout."""
    limit = 8
    server = serve(tmp_root, "dos-declared-connections", "--max-connections", str(limit), "--body-timeout", "60",
                   "--header-timeout", "60", "--idle-timeout", "60")
    with running(server):
        attackers = []
        try:
            for _ in range(limit):      # one at a time, so that their requests start in this order
                s = dos.connect(server.port)
                s.sendall(declared_head(server.port, "/segments", 1))
                dos.wait_read_by_server(server.port, [s])
                attackers.append(s)
            status, _ = dos.health(server.port)
            assert status == 200, f"GET /health with {limit} connections waiting for 1-byte bodies: {status}"
            times = dos.wait_closed(attackers[:1], 5)
            assert times[0] is not None, "the connection whose request started the longest ago was not closed to make room"
            # The attacker reconnects and repeats (if the server still holds the first probe, it
            # makes room in its place: idle goes first): the next-oldest makes room this time.
            again = dos.connect(server.port)
            attackers.append(again)
            again.sendall(declared_head(server.port, "/segments", 1))
            dos.wait_read_by_server(server.port, [again])
            status, _ = dos.health(server.port)
            assert status == 200, f"GET /health after the attacker reconnected: {status}"
            times = dos.wait_closed(attackers[1:2], 5)
            assert times[0] is not None, "the connection whose request started the longest ago was not closed to make room"
            still = [i for i, s in enumerate(attackers) if not dos.poll_closed(s)]
            assert still == list(range(2, limit + 1)), f"open: {still}"
            assert transport_metric(server, 'syncledger_http_refusals_total{reason="connection_refused"}') == 0
            assert transport_metric(server, 'syncledger_http_refusals_total{reason="connection_evicted"}') >= 2
        finally:
            dos.close_all(attackers)


def test_bodies_that_fill_the_pool_leave_each_connection_its_share(tmp_root):
    """Connections that do send their bodies (one byte short) take what they send, up to the
    pool; past it they get 429. A quarter of the budget is set apart in equal shares per
    connection, so an ordinary UpdateRecords still fits in its own. (Without the shares, these
    eight bodies fit the 8 MiB budget to within 8 bytes and every other body got 429.)"""
    max_body, budget, connections, count = 1 * MiB, 8 * MiB, 64, 8
    server = serve(tmp_root, "dos-pool", "--max-body-bytes", str(max_body), "--max-buffered-body-bytes", str(budget),
                   "--max-connections", str(connections), "--body-timeout", "60", "--header-timeout", "60")
    with running(server):
        capacity = transport_metric(server, "syncledger_http_buffered_body_pool_capacity_bytes")
        share = (budget - capacity) // connections
        assert share >= 16 * 1024 and count * (max_body - 1 - share) > capacity
        pool, identity = new_id(), new_id()
        path = dos.update_records_path(pool, identity, "d")
        attackers = [dos.connect(server.port) for _ in range(count)]
        try:
            for s in attackers:
                s.sendall(declared_head(server.port, path, max_body))
                with contextlib.suppress(OSError):   # refused: the server stops reading after a while
                    s.sendall(b"{" * (max_body - 1))
                # One body at a time. Sent all at once, the eight race: when the pool fills, the
                # connections refused give back what they held, and the survivors may need less
                # than that, so how many whole bodies the pool ends with varies (five in one run
                # of many, where six fit).
                dos.wait_read_by_server(server.port, [s])
            answers = [answered(s) for s in attackers]
            refused = [a for a in answers if a is not None]
            assert refused and all(a in (429, "closed") for a in refused), answers
            assert len(refused) < count, answers
            # Every body the pool took is whole: the first `share` bytes of each in its
            # connection's share, the rest in the pool, which can hold no further body.
            per_body = max_body - 1 - share
            held = transport_metric(server, "syncledger_http_buffered_body_pool_bytes")
            assert held % per_body == 0 and capacity - per_body < held <= capacity, (held, per_body, capacity)
            honest = conftest.Dataset(server.client_for(server.mint(pool, identity)), pool, identity)
            honest.put("d", {"k": "v" * 1000})
            assert honest.records("d") == {"k": ("v" * 1000, 1)}
        finally:
            dos.close_all(attackers)
        assert wait_until(lambda: transport_metric(server, "syncledger_http_buffered_body_bytes") == 0, 5)
