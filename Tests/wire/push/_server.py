"""What the stand-ins share: hypercorn on a background thread, the record of requests with
Condition-based waiting, and the queues of scripted answers."""

import asyncio
import collections
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass

from hypercorn.asyncio import serve
from hypercorn.config import Config

# Requests bodies are read up to this many bytes; the rest is counted but not kept.
BODY_KEEP_LIMIT = 1 << 20


@dataclass
class HttpRequest:
    """One HTTP request as the ASGI server saw it."""
    method: str
    path: str
    query: bytes
    header_list: list     # [(name lowercased, value)] in arrival order, duplicates kept
    body: bytes
    body_size: int        # the full size, even past BODY_KEEP_LIMIT
    http_version: str     # "1.1" or "2"
    client: tuple

    def header(self, name):
        """The last value of header `name`, or None."""
        value = None
        for key, item in self.header_list:
            if key == name:
                value = item
        return value

    def header_count(self, name):
        return sum(1 for key, _ in self.header_list if key == name)

    @property
    def headers(self):
        """A dict of lowercased name → value (the last one when a header repeats)."""
        return {key: value for key, value in self.header_list}


class BackgroundServer:
    """Serves `self.handle(request) -> (status, [(name, value)], body bytes)` with hypercorn on a
    daemon thread, on 127.0.0.1 and a free port picked by the kernel.

    The listening socket is bound and listening before the thread starts, so `url` is right and
    connections queue from the moment `start()` returns. `stop()` asks hypercorn to shut down and
    joins the thread. Usable as a context manager (`with X(...) as server:`)."""

    _name = "stand-in"

    def __init__(self, tls=None, alpn=("h2", "http/1.1")):
        """`tls` is (cert path, key path), True to make a fresh self-signed certificate in a
        temporary directory (see `ca_file`), or None for plain HTTP."""
        self._tls_request = tls
        self._alpn = list(alpn)
        self._thread = None
        self._loop = None
        self._shutdown = None
        self._ready = threading.Event()
        self._error = None
        self._tempdir = None
        self.port = None
        self.cert_file = None
        self.key_file = None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def scheme(self):
        return "https" if self._tls_request else "http"

    @property
    def url(self):
        """`https://127.0.0.1:<port>` (or http://… without TLS). Known once started."""
        if self.port is None:
            raise RuntimeError(f"{self._name} is not started")
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def ca_file(self):
        """The PEM the client must trust (the self-signed certificate itself)."""
        return self.cert_file

    def start(self, timeout=10.0):
        if self._thread is not None:
            raise RuntimeError(f"{self._name} was already started")
        config = Config()
        config.loglevel = "WARNING"
        config.accesslog = None
        config.errorlog = "-"
        config.graceful_timeout = 1.0
        config.include_server_header = False
        config.alpn_protocols = self._alpn
        if self._tls_request:
            if self._tls_request is True:
                from .certs import make_tls_cert
                self._tempdir = tempfile.mkdtemp(prefix="push-standin-")
                self.cert_file, self.key_file = make_tls_cert(self._tempdir)
            else:
                self.cert_file, self.key_file = self._tls_request
            config.certfile, config.keyfile = self.cert_file, self.key_file
            config.create_ssl_context()  # fail here, in the caller's thread, on a bad cert/key

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            fd = os.dup(listener.fileno())  # hypercorn owns (and closes) the duplicate
        finally:
            listener.close()
        config.bind = [f"fd://{fd}"]
        if self._tls_request:
            config.insecure_bind = []

        self._thread = threading.Thread(target=self._run, args=(config,), daemon=True,
                                        name=f"{self._name}:{self.port}")
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            raise RuntimeError(f"{self._name} did not start: {self._error!r}")
        return self

    def _run(self, config):
        loop = _TrackingLoop()
        try:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._main(config, loop))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except BaseException as error:  # noqa: BLE001 - reported by start()/stop()
            self._error = error
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            self._ready.set()

    async def _main(self, config, loop):
        self._shutdown = asyncio.Event()
        self._loop = loop
        await serve(self._asgi, config, shutdown_trigger=self._shutdown.wait, mode="asgi")

    def _call_in_loop(self, function):
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            return False
        try:
            loop.call_soon_threadsafe(function)
            return True
        except RuntimeError:
            return False  # the loop is already closed

    def drop_connections(self, timeout=5.0):
        """Aborts every open client connection (TCP reset, no GOAWAY), as a crashed or
        restarted server would; the listener stays up. Returns once they are aborted."""
        done = threading.Event()

        def abort():
            self._loop.abort_connections()
            done.set()

        if self._call_in_loop(abort) and not done.wait(timeout):
            raise RuntimeError(f"{self._name}: the server loop did not abort the connections")

    @property
    def open_connections(self):
        """How many client connections are open now."""
        loop = self._loop
        return 0 if loop is None else loop.open_connection_count()

    def stop(self, timeout=10.0):
        """Stops listening, aborts the open connections (a client holding an idle HTTP/2 or
        keep-alive connection would otherwise hold hypercorn's TLS shutdown for 30 s) and joins
        the thread. Safe to call twice."""
        thread, shutdown = self._thread, self._shutdown
        if shutdown is not None:
            def shut():
                self._loop.abort_connections()
                shutdown.set()
            self._call_in_loop(shut)
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError(f"{self._name} did not stop within {timeout} s")
        if self._tempdir:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def __enter__(self):
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- ASGI -------------------------------------------------------------------------------

    async def _asgi(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                    self._ready.set()
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif scope["type"] == "http":
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                data = message.get("body", b"")
                if size < BODY_KEEP_LIMIT:
                    chunks.append(data[:BODY_KEEP_LIMIT - size])
                size += len(data)
                if not message.get("more_body", False):
                    break
            request = HttpRequest(
                method=scope["method"], path=scope["path"], query=scope.get("query_string", b""),
                header_list=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]],
                body=b"".join(chunks), body_size=size, http_version=scope["http_version"],
                client=tuple(scope.get("client") or ()))
            try:
                status, headers, body = self.handle(request)
            except Exception as error:  # noqa: BLE001 - a stand-in bug must show, not hang the client
                import traceback
                traceback.print_exc()
                status, headers, body = 500, [("content-type", "text/plain")], f"stand-in bug: {error!r}".encode()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(k.encode("latin-1"), str(v).encode("latin-1")) for k, v in headers]})
            await send({"type": "http.response.body", "body": body})
        elif scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1008})

    def handle(self, request):
        raise NotImplementedError


class _TrackingLoop(asyncio.SelectorEventLoop):
    """An event loop that remembers the transports of the connections its servers accept, so
    `stop()`/`drop_connections()` can abort them (hypercorn exposes no handle on them). It only
    wraps the protocol factory given to the public `create_server`."""

    def __init__(self):
        super().__init__()
        self._standin_transports = set()

    async def create_server(self, protocol_factory, *args, **kwargs):
        transports = self._standin_transports

        def factory():
            protocol = protocol_factory()
            made, lost = protocol.connection_made, protocol.connection_lost
            seen = []

            def connection_made(transport):
                seen.append(transport)
                transports.add(transport)
                made(transport)

            def connection_lost(exc):
                for transport in seen:
                    transports.discard(transport)
                lost(exc)

            protocol.connection_made = connection_made
            protocol.connection_lost = connection_lost
            return protocol

        return await super().create_server(factory, *args, **kwargs)

    def abort_connections(self):
        for transport in list(self._standin_transports):
            transport.abort()
        self._standin_transports.clear()

    def open_connection_count(self):
        return sum(1 for t in list(self._standin_transports) if not t.is_closing())


class Recorder:
    """Thread-safe record of requests: `received` (accepted), `rejected` (answered with an error
    status: invalid, scripted or down) and `requests` (everything, in order). Each list property returns a
    snapshot copy. Every record has `.accepted`, `.cause` and `.received_at` (time.time())."""

    def __init__(self):
        self._cond = threading.Condition()
        self._received = []
        self._rejected = []
        self._requests = []

    def _record(self, record):
        with self._cond:
            self._requests.append(record)
            if record.accepted:
                self._received.append(record)
            elif record.status >= 400:
                self._rejected.append(record)
            self._cond.notify_all()

    @property
    def received(self):
        with self._cond:
            return list(self._received)

    @property
    def rejected(self):
        with self._cond:
            return list(self._rejected)

    @property
    def requests(self):
        with self._cond:
            return list(self._requests)

    @property
    def invalid(self):
        """The requests refused because they broke a protocol rule (not scripted, not down):
        a test asserts this is empty to show the sender sent nothing malformed."""
        with self._cond:
            return [r for r in self._rejected if r.cause == "invalid"]

    def clear(self):
        """Forgets every recorded request (scripts, down state and counters stay)."""
        with self._cond:
            self._received.clear()
            self._rejected.clear()
            self._requests.clear()

    def _wait(self, source, what, predicate, count, timeout):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                matches = [r for r in source if predicate is None or predicate(r)]
                if len(matches) >= count:
                    return matches
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"{self._name}: waited {timeout} s for {count} matching {what}, got {len(matches)}; "
                        f"{len(self._received)} accepted, rejected: "
                        + repr([(r.status, r.reason, r.cause) for r in self._rejected][-10:]))
                self._cond.wait(remaining)

    def wait_for(self, predicate=None, count=1, timeout=10.0):
        """Blocks until at least `count` accepted requests match `predicate` (a function of a
        record; None matches all) and returns all the matching ones; raises AssertionError after
        `timeout` seconds."""
        return self._wait(self._received, "accepted requests", predicate, count, timeout)

    def wait_for_requests(self, predicate=None, count=1, timeout=10.0):
        """Like `wait_for`, over every request (accepted or not), e.g. to wait for retries."""
        return self._wait(self._requests, "requests", predicate, count, timeout)


class Scripts:
    """Scripted answers: a queue per key (a device token), a queue for any key, and permanent
    answers per key. `take(key)` returns the next answer or None (= handle normally): the key's
    queue first, then its permanent answer, then the any-key queue. A queued None also means
    "handle this one normally" and is consumed."""

    _EMPTY = object()

    def __init__(self):
        self._lock = threading.Lock()
        self._queues = collections.defaultdict(collections.deque)
        self._any = collections.deque()
        self._permanent = {}

    def add(self, key, answers):
        with self._lock:
            (self._any if key is None else self._queues[key]).extend(answers)

    def set_permanent(self, key, answer):
        with self._lock:
            if answer is None:
                self._permanent.pop(key, None)
            else:
                self._permanent[key] = answer

    def take(self, key):
        """(answer, kind) with kind "scripted" or "permanent"; (None, None) when none applies."""
        with self._lock:
            queue = self._queues.get(key)
            if queue:
                return queue.popleft(), "scripted"
            if key in self._permanent:
                return self._permanent[key], "permanent"
            if self._any:
                return self._any.popleft(), "scripted"
            return None, None

    def pending(self, key=_EMPTY):
        """How many queued answers are left (for `key`, None = the any-key queue; all by
        default)."""
        with self._lock:
            if key is Scripts._EMPTY:
                return len(self._any) + sum(len(q) for q in self._queues.values())
            return len(self._any if key is None else self._queues.get(key, ()))

    def reset(self):
        with self._lock:
            self._queues.clear()
            self._any.clear()
            self._permanent.clear()


class DownSwitch:
    """`set_down(True)` makes the server refuse everything (as overloaded) and counts refusals."""

    def __init__(self):
        self._down_lock = threading.Lock()
        self._down = False
        self.down_count = 0

    def set_down(self, down=True):
        with self._down_lock:
            self._down = bool(down)

    @property
    def is_down(self):
        return self._down

    def _check_down(self):
        with self._down_lock:
            if self._down:
                self.down_count += 1
                return True
            return False
