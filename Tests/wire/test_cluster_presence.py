"""Presence: a killed node is noticed by its silent presence subject (NATS answers "no responders"
once its connection is gone), and its shards move long before its leases could run out; a
stopped (SIGSTOP) node still holds its connection, so it is left to its leases.

Leases here last 9 s: a lease renewed every 3 s runs out 6-9 s after its owner died, so a
takeover within 5 s of the kill can only come from presence."""

import time

import pytest

from cluster_env import running_bed
from cluster_load import WriteLoad, check_acknowledged, shard_of

SHARDS = 4
LEASE = 9


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-presence", shards=SHARDS, lease_seconds=LEASE) as bed:
        yield bed


def busiest(load):
    shards = [shard_of(load.pool, i, SHARDS) for i in load.identities]
    shard = max(set(shards), key=shards.count)
    return shard, [i for i in load.identities if shard_of(load.pool, i, SHARDS) == shard]


def test_a_killed_owners_shards_move_before_its_leases_run_out(bed):
    with WriteLoad(bed, writers=8) as load:
        load.wait_for(40)
        shard, identities = busiest(load)
        owner = bed.wait_owner(shard)
        killed_at = time.monotonic()
        bed.kill(bed.index_of(owner))
        load.wait_for(10, identities=identities)
        failover = load.first_ack_after(killed_at, identities) - killed_at
        print(f"failover: first acknowledged write on shard {shard} {failover:.2f} s after its owner was killed (leases of {LEASE} s)")
        assert failover < 5, "the shard waited for its lease to run out: presence did not notice the dead node"
        new_owner = bed.wait_owner(shard)
        assert new_owner is not owner
        load.wait_for(20)
    bed.restart(bed.nodes.index(owner))
    bed.wait_owned()
    bed.wait_converged()
    for node in bed.nodes:
        assert check_acknowledged(load, node.data_dir) == load.count()


def test_a_stopped_node_keeps_its_shards_until_its_leases_run_out(bed):
    bed.wait_balanced(timeout=120)
    shard = 1
    owner = bed.wait_owner(shard)
    index = bed.index_of(owner)
    stopped_at = time.monotonic()
    bed.pause(index)
    try:
        # Its connection stays open: probes go unanswered (a time-out, not "no responders"),
        # which says nothing, so nobody takes the shard while the lease may still be valid.
        while True:
            now = bed.owner_of(shard)
            if now is not None and now is not owner:
                break
            assert time.monotonic() - stopped_at < 60, "the stopped node's shard never moved"
            time.sleep(0.1)
        moved = time.monotonic() - stopped_at
        print(f"a stopped node's shard moved after {moved:.2f} s (leases of {LEASE} s)")
        assert moved >= LEASE * 2 / 3 - 0.5, "a stopped node was judged gone while its lease could still be valid"
    finally:
        bed.resume(index)
    bed.wait_owned()
    bed.wait_converged()
