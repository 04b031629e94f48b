"""HAProxy (Debian's) with the shipped configuration, deploy/haproxy/haproxy.cfg and
syncledger.lua, in front of cluster nodes on loopback: only the listening address, the script's
path and the servers change (one `use-server` rule and one `server` line per node, named
node<i> as the nodes' --node-id). Used by test_cluster_balancer.py and tools/cluster-bench."""

import os
import re
import shutil
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "deploy", "haproxy", "haproxy.cfg")
SCRIPT = os.path.join(ROOT, "deploy", "haproxy", "syncledger.lua")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def configuration(ports, listen_port):
    """The shipped configuration for nodes node0… listening on `ports` (127.0.0.1)."""
    with open(CONFIG) as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        if re.match(r"^\s+(use-server|server) node\d+ ", line):
            continue  # the example's three nodes: replaced below
        out.append(line)
        if line.strip() == "retry-on conn-failure":
            template_rule = "    use-server node{i} if {{ var(txn.syncledger_owner) -m str node{i} }}"
            out += [template_rule.format(i=i) for i in range(len(ports))]
            out += [f"    server node{i} 127.0.0.1:{port} check inter 1s fall 2" for i, port in enumerate(ports)]
    text = "\n".join(out) + "\n"
    text = text.replace("lua-load /etc/haproxy/syncledger.lua", f"lua-load {SCRIPT}")
    text = text.replace("bind :8080", f"bind 127.0.0.1:{listen_port}")
    assert "10.0.0." not in text and text.count("use-server") == len(ports), text
    return text


class Balancer:
    """A running haproxy in front of `ports`; `stop()` ends it."""

    def __init__(self, ports, directory):
        assert shutil.which("haproxy"), "haproxy is missing: run tools/setup"
        os.makedirs(directory, exist_ok=True)
        self.port = free_port()
        self.path = os.path.join(directory, "haproxy.cfg")
        with open(self.path, "w") as f:
            f.write(configuration(ports, self.port))
        check = subprocess.run(["haproxy", "-c", "-f", self.path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log_path = os.path.join(directory, "haproxy.log")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(["haproxy", "-db", "-f", self.path], stdout=self._log, stderr=self._log,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.process.poll() is None, f"haproxy exited (see {self.log_path})"
                assert time.monotonic() < deadline, "haproxy did not listen"
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self._log.close()
