"""The cluster behind HAProxy (Debian's, with deploy/haproxy/haproxy.cfg and syncledger.lua, only
the addresses replaced: haproxy_env): every answer names its shard's owner, the balancer learns from the
answers and sends each identity's requests to that owner, so writes are not forwarded between
nodes; a killed owner's requests go to a live node, which forwards them to the new owner.

Needs `haproxy` (tools/setup installs it)."""

import time

import boto3
import pytest
from botocore.config import Config

import haproxy_env
from conftest import ADMIN_KEY, ADMIN_SECRET, REGION, SERVICE, new_id
from cluster_env import forwarded_requests, retry_unwritten, running_bed
from cluster_load import shard_of

SHARDS = 8


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-balancer", shards=SHARDS) as bed:
        yield bed


class Balancer(haproxy_env.Balancer):
    def __init__(self, bed, root):
        super().__init__([n.port for n in bed.nodes], root)

    def client(self):
        return boto3.client(SERVICE, endpoint_url=self.url, region_name=REGION, aws_access_key_id=ADMIN_KEY,
                            aws_secret_access_key=ADMIN_SECRET, config=Config(retries={"total_max_attempts": 1}))


@pytest.fixture
def balancer(bed, tmp_path):
    b = Balancer(bed, str(tmp_path))
    yield b
    b.stop()


def forwarded(bed):
    """Requests the live nodes forwarded to another node, in all."""
    return sum(forwarded_requests(node) for node in bed.live())


def put(client, pool, identity, value):
    page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d")
    count = {r["Key"]: r["SyncCount"] for r in page["Records"]}.get("k", 0)
    return client.update_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d", SyncSessionToken=page["SyncSessionToken"],
                                 RecordPatches=[{"Op": "replace", "Key": "k", "Value": value, "SyncCount": count}])


def test_every_answer_names_its_shards_owner(bed):
    pool, identity = new_id(), new_id()
    shard = shard_of(pool, identity, SHARDS)
    owner = bed.wait_owner(shard)
    for node in bed.live():
        answer = retry_unwritten(put, node.client(), pool, identity, "v")
        headers = answer["ResponseMetadata"]["HTTPHeaders"]
        assert headers["x-syncledger-shard"] == str(shard)
        assert headers["x-syncledger-shards"] == str(SHARDS)
        assert headers["x-syncledger-shard-owner"] == f"node{bed.index_of(owner)}"
        page = node.client().list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d")
        assert page["ResponseMetadata"]["HTTPHeaders"]["x-syncledger-shard"] == str(shard)


def test_through_the_balancer_writes_go_straight_to_their_owner(bed, balancer):
    bed.wait_balanced(timeout=120)
    client = balancer.client()
    pool = new_id()
    identities = [new_id() for _ in range(24)]
    assert len({shard_of(pool, i, SHARDS) for i in identities}) > 3, "identities over several shards"
    for identity in identities:  # the first answers teach the balancer the shard count and owners
        retry_unwritten(put, client, pool, identity, "first")
    before = forwarded(bed)
    for round_no in range(3):
        for identity in identities:
            answer = put(client, pool, identity, f"r{round_no}")
            assert answer["Records"][0]["Value"] == f"r{round_no}"
    after = forwarded(bed)
    assert after == before, f"{after - before} of {3 * len(identities)} writes were forwarded between nodes"
    # Without the balancer, spread over the nodes, about two in three are.
    nodes = bed.live()
    for n, identity in enumerate(identities):
        put(nodes[n % len(nodes)].client(), pool, identity, "direct")
    assert forwarded(bed) - after >= len(identities) // 3


def test_a_killed_owners_identities_reach_the_new_owner_through_the_balancer(bed, balancer):
    bed.wait_balanced(timeout=120)
    client = balancer.client()
    pool = new_id()
    identity = new_id()
    shard = shard_of(pool, identity, SHARDS)
    retry_unwritten(put, client, pool, identity, "before")
    put(client, pool, identity, "learnt")
    owner = bed.wait_owner(shard)
    index = bed.index_of(owner)
    bed.kill(index)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = put(client, pool, identity, "after")
                break
            except Exception as e:  # a 503 while the shard changes owner
                assert time.monotonic() < deadline, f"no write got through the balancer after the owner died: {e}"
                time.sleep(0.1)
        assert answer["ResponseMetadata"]["HTTPHeaders"]["x-syncledger-shard-owner"] != f"node{index}"
        put(client, pool, identity, "again")
    finally:
        bed.restart(index)
        bed.wait_owned()
        bed.wait_converged()
