"""The slow-reader attack on `syncledger serve`, as a building block for
`Tests/wire/test_slow_readers.py` (assertions) and a figure for the README:

more sockets than `--max-connections`, each pipelining a few hundred `GET /metrics` (anyone may
send them; the answers are what is refused or served) and never reading an answer, while a fresh
connection asks for `GET /health` every second. Before the write timeout, a connection whose
answers were being written counted as busy, was never evicted, and nothing timed out a write
that made no progress: new clients were refused for as long as the attacker held on, and the
server's memory grew with the answers it owed.

Every wait here is on a socket (poll with a timeout) or a condition polled against a deadline.

    python3 Tests/wire/slow_readers.py [--sockets 1105] [--pipelined 300] [--seconds 75] \\
        [-- extra serve arguments]       # starts its own server ($SYNCLEDGER_BIN), prints figures
"""

import argparse
import contextlib
import os
import select
import socket
import sys
import tempfile
import shutil
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402
import dos_attacks as dos  # noqa: E402

MiB = 1 << 20


def quiet_socket(port, receive_buffer=4096, segment=536):
    """A connected socket with a small receive buffer and segment size (set before connecting,
    so that the server sees a small window and sends small segments: its kernel then buffers
    little for this client, as for a client far away), or None when the connect failed."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, segment)
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        return s
    except OSError:
        return None


def slow_reader(port, path, pipelined, request=None):
    """A quiet socket that sends `pipelined` keep-alive GETs of `path` (or `request`, the bytes
    of one request) at once and never reads. None when the server did not take the connection."""
    s = quiet_socket(port)
    if s is None:
        return None
    request = request or f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    s.setblocking(False)
    with contextlib.suppress(OSError):     # a full send buffer, or a closed connection: enough
        s.send(request * pipelined)
    return s


class Result:
    def __init__(self):
        self.probes = []          # (seconds since the start, status or error text, seconds taken)
        self.rest_rss = 0
        self.peak_rss = 0
        self.opened = 0
        self.closed_at = []       # per attacker socket: seconds until the server closed it, or None
        self.cpu_seconds = 0.0    # the server's CPU time (user + system) during the attack

    def refused(self, within=2.0):
        """Probes that did not answer 200 within `within` seconds."""
        return [p for p in self.probes if p[1] != 200 or p[2] > within]

    def refused_seconds(self, within=2.0):
        """From the first refused probe to the last (0 if none)."""
        bad = self.refused(within)
        return (bad[-1][0] - bad[0][0] + 1) if bad else 0


def attack(port, pid, sockets, pipelined, seconds, path="/metrics", probe_timeout=2.0, log=None, request=None):
    """Opens `sockets` slow readers, then for `seconds` probes `GET /health` from a fresh
    connection every second and samples the server's RSS; watches which attacker sockets the
    server closes. Returns a Result; every socket is closed at the end."""
    log = log or (lambda text: None)
    dos.raise_own_nofile(sockets + 200)
    result = Result()
    result.rest_rss = dos.proc_status(pid).get("VmRSS", 0)
    cpu_before = cpu_seconds(pid)
    socks = []
    try:
        for _ in range(sockets):
            s = slow_reader(port, path, pipelined, request)
            if s is not None:
                socks.append(s)
        result.opened = len(socks)
        log(f"slow readers: {len(socks)} sockets opened, {pipelined} x GET {path} each")
        start = time.monotonic()
        closed = {}
        next_probe = start
        while time.monotonic() - start < seconds:
            now = time.monotonic()
            if now >= next_probe:
                status, took = dos.health(port, timeout=probe_timeout)
                result.probes.append((round(now - start, 1), status, took))
                next_probe += 1.0
                with contextlib.suppress(OSError):
                    result.peak_rss = max(result.peak_rss, dos.proc_status(pid).get("VmRSS", 0))
                log(f"  t={now - start:5.1f} s /health {status} in {took * 1000:.0f} ms; attackers open "
                    f"{len(socks) - len(closed)}; RSS {result.peak_rss / MiB:.0f} MiB (peak)")
            for s in hung_up([s for s in socks if s.fileno() not in closed], max(0.0, min(next_probe - time.monotonic(), 0.2))):
                closed[s.fileno()] = time.monotonic() - start
        result.closed_at = [closed.get(s.fileno()) for s in socks]
        result.cpu_seconds = cpu_seconds(pid) - cpu_before
    finally:
        dos.close_all(socks)
    return result


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hung_up(socks, timeout):
    """Those of `socks` the server closed (a FIN or a reset), waiting up to `timeout` seconds,
    without reading anything: a slow reader's unread answers stay where they are."""
    if not socks:
        dos.ready([], timeout)
        return []
    poller = select.poll()
    by_fd = {}
    for s in socks:
        by_fd[s.fileno()] = s
        poller.register(s, select.POLLRDHUP)
    return [by_fd[fd] for fd, events in poller.poll(timeout * 1000)
            if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)]


def wait_hung_up(socks, seconds):
    """Waits until the server closed each of `socks` or `seconds` pass; returns each one's close
    time in seconds from now (None: still open). Nothing is read."""
    start = time.monotonic()
    closed = {}
    while len(closed) < len(socks) and time.monotonic() - start < seconds:
        left = seconds - (time.monotonic() - start)
        for s in hung_up([s for s in socks if s.fileno() not in closed], min(left, 0.5)):
            closed[s.fileno()] = time.monotonic() - start
    return [closed.get(s.fileno()) for s in socks]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Measures the slow-reader attack.")
    parser.add_argument("--sockets", type=int, default=1105)
    parser.add_argument("--pipelined", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=75)
    parser.add_argument("--path", default="/metrics")
    parser.add_argument("serve_args", nargs="*", help="extra `syncledger serve` arguments (after --)")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="syncledger-slow-")
    dos.raise_own_nofile(args.sockets + 500)
    print(f"slow readers: binary {conftest.BINARY}", flush=True)
    server = conftest.Server(os.path.join(root, "slow"), ["--fast", *args.serve_args])
    try:
        result = attack(server.port, server.process.pid, args.sockets, args.pipelined, args.seconds, args.path,
                        log=lambda text: print(text, flush=True))
        after = dos.health(server.port, timeout=5)
        closed = sorted(t for t in result.closed_at if t is not None)
        print()
        print(f"attack: {result.opened} slow readers x {args.pipelined} pipelined GET {args.path}, {args.seconds:.0f} s")
        print(f"/health not answered within 2 s: {len(result.refused())} of {len(result.probes)} probes "
              f"(over {result.refused_seconds():.0f} s)")
        print(f"RSS at rest {result.rest_rss / MiB:.0f} MiB, peak under the attack {result.peak_rss / MiB:.0f} MiB; "
              f"server CPU {result.cpu_seconds:.1f} s")
        print(f"attacker sockets closed by the server: {len(closed)} of {result.opened}"
              + (f" (after {closed[0]:.1f}-{closed[-1]:.1f} s)" if closed else ""))
        print(f"/health after the attack: {after[0]}")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
