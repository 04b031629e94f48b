"""A write load on a cluster that records every acknowledged write, and the checks that every
one of them is in the log, byte for byte, at the sync count it was acknowledged with."""

import hashlib
import json
import random
import subprocess
import threading
import time

import botocore.exceptions
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import BINARY, new_id

_CLIENT_CONFIG = Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=20)


def shard_of(pool, identity, shards):
    """SyncLedger's shard map: SHA-256(pool ‖ 0 ‖ identity), first 8 bytes big-endian, mod shards;
    SyncLedger's own identity's streams are all on shard 0."""
    if identity == "_syncledger:0":
        return 0
    digest = hashlib.sha256(pool.encode() + b"\0" + identity.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


class WriteLoad:
    """`writers` threads, each writing key `k` of its own identity's dataset `d` with values
    `w<i>-<n>` through a random live node; an acknowledgement is (time, sync count, value)."""

    def __init__(self, bed, writers=6, pool=None, identities=None):
        self.bed = bed
        self.pool = pool or new_id()
        self.identities = list(identities) if identities else [new_id() for _ in range(writers)]
        writers = len(self.identities)
        self.acked = {identity: [] for identity in self.identities}
        self.failures = {}
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(writers)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a writer did not stop"

    def _fail(self, kind):
        with self.lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1

    def _run(self, i):
        identity = self.identities[i]
        clients = {}
        n = 0
        while not self.stopping.is_set():
            nodes = self.bed.live()
            if not nodes:
                time.sleep(0.05)
                continue
            node = random.choice(nodes)
            client = clients.get(node.url) or clients.setdefault(node.url, node.client_with(_CLIENT_CONFIG))
            try:
                page = client.list_records(IdentityPoolId=self.pool, IdentityId=identity, DatasetName="d")
                count = {r["Key"]: r["SyncCount"] for r in page["Records"]}.get("k", 0)
                value = f"w{i}-{n}"
                n += 1
                sent = time.monotonic()
                answer = client.update_records(IdentityPoolId=self.pool, IdentityId=identity, DatasetName="d",
                                               SyncSessionToken=page["SyncSessionToken"],
                                               RecordPatches=[{"Op": "replace", "Key": "k", "Value": value, "SyncCount": count}])
                record = answer["Records"][0]
                assert record["Value"] == value, record
                with self.lock:
                    self.acked[identity].append((sent, time.monotonic(), record["SyncCount"], value))
            except ClientError as e:
                self._fail(e.response["Error"]["Code"])
            except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError,
                    botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectTimeoutError):
                self._fail("connection")
                time.sleep(0.02)

    def count(self):
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def wait_for(self, more, timeout=60, identities=None):
        """Until `more` further writes (of `identities`, or any) are acknowledged."""
        def total():
            with self.lock:
                return sum(len(self.acked[i]) for i in (identities or self.identities))
        target = total() + more
        deadline = time.monotonic() + timeout
        while total() < target:
            assert time.monotonic() < deadline, f"writes stalled: {total()} of {target}, failures {self.failures}"
            time.sleep(0.02)

    def first_ack_after(self, instant, identities):
        """When the first write sent after `instant` was acknowledged."""
        with self.lock:
            times = [done for i in identities for (sent, done, _, _) in self.acked[i] if sent > instant]
        return min(times) if times else None


def identities_on(pool, shard, shards, count):
    """`count` fresh identity ids of `pool` that fall on `shard`."""
    found = []
    while len(found) < count:
        identity = new_id()
        if shard_of(pool, identity, shards) == shard:
            found.append(identity)
    return found


def stream_entries(data_dir, pool, identity, dataset="d"):
    out = subprocess.run([BINARY, "log", "--data", data_dir, "--stream", "--pool", pool, "--identity", identity,
                          "--dataset", dataset, "--json", "--limit", "100000000"], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return [json.loads(line) for line in out.stdout.decode().splitlines() if line.strip()]


def check_acknowledged(load, data_dir):
    """Every acknowledged write is the entry at its sync count; offsets are dense from 1."""
    checked = 0
    for identity, acks in load.acked.items():
        entries = stream_entries(data_dir, load.pool, identity)
        offsets = [e["offset"] for e in entries]
        assert offsets == list(range(1, len(entries) + 1)), f"{identity}: offsets not dense: {offsets[:20]}"
        by_offset = {e["offset"]: e for e in entries}
        for _, _, count, value in acks:
            entry = by_offset.get(count)
            assert entry is not None, f"{identity}: acknowledged write {value} at sync count {count} is missing"
            puts = {ev["key"]: ev.get("value") for ev in entry["events"]}
            assert puts == {"k": value}, f"{identity}: sync count {count} holds {puts}, acknowledged {value}"
            checked += 1
        # Sync counts of acknowledgements never repeat.
        counts = [c for _, _, c, _ in acks]
        assert len(counts) == len(set(counts)), f"{identity}: one sync count acknowledged twice"
    return checked
