"""Push delivery on cluster nodes: the node owning a shard delivers the notifications of its
entries (the real APNs stand-in over HTTP/2 and TLS), and when it dies the node that takes the
shard derives the shard's recent entries again and delivers from then on."""

import os

import pytest

from conftest import new_id
from cluster_env import ClusterBed
from cluster_load import shard_of
from nats_env import NatsCluster
from push_env import ARN_APNS, Identity, PushBed, hex_token

SHARDS = 4
LEASE = 2


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cluster-push"))
    push = PushBed(os.path.join(root, "push"))
    with NatsCluster(os.path.join(root, "nats")) as nats:
        bed = ClusterBed(root, nats, shards=SHARDS, lease_seconds=LEASE, extra_args=push.server_args())
        bed.push = push
        try:
            for node in bed.nodes:
                push.configure(node)  # each node's own secret store holds the transports' keys
            bed.wait_owned()
            yield bed
        finally:
            bed.stop()


def test_the_owner_delivers_and_after_it_dies_its_successor_does(bed):
    apns = bed.push.apns
    admin = bed.nodes[0].client()
    ident = Identity(admin, new_id(), arns=(ARN_APNS,))
    phone, token = ident.device("APNS", hex_token().upper())
    ident.subscribe("notes", phone)
    bed.wait_converged()
    # A change written through a node that does not own the identity's shard: one notification
    # reaches the phone, with the new sync count.
    writer = ident.put("notes", {"a": "1"})
    got = apns.wait_for(lambda r: r.token == token.lower() and r.payload["data"]["syncCount"] == str(writer), timeout=30)
    assert got[0].payload["data"]["identityId"] == ident.identity
    # The owner of the identity's shard dies; the next change is delivered by the node that takes it.
    shard = shard_of(ident.pool, ident.identity, SHARDS)
    owner = bed.wait_owner(shard)
    victim = bed.index_of(owner)
    bed.kill(victim)
    survivor = next(n for i, n in enumerate(bed.nodes) if i != victim)
    ident.admin = survivor.client()
    count = ident.put("notes", {"a": "2"})
    got = apns.wait_for(lambda r: r.token == token.lower() and r.payload["data"]["syncCount"] == str(count), timeout=30)
    assert got, "the new owner delivered the change"
    bed.restart(victim)
    bed.wait_owned()
    bed.wait_converged()
