"""Cluster mode: three SyncLedger nodes over a real 3-node JetStream cluster (nats-server 2.15,
`sync_interval: always`), every shard's log an R3 file stream, every node's LMDB a replica.
"""

import os

import pytest

from conftest import ADMIN_KEY, new_id, strip
from cluster_env import ClusterBed
from nats_env import NatsCluster


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cluster"))
    with NatsCluster(os.path.join(root, "nats")) as nats:
        bed = ClusterBed(root, nats)
        try:
            bed.wait_owned()
            yield bed
        finally:
            bed.stop()


def put(client, pool, identity, dataset, values):
    page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)
    counts = {r["Key"]: r["SyncCount"] for r in page["Records"]}
    patches = [{"Op": "replace", "Key": k, "Value": v, "SyncCount": counts.get(k, 0)} for k, v in sorted(values.items())]
    return client.update_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset,
                                 SyncSessionToken=page["SyncSessionToken"], RecordPatches=patches)


def test_writes_through_any_node_reach_every_replica(bed):
    pool = new_id()
    identities = [new_id() for _ in range(12)]
    for i, identity in enumerate(identities):
        client = bed.nodes[i % 3].client()
        answer = put(client, pool, identity, "notes", {"a": f"v{i}", "b": "x"})
        assert sorted(r["Key"] for r in answer["Records"]) == ["a", "b"]
        assert all(r["SyncCount"] == 1 for r in answer["Records"])
    statuses = bed.wait_converged()
    assert sum(s["OwnedHere"] for s in statuses) == bed.shards
    for node in bed.nodes:
        client = node.client()
        for i, identity in enumerate(identities):
            page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="notes")
            assert {r["Key"]: r["Value"] for r in page["Records"]} == {"a": f"v{i}", "b": "x"}
            assert page["DatasetSyncCount"] == 1
