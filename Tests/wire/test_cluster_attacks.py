"""Someone on the NATS bus without the cluster secret: garbage and forged writes on a shard's
subject, a forged fence, a replayed fence, a rewritten lease and forged node records. Every
shard message, lease and node record is authenticated (HMAC keyed from the cluster secret): what
fails the check is skipped and counted, never applied, never forwarded to, and the shard keeps
taking writes. And one OpenID signing key for the cluster: a developer token outlives the
registry shard's failover, every node serves the same JWKS, and a rotation keeps the old key
during the overlap.

The attacker speaks the NATS protocol by hand (``RawNats``), signed in as the nodes' NATS user."""

import base64
import http.server
import json
import os
import subprocess
import threading
import time

import pytest

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, Server, new_id
from cluster_env import retry_unwritten, running_bed
from cluster_load import shard_of
from test_cluster import put

SHARDS = 4


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "attacks", shards=SHARDS) as bed:
        yield bed


class RawNats:
    """A bare NATS client: CONNECT, PUB/HPUB and request-reply, nothing else."""

    def __init__(self, nats):
        """Signed in to `nats` (a ``NatsCluster``) as the nodes' own NATS user, over its TLS:
        the attacker here holds a credential that may publish on the cluster's subjects (a
        stolen one, or any the deployment lets publish there), which NATS's own authentication
        cannot tell from a node's — what the MACs are for."""
        self.sock, first = nats.raw_client()
        assert first == "PONG", first
        self.buf = b""
        self.sid = 0

    def close(self):
        self.sock.close()

    def _fill(self):
        chunk = self.sock.recv(65536)
        assert chunk, "the nats-server closed the connection"
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bytes(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def pub(self, subject, payload, headers=None, reply=None):
        target = subject + (" " + reply if reply else "")
        if headers is None:
            self.sock.sendall(f"PUB {target} {len(payload)}\r\n".encode() + payload + b"\r\n")
        else:
            head = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers) + b"\r\n"
            self.sock.sendall(f"HPUB {target} {len(head)} {len(head) + len(payload)}\r\n".encode() + head + payload + b"\r\n")

    def request(self, subject, payload=b"", headers=None):
        """The first reply's payload."""
        self.sid += 1
        inbox = f"_INBOX.attacker.{self.sid}"
        self.sock.sendall(f"SUB {inbox} {self.sid}\r\n".encode())
        self.pub(subject, payload, headers, reply=inbox)
        while True:
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            assert not line.startswith(b"-ERR"), line
            parts = line.split()
            if parts and parts[0] == b"MSG":
                body = self._bytes(int(parts[-1]))
            elif parts and parts[0] == b"HMSG":
                body = self._bytes(int(parts[-1]))[int(parts[-2]):]
            else:
                continue
            self.sock.sendall(f"UNSUB {self.sid}\r\n".encode())
            return body

    def publish(self, subject, payload, headers=None):
        """Publishes into JetStream; returns the stored sequence."""
        ack = json.loads(self.request(subject, payload, headers))
        assert "seq" in ack, ack
        return ack["seq"]

    def kv_get(self, bucket, key):
        """The value of `key` in KV bucket `bucket` (its last message), or None."""
        answer = json.loads(self.request(f"$JS.API.STREAM.MSG.GET.KV_{bucket}",
                                         json.dumps({"last_by_subj": f"$KV.{bucket}.{key}"}).encode()))
        if "message" not in answer:
            assert answer.get("error", {}).get("err_code") == 10037, answer  # no message found
            return None
        return base64.b64decode(answer["message"].get("data", ""))

    def last_sequence(self, shard):
        return json.loads(self.request(f"$JS.API.STREAM.INFO.SYNCLEDGER_SHARD_{shard}"))["state"]["last_seq"]

    def message(self, shard, seq):
        """(headers as pairs, payload) of message `seq` of shard `shard`'s stream."""
        answer = json.loads(self.request(f"$JS.API.STREAM.MSG.GET.SYNCLEDGER_SHARD_{shard}", json.dumps({"seq": seq}).encode()))
        message = answer["message"]
        pairs = []
        for line in base64.b64decode(message.get("hdrs", "")).decode().split("\r\n")[1:]:
            if ": " in line:
                pairs.append(tuple(line.split(": ", 1)))
        return pairs, base64.b64decode(message.get("data", ""))


class Attacker:
    """An HTTP listener standing for the attacker's URL: records every request it receives."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except OSError:
                    pass

            def do_ANY(self):
                received.append((self.command, self.path, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = do_DELETE = do_ANY

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def nats(bed):
    client = RawNats(bed.nats)
    yield client
    client.close()


def shard_status(bed, node, shard):
    return next(sh for sh in bed.status(node)["Shards"] if sh["Shard"] == shard)


def wait_applied(bed, shard, sequence, timeout=30):
    """Until every live node has applied `shard`'s stream through `sequence`; their statuses."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [shard_status(bed, n, shard) for n in bed.live()]
        if all(s["Applied"] >= sequence for s in statuses):
            return statuses
        assert time.monotonic() < deadline, f"shard {shard} not applied through {sequence}: {statuses}"
        time.sleep(0.05)


def identity_in(pool, shard):
    while True:
        identity = new_id()
        if shard_of(pool, identity, SHARDS) == shard:
            return identity


def non_owner(bed, shard):
    owner = bed.wait_owner(shard)
    return owner, next(n for n in bed.live() if n is not owner)


def records(node, pool, identity, dataset):
    page = node.client().list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)
    return {r["Key"]: r.get("Value") for r in page["Records"]}


def forged_write(tmp_path, pool, identity):
    """The segment a real SyncLedger writes for one UpdateRecords of `identity` — well-formed,
    chained from the stream's start — made on a single node outside the cluster."""
    single = Server(str(tmp_path / "single"))
    try:
        put(single.client(), pool, identity, "forged", {"owned": "by the attacker"})
    finally:
        assert single.stop() == 0
    out = tmp_path / "segments"
    done = subprocess.run([BINARY, "export", "--data", single.data_dir, "--out", str(out)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    log = subprocess.run([BINARY, "log", "--data", single.data_dir, "--json", "--system"], capture_output=True, timeout=60)
    streams = {(e["stream"]["pool"], e["stream"]["identity"]) for e in map(json.loads, log.stdout.decode().splitlines())}
    assert streams == {(pool, identity)}, streams  # one identity: one shard's message
    files = sorted(os.listdir(out))
    assert len(files) == 1, files
    return (out / files[0]).read_bytes()


def test_garbage_and_forged_writes_on_a_shard_subject_are_skipped_and_the_shard_keeps_writing(bed, nats, tmp_path):
    pool = new_id()
    shard = 1
    victim = identity_in(pool, shard)
    forged = forged_write(tmp_path, pool, victim)
    before = {n.data_dir: shard_status(bed, n, shard)["Rejected"] for n in bed.live()}
    subject = f"syncledger.shard.{shard}"
    nats.publish(subject, b"\x00garbage, not a segment\xff")
    # A well-formed write (it chains: the victim's dataset is new), without a MAC, then with a
    # made-up one, then claiming to be a fence.
    nats.publish(subject, forged, [("SyncLedger-Kind", "entries"), ("SyncLedger-Node", "node0")])
    nats.publish(subject, forged, [("SyncLedger-Kind", "entries"), ("SyncLedger-Node", "node0"), ("SyncLedger-MAC", "0" * 64)])
    last = nats.publish(subject, forged, [("SyncLedger-Kind", "fence"), ("SyncLedger-Node", "node0")])
    for status in wait_applied(bed, shard, last):
        assert status.get("Failure") is None, status
        assert "not authenticated" in status.get("LastRejected", ""), status
    for n in bed.live():
        assert shard_status(bed, n, shard)["Rejected"] - before[n.data_dir] == 4
        assert records(n, pool, victim, "forged") == {}, "a forged write was applied"
        metrics = n.raw("GET", "/metrics").text
        assert f'syncledger_shard_rejected_messages_total{{shard="{shard}"}}' in metrics
    # The shard takes writes, through its owner and forwarded by another node, on every replica.
    owner, other = non_owner(bed, shard)
    writer = identity_in(pool, shard)
    retry_unwritten(put, owner.client(), pool, writer, "a", {"k": "1"})
    retry_unwritten(put, other.client(), pool, writer, "a", {"k": "2"})
    retry_unwritten(put, other.client(), pool, victim, "forged", {"mine": "yes"})
    bed.wait_converged()
    for n in bed.live():
        assert records(n, pool, writer, "a") == {"k": "2"}
        assert records(n, pool, victim, "forged") == {"mine": "yes"}
    # `cluster status` with the secret counts the skipped messages per node (as each node
    # announces them, every lease round).
    env = dict(os.environ, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run([BINARY, "cluster", "status", "--cluster", bed.nats.urls, "--json"], capture_output=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["verified"] is True
        if len(report["rejectedMessages"]) == 3 and all(v >= 4 for v in report["rejectedMessages"].values()):
            break
        assert time.monotonic() < deadline, report["rejectedMessages"]
        time.sleep(0.2)


def test_an_authenticated_message_replayed_is_harmless(bed, nats):
    """Re-published verbatim on its own shard it appends nothing (its entries are there); on
    another shard its MAC does not hold (the shard is in it)."""
    pool = new_id()
    shard = 2
    identity = identity_in(pool, shard)
    owner, other = non_owner(bed, shard)
    retry_unwritten(put, owner.client(), pool, identity, "a", {"k": "1"})
    wait_applied(bed, shard, nats.last_sequence(shard))
    seq = nats.last_sequence(shard)
    headers, payload = nats.message(shard, seq)
    assert dict(headers).get("SyncLedger-Kind") == "entries" and "SyncLedger-MAC" in dict(headers)
    digests = {bed.status(n)["HeadsDigest"] for n in bed.live()}
    replayed = nats.publish(f"syncledger.shard.{shard}", payload, [h for h in headers if not h[0].startswith("Nats-")])
    elsewhere_before = {n.data_dir: shard_status(bed, n, 3)["Rejected"] for n in bed.live()}
    moved = nats.publish("syncledger.shard.3", payload, [h for h in headers if not h[0].startswith("Nats-")])
    for status in wait_applied(bed, shard, replayed):
        assert status.get("Failure") is None, status
    wait_applied(bed, 3, moved)
    assert {bed.status(n)["HeadsDigest"] for n in bed.live()} == digests, "the replay changed a replica"
    for n in bed.live():
        assert shard_status(bed, n, 3)["Rejected"] == elsewhere_before[n.data_dir] + 1
    retry_unwritten(put, other.client(), pool, identity, "a", {"k": "2"})
    bed.wait_converged()
    assert records(bed.nodes[0], pool, identity, "a") == {"k": "2"}


def test_a_forged_fence_and_a_replayed_one_take_no_shard(bed, nats):
    forged_and_replayed_fence(bed, nats, retried=False)


def forged_and_replayed_fence(bed, nats, retried):
    bed.wait_balanced()
    shard = 0
    owner = bed.wait_owner(shard)
    owner_id = bed.status(owner)["Node"]
    subject = f"syncledger.shard.{shard}"
    # Forged: no MAC, a huge lease revision.
    note = json.dumps({"node": "evil", "url": "http://127.0.0.1:9", "revision": 2 ** 62}).encode()
    last = nats.publish(subject, note, [("SyncLedger-Kind", "fence"), ("SyncLedger-Node", "evil")])
    wait_applied(bed, shard, last)
    # Replayed: an earlier authenticated fence of another node (shards moved while the nodes
    # started; else move one now).
    fences = []
    for seq in range(1, last + 1):
        headers, payload = nats.message(shard, seq)
        if dict(headers).get("SyncLedger-Kind") == "fence" and "SyncLedger-MAC" in dict(headers):
            fences.append((headers, payload))
    others = [f for f in fences if json.loads(f[1])["node"] != owner_id]
    if not others:
        # Once only: after the owner's restart another node has fenced the shard.
        assert not retried, f"no authenticated fence of a node other than {owner_id} on shard {shard}"
        index = bed.index_of(owner)
        bed.nodes[index].stop(timeout=15)
        bed.wait_owner(shard)
        bed.restart(index)
        bed.wait_balanced()
        return forged_and_replayed_fence(bed, nats, retried=True)
    headers, payload = others[-1]
    stale_before = shard_status(bed, owner, shard).get("StaleFences", 0)
    last = nats.publish(subject, payload, [h for h in headers if not h[0].startswith("Nats-")])
    wait_applied(bed, shard, last)
    status = shard_status(bed, owner, shard)
    assert status["OwnedHere"], f"{owner_id} gave shard {shard} up: {status}"
    assert status["StaleFences"] == stale_before + 1, status
    # Writes of the registry shard go on, through any node.
    for n in bed.live():
        admin, _ = identity_clients(n)
        retry_unwritten(admin.create_identity_pool, IdentityPoolName="Fenced", AllowUnauthenticatedIdentities=True)
    assert bed.wait_owner(shard) is owner


def test_a_rewritten_lease_and_forged_node_records_are_never_trusted(bed, nats):
    bed.wait_balanced()
    attacker = Attacker()
    try:
        pool = new_id()
        shard = 3
        owner, other = non_owner(bed, shard)
        forged_before = {n.data_dir: bed.status(n)["ForgedRecords"] for n in bed.live()}
        holder = json.dumps({"node": "evil", "url": attacker.url}).encode()
        record = json.dumps({"url": attacker.url, "applied": [0] * SHARDS, "owned": []}).encode()
        identity = identity_in(pool, shard)
        # Rewrite the lease again and again (as the owner puts its own back) while writes of the
        # shard go through a node that forwards them, and announce five nodes that do not exist.
        deadline = time.monotonic() + 3 * bed.lease_seconds
        n = 0
        while time.monotonic() < deadline:
            nats.publish(f"$KV.syncledger_leases.shard.{shard}", holder)
            for i in range(5):
                nats.publish(f"$KV.syncledger_leases.node.evil{i}", record)
            retry_unwritten(put, other.client(), pool, identity, "a", {"n": str(n)})
            n += 1
        assert attacker.received == [], f"forwarded to the attacker: {attacker.received[:2]}"
        # Every node saw the forged records (and the owner the forged lease) and ignored them;
        # the owner kept the attacked shard (other shards may move meanwhile: a rebalance).
        for node in bed.live():
            assert bed.status(node)["ForgedRecords"] > forged_before[node.data_dir]
        assert shard_status(bed, owner, shard)["OwnedHere"], f"the owner lost shard {shard}"
        bed.wait_converged()
        assert records(bed.nodes[0], pool, identity, "a") == {"n": str(n - 1)}
    finally:
        attacker.close()


class Rewriter:
    """A thread of the attacker's putting `values` (in turn) on KV key `key` of the lease bucket,
    every `period` seconds, until stopped; counts its puts."""

    def __init__(self, bed, key, values, period=0.3):
        self.client = RawNats(bed.nats)
        self.key, self.values, self.period = key, values, period
        self.puts = 0
        self.error = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.done.is_set():
                self.client.publish(f"$KV.syncledger_leases.{self.key}", self.values[self.puts % len(self.values)])
                self.puts += 1
                self.done.wait(self.period)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self.done.set()
        self.thread.join(timeout=30)
        self.client.close()
        assert self.error is None, self.error


def test_a_lease_value_rewritten_on_the_bus_never_keeps_a_shard_from_an_owner(bed, nats):
    """The owner of a shard dies; the attacker keeps rewriting the shard's lease — alternately
    with a value without a MAC and with the dead owner's own sealed value, copied — so that the
    lease never runs out. Some node still takes the shard within a few lease times, keeps it,
    and its writes go through, while the rewriting goes on."""
    bed.wait_balanced()
    shard = 2
    owner = bed.wait_owner(shard)
    index = bed.index_of(owner)
    sealed = nats.kv_get("syncledger_leases", f"shard.{shard}")
    assert sealed and sealed[64:65] == b".", sealed
    forged = json.dumps({"node": "evil", "url": "http://127.0.0.1:9"}).encode()
    bed.kill(index)
    rewriter = Rewriter(bed, f"shard.{shard}", [forged, sealed])
    try:
        deadline = time.monotonic() + 60
        while (new := bed.owner_of(shard)) is None:
            assert time.monotonic() < deadline, f"no node took shard {shard} while its lease was rewritten ({rewriter.puts} puts)"
            time.sleep(0.1)
        pool = new_id()
        identity = identity_in(pool, shard)
        for n in bed.live():
            retry_unwritten(put, n.client(), pool, identity, "a", {"via": n.url}, timeout=60)
        puts = rewriter.puts
        # Writes still go through after a few more lease times of rewriting.
        deadline = time.monotonic() + 3 * bed.lease_seconds
        while time.monotonic() < deadline or rewriter.puts < puts + 5:
            assert time.monotonic() < deadline + 60, "the rewriting stalled"
            time.sleep(0.1)
        retry_unwritten(put, new.client(), pool, identity, "b", {"k": "v"}, timeout=60)
    finally:
        rewriter.stop()
        bed.restart(index)
    bed.wait_balanced()
    bed.wait_converged()
    assert records(bed.nodes[index], pool, identity, "b") == {"k": "v"}


def owned_count(bed, node):
    return sum(1 for sh in bed.status(node)["Shards"] if sh["OwnedHere"])


def test_a_replayed_node_record_does_not_change_the_shares(bed, nats):
    """Two nodes stop; the one left takes every shard. The attacker puts back the two records
    they announced before they stopped (sealed, copied from the bus) again and again: were
    they counted, the node left would think the cluster three nodes and hand half its shards
    back to nobody. The time sealed in each record shows it old: the shares do not move."""
    bed.wait_balanced()
    ids = [bed.status(n)["Node"] for n in bed.nodes]
    deadline = time.monotonic() + 60
    while True:  # each node's record, as it announced it last (every third of a lease time)
        old = {i: nats.kv_get("syncledger_leases", f"node.{ids[i]}") for i in (1, 2)}
        if all(v and v[64:65] == b"." for v in old.values()):
            break
        assert time.monotonic() < deadline, (ids, old)
        time.sleep(0.1)
    captured = time.monotonic()
    rewriters = []
    try:
        for i in (1, 2):
            bed.nodes[i].stop(timeout=15)
        lone = bed.nodes[0]
        deadline = time.monotonic() + 60
        while owned_count(bed, lone) < SHARDS:
            assert time.monotonic() < deadline, f"the node left did not take every shard: {bed.status(lone)['Shards']}"
            time.sleep(0.1)
        # The records are older than any node accepts (three lease times) once this passes.
        while time.monotonic() < captured + 3 * bed.lease_seconds + 1:
            time.sleep(0.1)
        forged_before = bed.status(lone)["ForgedRecords"]
        rewriters = [Rewriter(bed, f"node.{ids[i]}", [old[i]]) for i in (1, 2)]
        deadline = time.monotonic() + 5 * bed.lease_seconds
        while time.monotonic() < deadline or min(r.puts for r in rewriters) < 5:
            assert time.monotonic() < deadline + 60, "the replaying stalled"
            assert owned_count(bed, lone) == SHARDS, f"a replayed record shrank the share: {bed.status(lone)['Shards']}"
            time.sleep(0.1)
        assert bed.status(lone)["ForgedRecords"] > forged_before
    finally:
        for r in rewriters:
            r.stop()
        for i in (1, 2):
            if bed.nodes[i].process.poll() is not None:
                bed.restart(i)
    bed.wait_balanced()


def test_a_forged_format_mark_is_refused_saying_so_and_a_deleted_one_is_put_back(bed, nats, tmp_path):
    """The settings bucket's `format` mark decides whether a cluster's history is trusted: one
    without the cluster's MAC stops a node from starting, with an error that says so; deleted,
    the next node to start marks the cluster again (its shards' messages are authenticated)."""
    sealed = nats.kv_get("syncledger_cluster", "format")
    assert sealed and sealed[64:] == b".2", sealed
    args = [BINARY, "serve", "--data", str(tmp_path / "node9"), "--host", "127.0.0.1", "--port", "0",
            *[a if a != "node0" else "node9" for a in bed.args(0)]]
    env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    try:
        for forged in (b"2", b"3", b"0" * 64 + b".2"):
            nats.publish("$KV.syncledger_cluster.format", forged)
            done = subprocess.run(args, capture_output=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
            assert done.returncode != 0, done.stdout[-2000:]
            assert b"format mark" in done.stderr and b"not authenticated" in done.stderr, done.stderr[-2000:]
        # Nodes running go on (the mark is read at start only).
        retry_unwritten(put, bed.nodes[0].client(), new_id(), new_id(), "a", {"k": "v"})
        nats.publish("$KV.syncledger_cluster.format", b"", [("KV-Operation", "DEL")])
        node = Server(str(tmp_path / "node9b"), [a if a != "node0" else "node9" for a in bed.args(0)])
        try:
            assert nats.kv_get("syncledger_cluster", "format") == sealed
        finally:
            assert node.stop(timeout=15) == 0
    finally:
        if nats.kv_get("syncledger_cluster", "format") != sealed:
            nats.publish("$KV.syncledger_cluster.format", sealed)
    bed.wait_balanced()


def identity_clients(node):
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    no_retry = Config(retries={"max_attempts": 1, "mode": "standard"})
    admin = boto3.client("cognito-identity", endpoint_url=node.url, region_name=REGION,
                         aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET, config=no_retry)
    anonymous = boto3.client("cognito-identity", endpoint_url=node.url, region_name=REGION,
                             config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1, "mode": "standard"}))
    return admin, anonymous


def jwks(node):
    r = node.raw("GET", "/.well-known/jwks.json", sign=False)
    assert r.status_code == 200, r.text
    return r.json()


def kid_of(token):
    head = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))["kid"]


def test_a_developer_token_outlives_the_registry_shards_failover_and_a_rotation(bed):
    bed.wait_balanced()
    keys = [jwks(n) for n in bed.live()]
    assert all(k == keys[0] for k in keys) and len(keys[0]["keys"]) == 1, keys
    owner = bed.wait_owner(0)
    survivor = next(n for n in bed.live() if n is not owner)
    admin, _ = identity_clients(survivor)
    pid = retry_unwritten(admin.create_identity_pool, IdentityPoolName="Tokens", AllowUnauthenticatedIdentities=False,
                          DeveloperProviderName="login.tokens.example")["IdentityPoolId"]
    out = retry_unwritten(admin.get_open_id_token_for_developer_identity, IdentityPoolId=pid,
                          Logins={"login.tokens.example": "user-1"}, TokenDuration=86400)
    identity, token = out["IdentityId"], out["Token"]
    assert kid_of(token) == keys[0]["keys"][0]["kid"]

    # The registry shard's owner dies; another node takes the shard and accepts the token.
    index = bed.index_of(owner)
    bed.kill(index)
    try:
        deadline = time.monotonic() + 60
        while (new := bed.owner_of(0)) is None or new is owner:
            assert time.monotonic() < deadline, "no node took the registry shard"
            time.sleep(0.1)
        for node in bed.live():
            _, anonymous = identity_clients(node)
            credentials = retry_unwritten(anonymous.get_credentials_for_identity, IdentityId=identity,
                                          Logins={"cognito-identity.amazonaws.com": token})["Credentials"]
            assert credentials["AccessKeyId"]
    finally:
        bed.restart(index)
    bed.wait_owned()
    keys = [jwks(n) for n in bed.live()]
    assert all(k == keys[0] for k in keys), keys

    # A rotation: the next generation signs, the previous one is still listed and accepted.
    env = dict(os.environ, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    done = subprocess.run([BINARY, "cluster", "rotate-identity-key", "--cluster", bed.nats.urls], capture_output=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert b"generation 2" in done.stdout, done.stdout
    deadline = time.monotonic() + 30
    while True:
        keys = [jwks(n) for n in bed.live()]
        if all(len(k["keys"]) == 2 and k == keys[0] for k in keys):
            break
        assert time.monotonic() < deadline, keys
        time.sleep(0.1)
    kids = [k["kid"] for k in keys[0]["keys"]]
    assert kids[0].startswith("g2-") and kids[1] == kid_of(token), kids
    for node in bed.live():
        admin, anonymous = identity_clients(node)
        fresh = retry_unwritten(admin.get_open_id_token_for_developer_identity, IdentityPoolId=pid,
                                Logins={"login.tokens.example": "user-1"})["Token"]
        assert kid_of(fresh) == kids[0]
        for t in (token, fresh):
            assert retry_unwritten(anonymous.get_credentials_for_identity, IdentityId=identity,
                                   Logins={"cognito-identity.amazonaws.com": t})["Credentials"]["AccessKeyId"]
    # Without the secret the rotation is refused, and nothing moves.
    env = {k: v for k, v in os.environ.items() if k not in ("SYNCLEDGER_SECRET_ACCESS_KEY", "SYNCLEDGER_CLUSTER_SECRET")}
    done = subprocess.run([BINARY, "cluster", "rotate-identity-key", "--cluster", bed.nats.urls], capture_output=True, timeout=60, env=env)
    assert done.returncode != 0 and b"cluster secret" in done.stderr, done.stderr
    # A forged generation in the settings bucket moves nothing either: each node reads it (and
    # counts it as forged) and keeps its keys.
    forged_before = {n.data_dir: bed.status(n)["ForgedRecords"] for n in bed.live()}
    client = RawNats(bed.nats)
    try:
        client.publish("$KV.syncledger_cluster.identity-key", json.dumps({"current": 9}).encode())
    finally:
        client.close()
    deadline = time.monotonic() + 30
    while not all(bed.status(n)["ForgedRecords"] > forged_before[n.data_dir] for n in bed.live()):
        assert time.monotonic() < deadline, "no node read the forged generation"
        time.sleep(0.1)
    for node in bed.live():
        assert [k["kid"] for k in jwks(node)["keys"]] == kids
