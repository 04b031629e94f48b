"""The change feed on cluster nodes: `GET /events` ids are the stream's positions in the shards'
logs (`c:<shard>=<sequence>,…`), the same on every node, so a client whose node dies resumes on
any other with `Last-Event-ID` and gets every change it missed, none twice; ids that this
cluster did not send are refused."""

import time

import pytest

from conftest import new_id
from cluster_env import retry_unwritten, running_bed
from cluster_load import shard_of
from event_clients import expect_refused, open_sse

SHARDS = 4


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-events", shards=SHARDS, lease_seconds=2) as bed:
        yield bed


def write(node, pool, identity, dataset, key):
    """A new key (sync count 0: no stale count can conflict), through `node`."""
    client = node.client()
    token = retry_unwritten(client.list_records, IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)["SyncSessionToken"]
    out = retry_unwritten(client.update_records, IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset, SyncSessionToken=token,
                                RecordPatches=[{"Op": "replace", "Key": key, "Value": "v", "SyncCount": 0}])
    return out["Records"][0]["SyncCount"]


def first_id(stream):
    block = stream.block()
    assert "id" in block and "data" not in block, block
    return block["id"]


def test_an_identitys_stream_resumes_on_any_node_after_its_node_dies(bed):
    pool, identity = new_id(), new_id()
    shard = shard_of(pool, identity, SHARDS)
    scope = {"identityPoolId": pool, "identityId": identity}
    watched = bed.nodes[1]
    stream = open_sse(watched, scope)
    assert stream.status == 200, stream.error
    opened = first_id(stream)
    assert opened.startswith(f"c:{shard}=") and "," not in opened, opened
    for i in range(3):
        write(bed.nodes[0], pool, identity, "d", f"k{i}")
    seen = stream.events(3, timeout=15)
    assert [e["syncCount"] for e in seen] == ["1", "2", "3"]
    ids = [e["_id"] for e in seen]
    assert all(i.startswith(f"c:{shard}=") for i in ids) and len(set(ids)) == 3
    # The node serving the stream dies; changes go on through the others.
    bed.kill(bed.index_of(watched))
    stream.close()
    survivors = [n for n in bed.nodes if n is not watched]
    for i in range(3, 6):
        write(survivors[0], pool, identity, "d", f"k{i}")
    # Resumed on each survivor from the last id seen: exactly what was missed.
    for node in survivors:
        again = open_sse(node, scope, headers={"Last-Event-ID": ids[-1]})
        assert again.status == 200, again.error
        assert first_id(again) == ids[-1]
        assert [e["syncCount"] for e in again.events(3, timeout=15)] == ["4", "5", "6"]
        again.close()
    # From an earlier id, on another node: from there on, none twice.
    earlier = open_sse(survivors[1], scope, headers={"Last-Event-ID": ids[0]})
    assert [e["syncCount"] for e in earlier.events(5, timeout=15)] == ["2", "3", "4", "5", "6"]
    write(survivors[1], pool, identity, "d", "k6")
    live = earlier.event(timeout=15)
    assert live["syncCount"] == "7"
    with pytest.raises(AssertionError):
        earlier.event(timeout=1)  # nothing more: no repeat
    earlier.close()
    bed.restart(bed.index_of(watched))
    bed.wait_owned()


def test_an_admin_stream_over_every_shard_resumes_on_another_node(bed):
    pool = new_id()
    identities = [new_id() for _ in range(8)]
    stream = open_sse(bed.nodes[0], {"identityPoolId": pool})
    assert stream.status == 200, stream.error
    opened = first_id(stream)
    assert sorted(int(e.split("=")[0]) for e in opened[2:].split(",")) == list(range(SHARDS)), opened
    for n, identity in enumerate(identities):
        write(bed.nodes[n % 3], pool, identity, "d", "k")
    seen = stream.events(8, timeout=15)
    assert sorted(e["identityId"] for e in seen) == sorted(identities)
    stream.close()
    # Resume after the third event on another node: the other five, each once.
    resumed = open_sse(bed.nodes[2], {"identityPoolId": pool}, headers={"Last-Event-ID": seen[2]["_id"]})
    assert resumed.status == 200, resumed.error
    first_id(resumed)
    rest = resumed.events(5, timeout=15)
    assert sorted(e["identityId"] for e in rest) == sorted(e["identityId"] for e in seen[3:])
    with pytest.raises(AssertionError):
        resumed.event(timeout=1)
    resumed.close()


def test_ids_this_cluster_did_not_send_are_refused(bed):
    pool, identity = new_id(), new_id()
    shard = shard_of(pool, identity, SHARDS)
    other = (shard + 1) % SHARDS
    scope = {"identityPoolId": pool, "identityId": identity}
    node = bed.nodes[0]
    for bad, says in [("42", "start with c:"), (f"c:{other}=1", f"shard {shard}"), (f"c:{shard}=1,{shard}=2", "twice"),
                      (f"c:{shard}=x", "whole number"), (f"c:{shard}=1.0", "entry count"), (f"c:{SHARDS}=1", "shard below"),
                      ("c:" + ",".join(f"{s}=1" for s in range(SHARDS)), f"shard {shard}"), ("c:" + "9" * 5000, "too long")]:
        refused = open_sse(node, scope, headers={"Last-Event-ID": bad})
        assert says in expect_refused(refused, "InvalidParameterException", 400), bad
    # A position past what any node applied: refused once this node waited for its replica (at most 3 s).
    began = time.monotonic()
    refused = open_sse(node, scope, headers={"Last-Event-ID": f"c:{shard}=99999999"})
    assert "has not reached" in expect_refused(refused, "InvalidParameterException", 400)
    assert time.monotonic() - began < 10
