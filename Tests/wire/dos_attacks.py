"""Denial-of-service attacks on `syncledger serve`, as building blocks for
`Tests/wire/test_dos.py` (assertions) and `tools/attack` (figures for the README).

Every wait here is on a socket (select with a timeout) or a condition polled against a
deadline; nothing sleeps in place of synchronisation.

    python3 Tests/wire/dos_attacks.py            # starts its own server ($SYNCLEDGER_BIN) and
                                                 # prints the table tools/attack prints
"""

import argparse
import contextlib
import hashlib
import os
import resource
import select
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402
from botocore.auth import SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

MiB = 1 << 20
SEGMENT_TYPE = "application/vnd.syncledger.segment"


# --------------------------------------------------------------------------------------------
# The server process

def proc_status(pid):
    """VmRSS, VmHWM, RssAnon... of a process in bytes (from /proc/PID/status)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[name] = int(parts[0]) * 1024
    return out


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def nofile_limit(soft):
    """Lowers this process's soft RLIMIT_NOFILE while the block runs (a child started in it
    inherits the lower limit, as a service under the usual default of 1,024 would have)."""
    old_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (old_soft, hard))


def raise_own_nofile(wanted):
    """Raises this process's soft RLIMIT_NOFILE to `wanted` (within the hard limit); returns
    the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------------------------
# Sockets (waits use poll(2): select(2) cannot watch descriptors above 1,023)

def ready(socks, timeout, write=()):
    """(readable, writable) among `socks` / `write` within `timeout` seconds."""
    poller = select.poll()
    by_fd = {}
    for s in socks:
        by_fd[s.fileno()] = s
        poller.register(s, select.POLLIN | select.POLLPRI)
    for s in write:
        mask = select.POLLOUT | (select.POLLIN | select.POLLPRI if s.fileno() in by_fd else 0)
        by_fd[s.fileno()] = s
        poller.register(s, mask)
    readable, writable = [], []
    for fd, events in poller.poll(max(0, timeout) * 1000):
        if events & (select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR):
            readable.append(by_fd[fd])
        if events & select.POLLOUT:
            writable.append(by_fd[fd])
    return readable, writable


def connect(port, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock, deadline):
    """Reads one HTTP response (head and Content-Length body) from a blocking socket.
    Returns (status, headers, body); raises TimeoutError past the deadline and
    ConnectionError when the connection closes first."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no response head before the deadline (got {buffer[:80]!r})")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                raise TimeoutError(f"no response head before the deadline (got {buffer[:80]!r})") from None
            except OSError as error:
                raise ConnectionError(f"{error} before a response")
            if not chunk:
                raise ConnectionError(f"closed before a response (got {buffer[:80]!r})")
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if 100 <= status < 200:
            continue
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the response body did not arrive before the deadline")
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            buffer += chunk
        return status, headers, buffer[:length]


def get(port, path="/health", timeout=5, sock=None, keep_alive=False):
    """GET `path`; returns (status, seconds). Raises TimeoutError / ConnectionError."""
    start = time.monotonic()
    own = sock is None
    if own:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except socket.timeout:
            raise TimeoutError(f"connect to port {port} timed out after {timeout} s")
    try:
        connection = "keep-alive" if keep_alive else "close"
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: {connection}\r\n\r\n".encode())
        status, _, _ = read_response(sock, start + timeout)
        return status, time.monotonic() - start
    finally:
        if own:
            sock.close()


def health(port, timeout=5):
    """(status or an error text, seconds) of GET /health on a new connection."""
    start = time.monotonic()
    try:
        return get(port, "/health", timeout)
    except (TimeoutError, ConnectionError, OSError) as error:
        return f"{type(error).__name__}: {error}", time.monotonic() - start


def poll_closed(sock):
    """True when the peer closed (or reset) `sock`; reads and drops whatever it sent."""
    try:
        readable, _ = ready([sock], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    try:
        sock.setblocking(False)
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        with contextlib.suppress(OSError):
            sock.setblocking(True)


def wait_closed(socks, seconds, on_tick=None, tick=1.0):
    """Waits until the server closes each socket or `seconds` pass; returns each socket's close
    time in seconds from now (None: still open). Whatever the server sends first (an error
    response, say) is read and dropped. `on_tick(elapsed, open_sockets)` runs about every
    `tick` seconds (to send a slowloris byte, for example)."""
    start = time.monotonic()
    deadline = start + seconds
    closed = {}
    still = {s.fileno(): s for s in socks}
    next_tick = start + tick
    while still:
        now = time.monotonic()
        if now >= deadline:
            break
        timeout = min(deadline, next_tick) - now if on_tick else deadline - now
        readable, _ = ready(list(still.values()), max(0.0, timeout))
        now = time.monotonic()
        for s in readable:
            if poll_closed(s):
                closed[s] = now - start
                still.pop(s.fileno(), None)
        if on_tick and now >= next_tick:
            next_tick += tick
            for s in on_tick(now - start, list(still.values())) or []:
                closed.setdefault(s, time.monotonic() - start)
                still.pop(s.fileno(), None)
    return [closed.get(s) for s in socks]


def open_idle(port, count, timeout=5):
    """Opens up to `count` connections that send nothing; stops at the first that fails (a
    server that no longer accepts lets its backlog fill, and every further connect would wait
    out its timeout). Returns (sockets, connect errors)."""
    socks, errors = [], []
    for _ in range(count):
        try:
            socks.append(connect(port, timeout))
        except OSError as error:
            errors.append(error)
            break
    return socks, errors


def close_all(socks):
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()


def _tcp_queues():
    """{(local port, remote port): (send queue, receive queue)} of this host's TCP sockets on
    loopback, from /proc/net/tcp and tcp6."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(name) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, remote, queues = fields[1], fields[2], fields[4]
                tx, _, rx = queues.partition(":")
                key = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
                out[key] = (int(tx, 16), int(rx, 16))
    return out


def unread_by_server(port, socks):
    """For each of `socks` (connected to the server on `port`), the bytes it sent that the
    server process has not read yet: what is still in its own send queue plus what waits in
    the server side's receive queue (from /proc/net/tcp). 0 once the server has read it all
    (or closed the connection). A connection the server has not accepted yet still has its
    bytes in the server side's receive queue."""
    queues = _tcp_queues()
    out = []
    for s in socks:
        try:
            mine = s.getsockname()[1]
        except OSError:
            out.append(0)           # closed on this side
            continue
        client = queues.get((mine, port))
        server = queues.get((port, mine))
        out.append((client[0] if client else 0) + (server[1] if server else 0))
    return out


def wait_read_by_server(port, socks, seconds=10):
    """Polls /proc/net/tcp until the server process has read every byte `socks` sent (the
    server reads a connection's bytes and runs them through its handlers in one event-loop
    turn, so its guards have seen them too); fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        left = unread_by_server(port, socks)
        if not any(left):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"the server did not read what was sent within {seconds} s: unread bytes {left}")
        ready([], 0.01)


# --------------------------------------------------------------------------------------------
# Attacks

SLOWLORIS_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Slow: "


def slowloris(port, count, seconds, interval=1.0, on_tick=None):
    """`count` sockets that send a partial request head, then one more byte every `interval`
    seconds, never finishing it. Returns each socket's close time (None: the server kept it
    open for `seconds`)."""
    socks, errors = open_idle(port, count)
    if errors:
        raise ConnectionError(f"{len(errors)} slowloris connections failed: {errors[0]}")
    for s in socks:
        s.sendall(SLOWLORIS_HEAD)

    def tick(elapsed, still):
        gone = []
        for s in still:
            try:
                s.send(b"a")
            except OSError:
                gone.append(s)
        if on_tick:
            on_tick(elapsed)
        return gone

    try:
        return wait_closed(socks, seconds, on_tick=tick, tick=interval)
    finally:
        close_all(socks)


def slow_body(port, count, seconds, credential, interval=1.0, declared=1000):
    """`count` sockets that send a whole request head declaring a `declared`-byte body (signed
    with `credential`, so that nothing but the body's pace is wrong with it), then one body
    byte every `interval` seconds. Returns each socket's close time or None."""
    socks, errors = open_idle(port, count)
    if errors:
        raise ConnectionError(f"{len(errors)} connections failed: {errors[0]}")
    head = signed_head(port, "POST", "/segments", hashlib.sha256(b"S" * declared).hexdigest(), declared, credential)
    for s in socks:
        s.sendall(head + b"S" * 10)

    def tick(elapsed, still):
        gone = []
        for s in still:
            try:
                s.send(b"S")
            except OSError:
                gone.append(s)
        return gone

    try:
        return wait_closed(socks, seconds, on_tick=tick, tick=interval)
    finally:
        close_all(socks)


def signed_head(port, method, path, body_hash, length, credential, content_type=None):
    """The bytes of a request head signed with botocore's SigV4Auth for a body of `length`
    bytes whose SHA-256 is `body_hash` (the body is sent separately, or never)."""
    key, secret, token = credential
    request = AWSRequest(method=method, url=f"http://127.0.0.1:{port}{path}", data=b"",
                         headers={"Content-Type": content_type or SEGMENT_TYPE, "X-Amz-Content-SHA256": body_hash})
    SigV4Auth(Credentials(key, secret, token), conftest.SERVICE, conftest.REGION).add_auth(request)
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{k}: {v}" for k, v in request.headers.items()]
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class LargeBodyResult:
    def __init__(self):
        self.answers = {}        # connection index -> (status, error type) of an answer
        self.closed = set()      # connection indexes closed without an answer
        self.sent = []           # body bytes sent per connection
        self.peak_rss = 0        # highest VmRSS sampled during the attack
        self.hwm = 0             # VmHWM after the attack
        self.seconds = 0.0

    def statuses(self):
        out = {}
        for status, _ in self.answers.values():
            out[status] = out.get(status, 0) + 1
        return out


def update_records_path(pool, identity, dataset):
    """The path of UpdateRecords (POST) on one identity's dataset."""
    return conftest.dataset_path(pool, identity, dataset)


def large_body_attack(port, pid, count, length, credential, path="/segments", content_type=SEGMENT_TYPE,
                      seconds=30, chunk=256 * 1024, hold_back=1):
    """`count` connections, each a signed POST to `path` declaring a `length`-byte body, sent
    round-robin in `chunk`-byte pieces up to `hold_back` bytes short of the end (so no request
    completes, and the server holds whatever it buffered). Returns a LargeBodyResult with the
    answers that came early (a refusal), the peak RSS sampled and VmHWM. The connections are
    closed at the end."""
    result = LargeBodyResult()
    piece = b"\0" * chunk
    body_hash = hashlib.sha256(b"\0" * length).hexdigest()
    head = signed_head(port, "POST", path, body_hash, length, credential, content_type)
    socks = []
    for _ in range(count):
        s = connect(port)
        s.sendall(head)
        s.setblocking(False)
        socks.append(s)
    result.sent = [0] * count
    buffers = [b""] * count
    target = length - hold_back
    active = set(range(count))
    start = time.monotonic()
    deadline = start + seconds
    index_of = {s.fileno(): i for i, s in enumerate(socks)}

    def sample():
        try:
            result.peak_rss = max(result.peak_rss, proc_status(pid).get("VmRSS", 0))
        except OSError:
            pass

    last_sample = 0.0

    def take_answers(readable):
        for s in readable:
            i = index_of[s.fileno()]
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                if i not in result.answers:
                    result.closed.add(i)
                active.discard(i)
                continue
            buffers[i] += data
            if i not in result.answers and b"\r\n" in buffers[i]:
                line, _, rest = buffers[i].partition(b"\r\n")
                try:
                    status = int(line.split()[1])
                except (IndexError, ValueError):
                    status = -1
                error_type = ""
                for h in rest.split(b"\r\n"):
                    if h.lower().startswith(b"x-amzn-errortype:"):
                        error_type = h.split(b":", 1)[1].strip().decode("latin-1")
                if b"\r\n\r\n" in buffers[i] or status < 0:
                    result.answers[i] = (status, error_type)

    try:
        # Answers to the heads alone (a refusal by declared size) come first: wait for them on
        # the sockets until none arrives for 0.3 s (at most 2 s), before any body byte is sent.
        quiet_until = min(deadline, start + 2)
        while time.monotonic() < quiet_until:
            readable, _ = ready([socks[i] for i in active], 0.3)
            if not readable:
                break
            take_answers(readable)
        while active and time.monotonic() < deadline:
            live = [socks[i] for i in active]
            want_write = [socks[i] for i in active if result.sent[i] < target and i not in result.answers]
            if not want_write:
                # Everything is sent but the last bytes: give early answers a moment to arrive.
                readable, _ = ready(live, min(1.0, max(0.0, deadline - time.monotonic())))
                writable = []
                if not readable:
                    sample()
                    break
            else:
                readable, writable = ready(live, min(0.5, max(0.0, deadline - time.monotonic())), want_write)
            take_answers(readable)
            for s in writable:
                i = index_of[s.fileno()]
                if i not in active:
                    continue
                want = min(chunk, target - result.sent[i])
                try:
                    n = s.send(piece[:want])
                    result.sent[i] += n
                except BlockingIOError:
                    pass
                except OSError:
                    active.discard(i)
                    if i not in result.answers:
                        result.closed.add(i)
            if time.monotonic() - last_sample > 0.05:
                last_sample = time.monotonic()
                sample()
        sample()
        result.seconds = time.monotonic() - start
        try:
            result.hwm = proc_status(pid).get("VmHWM", 0)
        except OSError:
            result.hwm = 0
    finally:
        close_all(socks)
    return result


# A well-formed payload hash for a body that is never sent: the head's signature verifies, and
# only the body could tell that it does not match.
NEVER_SENT_HASH = hashlib.sha256(b"a body that is never sent").hexdigest()


def oversize_head(port, length, credential, expect_continue=False):
    """A signed POST /segments head declaring `length` body bytes (none sent)."""
    head = signed_head(port, "POST", "/segments", NEVER_SENT_HASH, length, credential)
    if expect_continue:
        head = head[:-2] + b"Expect: 100-continue\r\n\r\n"
    return head


# --------------------------------------------------------------------------------------------
# The table of figures (tools/attack)

def _held(socks):
    return [s for s in socks if not poll_closed(s)]


def measure(binary_args=(), idle_count=2000, slowloris_count=50, slowloris_seconds=30, body_count=100,
            body_bytes=4 * MiB, nofile=1024, log=None):
    """Starts servers on fresh directories and measures. Returns a list of (figure, value)."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    rows = []
    root = tempfile.mkdtemp(prefix="syncledger-attack-")
    raise_own_nofile(max(4096, idle_count + 500))
    try:
        # 1. Idle connections, opened in steps; /health after each step.
        with nofile_limit(nofile):
            server = conftest.Server(os.path.join(root, "idle"), ["--fast", *binary_args])
        try:
            pid = server.process.pid
            rest = proc_status(pid)
            rest_fds = open_fds(pid)
            socks = []
            held_most, starved = 0, None
            for target in [n for n in (250, 500, 1000, 1100, 1500, 2000, 3000, 5000) if n < idle_count] + [idle_count]:
                more, errors = open_idle(server.port, target - len(socks))
                socks += more
                # Let the server accept (or refuse) them: poll its descriptor count for 2 s.
                deadline = time.monotonic() + 2
                while time.monotonic() < deadline and open_fds(pid) - rest_fds < len(socks):
                    ready([], 0.1)
                accepted = open_fds(pid) - rest_fds
                closed = len(socks) - len(_held(socks))
                status, seconds = health(server.port, timeout=5)
                answer = f"{status} in {seconds * 1000:.0f} ms" if isinstance(status, int) else f"{status} after {seconds:.1f} s"
                text = (f"accepted by the server {accepted} (descriptors {open_fds(pid)} of soft limit {nofile}), "
                        f"closed by it {closed}; /health {answer}")
                log(f"attack: {len(socks)} idle connections (connect errors {len(errors)}): {text}")
                rows.append((f"{len(socks)} idle connections", text))
                held_most = max(held_most, min(accepted, len(socks) - closed))
                if (isinstance(status, str) and status.startswith("TimeoutError")) or errors:
                    starved = starved or len(socks)
                    break   # more connections would only wait out their connect timeouts
            rows.append(("idle connections held (most at once)", f"{held_most}"))
            rows.append(("/health starved (timed out) from", f"{starved} idle connections" if starved
                         else f"never (up to {len(socks)})"))
            held = _held(socks)
            log(f"attack: waiting up to 75 s for the server to close {len(held)} idle connections")
            closed = wait_closed(held, 75)
            times = sorted(t for t in closed if t is not None)
            rows.append(("idle connections closed by the server", f"{len(times)} of {len(held)} within 75 s"
                         + (f" (after {times[0]:.1f}-{times[-1]:.1f} s)" if times else "")))
            close_all(socks)
            rows.append(("RSS at rest (idle server, before)", f"{rest.get('VmRSS', 0) / MiB:.0f} MiB"))
        finally:
            server.stop()

        # 2. Slowloris: partial heads, one byte a second.
        server = conftest.Server(os.path.join(root, "slowloris"), ["--fast", *binary_args])
        try:
            log(f"attack: slowloris, {slowloris_count} sockets for up to {slowloris_seconds:.0f} s")
            health_during = []
            times = slowloris(server.port, slowloris_count, slowloris_seconds,
                              on_tick=lambda elapsed: health_during.append(health(server.port, timeout=2)[0]))
            done = sorted(t for t in times if t is not None)
            rows.append(("slowloris sockets closed by the server",
                         f"{len(done)} of {slowloris_count} within {slowloris_seconds:.0f} s"
                         + (f", after {done[0]:.1f}-{done[-1]:.1f} s" if done else "")))
            ok = sum(1 for s in health_during if s == 200)
            rows.append(("GET /health during slowloris", f"{ok} of {len(health_during)} answered 200"))
        finally:
            server.stop()

        # 3. Large bodies: many connections each holding a body just under the limit.
        server = conftest.Server(os.path.join(root, "bodies"), ["--fast", "--max-body-bytes", str(body_bytes), *binary_args])
        try:
            pid = server.process.pid
            for _ in range(5):
                health(server.port)
            rest = proc_status(pid)
            log(f"attack: large bodies, {body_count} connections x {body_bytes / MiB:.1f} MiB")
            pool, identity = conftest.new_id(), conftest.new_id()
            cred = server.mint(pool, identity)
            credential = (cred["AccessKeyId"], cred["SecretAccessKey"], None)
            result = large_body_attack(server.port, pid, body_count, body_bytes, credential,
                                       path=update_records_path(pool, identity, "big"), content_type="application/json",
                                       seconds=60)
            after = proc_status(pid)
            rows.append(("large-body attack", f"one identity, {body_count} connections x {body_bytes / MiB:.1f} MiB "
                         f"UpdateRecords bodies, last byte held "
                         f"({sum(result.sent) / MiB:.0f} MiB sent in {result.seconds:.1f} s)"))
            rows.append(("peak RSS at rest / under the large-body attack",
                         f"{rest.get('VmHWM', 0) / MiB:.0f} MiB / {max(result.hwm, after.get('VmHWM', 0)) / MiB:.0f} MiB (VmHWM)"))
            rows.append(("answers during the attack", f"{result.statuses() or 'none'}; closed without an answer: {len(result.closed)}"))
            status, seconds = health(server.port, timeout=5)
            rows.append(("GET /health after the attack", f"{status}" + (f" in {seconds * 1000:.0f} ms" if isinstance(status, int) else "")))
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description="Measures idle-connection, slowloris and large-body attacks.")
    parser.add_argument("--idle", type=int, default=2000, help="idle connections to open, in steps (default 2000)")
    parser.add_argument("--nofile", type=int, default=1024, help="the server's soft RLIMIT_NOFILE (default 1024, the usual default)")
    parser.add_argument("--slowloris", type=int, default=50, help="slowloris sockets (default 50)")
    parser.add_argument("--slowloris-seconds", type=float, default=30)
    parser.add_argument("--bodies", type=int, default=100, help="large-body connections (default 100)")
    parser.add_argument("--body-bytes", type=int, default=4 * MiB, help="declared body size (default 4 MiB, the default limit)")
    parser.add_argument("serve_args", nargs="*", help="extra `syncledger serve` arguments (after --)")
    args = parser.parse_args(argv)
    print(f"attack: binary {conftest.BINARY}", flush=True)
    rows = measure(args.serve_args, args.idle, args.slowloris, args.slowloris_seconds, args.bodies, args.body_bytes, args.nofile)
    width = max(len(k) for k, _ in rows)
    print()
    print(f"{'figure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
