"""Three `syncledger serve --cluster` nodes over a real 3-node nats-server cluster, on loopback.

Every node shares the admin credential (as cluster mode requires); the tests write through
boto3's cognito-sync client with it, to any node. The nats-servers require TLS with client
certificates and authentication (nats_env.NatsSecurity): nodes sign in as the `syncledger` user
(``NatsCluster.node_args``), `syncledger cluster …` as the admin nkey user (``client_env``).
"""

import contextlib
import math
import os
import re
import signal
import time

from conftest import Server
from nats_env import NatsCluster


def retry_unwritten(call, *args, timeout=30, **kwargs):
    """`call(*args, **kwargs)`, again while it answers 503 saying nothing was written (a shard
    between owners for longer than the node waited, on a loaded machine) — what a client may
    safely retry; any other answer, or a 503 whose outcome is unknown, is the caller's."""
    from botocore.exceptions import ClientError
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call(*args, **kwargs)
        except ClientError as e:
            error = e.response.get("Error", {})
            if error.get("Code") != "ServiceUnavailableException" or "nothing was written" not in error.get("Message", "") \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_FORWARDED = re.compile(r'^syncledger_requests_total\{operation="[A-Za-z]+\.Forwarded",status="\d+"\} (\d+)$', re.M)


def forwarded_requests(node):
    """Requests `node` forwarded to another node (its /metrics), in all."""
    return sum(int(n) for n in _FORWARDED.findall(node.metrics()))


@contextlib.contextmanager
def running_bed(tmp_path_factory, name, **options):
    """A test module's cluster (`options` go to ``ClusterBed``): a 3-node nats-server cluster
    and three nodes, once the shards are balanced among them (every shard owned, no node above
    its share: a fresh cluster's first node takes most shards and hands the surplus back, and a
    shard being handed over is briefly owned by nobody — a write then answers 503); everything
    stopped afterwards."""
    root = str(tmp_path_factory.mktemp(name))
    with NatsCluster(os.path.join(root, "nats")) as nats:
        bed = ClusterBed(root, nats, **options)
        try:
            bed.wait_balanced(timeout=120)
            yield bed
        finally:
            bed.stop()


class ClusterBed:
    def __init__(self, root, nats, shards=8, lease_seconds=2, nodes=3, extra_args=()):
        self.root = root
        self.extra_args = list(extra_args)
        self.nats = nats
        self.shards = shards
        self.lease_seconds = lease_seconds
        self.paused = set()
        self.nodes = [self.start_node(i) for i in range(nodes)]

    def args(self, i):
        return ["--cluster", self.nats.urls, "--shards", str(self.shards), "--node-id", f"node{i}",
                "--lease-seconds", str(self.lease_seconds), "--cluster-replicas", "3", *self.nats.node_args(),
                *self.extra_args]

    def start_node(self, i):
        return Server(os.path.join(self.root, f"node{i}"), self.args(i))

    def restart(self, i):
        self.nodes[i] = self.start_node(i)
        return self.nodes[i]

    def status(self, node):
        r = node.raw("GET", "/cluster/status")
        assert r.status_code == 200, (r.status_code, r.text[:500])
        return r.json()

    def live(self):
        """The nodes running and not paused."""
        return [n for i, n in enumerate(self.nodes) if n.process.poll() is None and i not in self.paused]

    def kill(self, i):
        self.nodes[i].process.send_signal(signal.SIGKILL)
        self.nodes[i].process.wait(timeout=10)

    def pause(self, i):
        self.paused.add(i)
        self.nodes[i].process.send_signal(signal.SIGSTOP)

    def resume(self, i):
        self.nodes[i].process.send_signal(signal.SIGCONT)
        self.paused.discard(i)

    def index_of(self, node):
        return self.nodes.index(node)

    def wait_owned(self, timeout=60):
        """Until every shard has exactly one owner among the live nodes, as each of them says."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                statuses = [self.status(n) for n in self.live()]
                owned = sum(s["OwnedHere"] for s in statuses)
                owners = {sh["Shard"]: sh.get("Owner") for sh in statuses[0]["Shards"]}
                if owned == self.shards and all(owners.values()):
                    return statuses
                last = (owned, owners)
            except (AssertionError, OSError) as e:
                last = e
            time.sleep(0.1)
        raise AssertionError(f"shards not all owned within {timeout}s: {last}")

    def wait_converged(self, timeout=60):
        """Until every live node has applied every shard's last message and all heads digests agree."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            statuses = [self.status(n) for n in self.live()]
            lagging = [(s["Node"], sh["Shard"], sh.get("Lag"), sh.get("Failure")) for s in statuses for sh in s["Shards"]
                       if sh.get("Lag") != 0]
            digests = {s["HeadsDigest"] for s in statuses}
            if not lagging and len(digests) == 1:
                return statuses
            last = (lagging[:6], digests)
            time.sleep(0.1)
        raise AssertionError(f"replicas did not converge within {timeout}s: {last}")

    def wait_balanced(self, timeout=300):
        """Until every shard has an owner and no live node owns more than its share
        (shards ÷ live nodes, rounded up): the nodes hand surplus shards back at their lease rounds.
        Returns the shards each live node owns."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            with contextlib.suppress(AssertionError, OSError):
                live = self.live()
                statuses = [self.status(n) for n in live]
                owned = [s["OwnedHere"] for s in statuses]
                share = math.ceil(self.shards / len(live))
                owners = {sh["Shard"]: sh.get("Owner") for sh in statuses[0]["Shards"]}
                last = owned
                if sum(owned) == self.shards and max(owned) <= share and all(owners.values()):
                    return owned
            time.sleep(0.5)  # a /cluster/status costs its node 0.1 s of CPU or more
        raise AssertionError(f"ownership did not balance within {timeout}s: owned per node {last}")

    def owner_of(self, shard):
        for n in self.live():
            for sh in self.status(n)["Shards"]:
                if sh["Shard"] == shard and sh["OwnedHere"]:
                    return n
        return None

    def wait_owner(self, shard, timeout=30):
        """The node owning `shard`, waiting while it has none (ownership still balancing: a shard
        handed back is briefly without an owner)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            owner = self.owner_of(shard)
            if owner is not None:
                return owner
            time.sleep(0.05)
        raise AssertionError(f"shard {shard} had no owner for {timeout}s")

    def stop(self):
        for n in self.nodes:
            if n.process.poll() is None:
                with contextlib.suppress(Exception):
                    n.stop(timeout=15)
