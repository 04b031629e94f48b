"""Moving a single-node ledger into a new cluster (`syncledger cluster import`, chains checked)
and a cluster's shard back out (`syncledger cluster export` → `syncledger import`); what a node
refuses at start."""

import json
import os
import subprocess

import pytest

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, Server, new_id
from cluster_env import ClusterBed, retry_unwritten
from cluster_load import shard_of
from nats_env import NatsCluster
from test_cluster import put

SHARDS = 4


def run(*args, env=None, timeout=120):
    # `cluster import` and `export` seal and check messages with the cluster secret (here the
    # admin secret the nodes share).
    env = env or dict(os.environ, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    out = subprocess.run([BINARY, *args], capture_output=True, timeout=timeout, env=env)
    return out.returncode, out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace")


def records(client, pool, identity, dataset):
    page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)
    return page["DatasetSyncCount"], {r["Key"]: r.get("Value") for r in page["Records"]}


def test_a_ledger_moves_into_a_new_cluster_and_a_shard_moves_back_out(tmp_path):
    root = str(tmp_path)
    # A single-node ledger with history: puts, a removal, a deleted and recreated dataset.
    single = Server(os.path.join(root, "single"))
    pool = new_id()
    identities = [new_id() for _ in range(10)]
    client = single.client()
    for i, identity in enumerate(identities):
        put(client, pool, identity, "a", {"x": f"{i}", "y": "1"})
        put(client, pool, identity, "a", {"x": f"{i}!"})
        put(client, pool, identity, "b", {"z": "z"})
    client.delete_dataset(IdentityPoolId=pool, IdentityId=identities[0], DatasetName="b")
    put(client, pool, identities[0], "b", {"again": "1"})
    expected = {(i, d): records(client, pool, i, d) for i in identities for d in ("a", "b")}
    # Device messages, and a consumer that acknowledged the first three of six.
    from devices_env import Caller, Consumer
    sent = []
    for n, identity in enumerate(identities[:3] * 2):
        caller = Caller.of(single, pool, identity)
        sequence = caller.send(caller.new_device(), f"m{n}", {"n": str(n)})
        sent.append((f"m{n}", sequence))
    consumer = Consumer(single, name="billing.eu")
    assert consumer.ack(sent[2][1])["Acknowledged"] == 3
    assert single.stop() == 0
    code, out, err = run("messages", "consumers", "--data", single.data_dir)
    assert code == 0 and "billing.eu" in out and "cluster" not in err, (out, err)

    with NatsCluster(os.path.join(root, "nats")) as nats:
        code, out, err = run("cluster", "import", "--data", single.data_dir, "--cluster", nats.urls, "--shards", str(SHARDS))
        assert code == 0, err
        assert "imported" in out and f"{SHARDS} shards" in out and "1 message consumer(s)" in out, out
        # Twice is refused whole: the streams are no longer empty.
        code, out, err = run("cluster", "import", "--data", single.data_dir, "--cluster", nats.urls, "--shards", str(SHARDS))
        assert code != 0 and "already holds" in err, (out, err)

        bed = ClusterBed(root, nats, shards=SHARDS, lease_seconds=2)
        try:
            bed.wait_owned()
            bed.wait_balanced()  # no shard changes hands under the checks below
            bed.wait_converged()
            for node in bed.nodes:
                c = node.client()
                for (identity, dataset), want in expected.items():
                    assert records(c, pool, identity, dataset) == want, (node.data_dir, identity, dataset)
            # The consumer goes on in the cluster where it stood: the three it had not acknowledged.
            r = bed.nodes[1].raw("GET", "/messages", query="consumer=billing.eu&limit=100")
            assert r.status_code == 200, r.text
            page = r.json()
            # (In the shards' order: the import publishes each stretch of the feed shard by shard.)
            assert sorted(m["MessageId"] for m in page["Messages"]) == ["m3", "m4", "m5"], page
            r = bed.nodes[2].raw("POST", "/messages/ack", body={"Consumer": "billing.eu", "Position": page["LastPosition"]})
            assert r.status_code == 200 and r.json()["Consumer"]["Acknowledged"] == 6, r.text
            # The replicas go on from the imported history.
            retry_unwritten(put, bed.nodes[2].client(), pool, identities[3], "a", {"after": "import"})
            bed.wait_converged()

            # A node started with another shard count is refused, saying which.
            env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
            code, out, err = run("serve", "--data", os.path.join(root, "odd"), "--port", "0", "--cluster", nats.urls,
                                 "--shards", "8", "--node-id", "odd", env=env)
            assert code != 0 and "created with 4 shards" in err, (out, err)

            # One shard out, into a single-node ledger.
            shard = shard_of(pool, identities[0], SHARDS)
            out_dir = os.path.join(root, "export")
            code, out, err = run("cluster", "export", "--cluster", nats.urls, "--shard", str(shard), "--out", out_dir)
            assert code == 0, err
            files = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir))
            assert files
            fresh = os.path.join(root, "fresh")
            code, out, err = run("import", "--data", fresh, *files)
            assert code == 0, err
            code, out, err = run("verify", "--data", fresh)
            assert code == 0, out + err
            code, out, err = run("log", "--data", fresh, "--json", "--system")
            streams = {(e["stream"]["pool"], e["stream"]["identity"]) for e in map(json.loads, out.splitlines())}
            assert streams and all(shard_of(p, i, SHARDS) == shard for p, i in streams), streams
            exported = Server(fresh)
            try:
                c = exported.client()
                for identity in identities:
                    if shard_of(pool, identity, SHARDS) == shard:
                        for dataset in ("a", "b"):
                            want = records(bed.nodes[0].client(), pool, identity, dataset)
                            assert records(c, pool, identity, dataset) == want
            finally:
                exported.stop()
        finally:
            bed.stop()


def test_a_node_refuses_to_start_without_the_shared_admin_credential_or_a_reachable_cluster(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLEDGER_")}
    code, out, err = run("serve", "--data", str(tmp_path / "a"), "--port", "0", "--cluster", "nats://127.0.0.1:1", env=env)
    assert code != 0 and "SYNCLEDGER_SECRET_ACCESS_KEY" in err, (out, err)
    env.update(SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    code, out, err = run("serve", "--data", str(tmp_path / "b"), "--port", "0", "--cluster", "http://127.0.0.1:1", env=env)
    assert code != 0 and "nats://HOST:PORT" in err, (out, err)
    code, out, err = run("serve", "--data", str(tmp_path / "c"), "--port", "0", "--cluster", "nats://127.0.0.1:1", "--follow", "http://127.0.0.1:2", env=env)
    assert code != 0 and "exclude each other" in err, (out, err)
    code, out, err = run("serve", "--data", str(tmp_path / "d"), "--port", "0", "--cluster", "nats://127.0.0.1:1", env=env, timeout=60)
    assert code != 0 and "cannot join the cluster" in err, (out, err)
    code, out, err = run("serve", "--data", str(tmp_path / "e"), "--port", "0", "--cluster", "nats://127.0.0.1:1", "--node-id", "bad id!", env=env)
    assert code != 0 and "--node-id" in err, (out, err)
