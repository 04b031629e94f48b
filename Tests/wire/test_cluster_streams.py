"""Cognito Streams and BulkPublish on cluster nodes: each shard's owner delivers its shard's
records to the sink (the same HMAC-signed loopback sink as the single-node tests), with cursors
counted in the shard's log and kept in the cluster's KV bucket; when the owner dies holding a
batch the sink never acknowledged, the node that takes the shard delivers that batch again and
carries on, so every acknowledged write reaches the sink, in order per dataset. BulkPublish runs
on the registry shard's owner over every shard."""

import json
import os
import subprocess

import pytest

from conftest import BINARY, new_id
from cluster_env import ClusterBed, retry_unwritten
from cluster_load import shard_of
from nats_env import NatsCluster
from test_streams import Sink, Workload, configure_http, enable, wait_until

SHARDS = 4
LEASE = 2


class CaughtUp:
    """A Cognito Sync client whose ListRecords first lets the node's replica reach what the
    workload wrote to the dataset (LastSyncCount), so a write goes out with current sync counts
    through any node (writes are forwarded to the shard's owner; replicas trail it)."""

    def __init__(self, client, workload):
        self.client, self.workload = client, workload

    def list_records(self, **ids):
        written = len(self.workload.expected.get((ids["IdentityId"], ids["DatasetName"]), []))
        if written:
            retry_unwritten(self.client.list_records, **ids, LastSyncCount=written)
        return retry_unwritten(self.client.list_records, **ids)

    def update_records(self, **kwargs):
        return retry_unwritten(self.client.update_records, **kwargs)

    def delete_dataset(self, **kwargs):
        return retry_unwritten(self.client.delete_dataset, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


def cluster_workload(node, pool, seed, identities=8):
    work = Workload(None, pool, seed=seed, identities=identities)
    work.admin = CaughtUp(node.client(), work)
    return work


def unique(records):
    """The records once each, by dataset and sync count (what a consumer dedupes on)."""
    seen, result = set(), []
    for r in records:
        key = (r["identityId"], r["dataSetName"], r["syncCount"])
        if key not in seen:
            seen.add(key)
            result.append(r)
    return result


def check(records, work):
    """Every entry of the workload arrived once deduplicated, in order per dataset, as written."""
    per = {}
    for r in unique(records):
        assert r["identityPoolId"] == work.pool and r["payloadType"] == "Inline"
        assert r["shard"] == shard_of(work.pool, r["identityId"], SHARDS), "a record names its identity's shard"
        per.setdefault((r["identityId"], r["dataSetName"]), []).append(r)
    assert set(per) == {k for k, v in work.expected.items() if v}, "datasets streamed differ from those written"
    for key, expected in work.expected.items():
        got = per.get(key, [])
        assert [r["syncCount"] for r in got] == list(range(1, len(expected) + 1)), f"{key}: sync counts out of order or missing"
        sequences = [r["shardSequence"] for r in got]
        assert sequences == sorted(sequences), f"{key}: left the shard's order"
        for r, (operation, changes) in zip(got, expected):
            assert r["operation"] == operation
            assert {x["key"]: (x["op"], x["value"]) for x in r["kinesisSyncRecords"]} == changes


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cluster-streams"))
    with NatsCluster(os.path.join(root, "nats")) as nats:
        bed = ClusterBed(root, nats, shards=SHARDS, lease_seconds=LEASE)
        bed.sink = Sink()
        bed.root = root
        try:
            bed.wait_owned()
            yield bed
        finally:
            bed.stop()
            bed.sink.stop()


def configure(bed, name):
    for node in bed.nodes:  # each node's own secret store holds the sink's secret
        configure_http(node, name, bed.sink, bed.root)


def cursors(bed):
    out = subprocess.run([BINARY, "cluster", "status", "--cluster", bed.nats.urls, "--json"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)["streamCursors"]


def test_owners_stream_their_shards_and_a_successor_resends_the_unacknowledged_batch(bed):
    sink = bed.sink
    pool, name = new_id(), "c-" + new_id().split(":")[1][:8]
    configure(bed, name)
    admin = bed.nodes[0].client()
    before = cluster_workload(bed.nodes[0], pool, seed=11, identities=3)
    before.run(4)  # before streaming is enabled: not streamed
    enable(admin, pool, name)
    work = cluster_workload(bed.nodes[1], pool, seed=12)
    work.run(30)
    wait_until(lambda: len(unique(sink.records(pool))) >= work.total(), what="every record of the first phase")
    assert {r["shard"] for r in sink.records(pool)} == {shard_of(pool, i, SHARDS) for i in work.identities}, "every shard streamed"

    # The sink holds the next batch unanswered; the node that sent it (its shard's owner) dies.
    with sink.lock:
        sink.hold_after = len(sink.batches)
    work.run(6, start=30)
    held = wait_until(lambda: sink.held, what="a batch to be held")
    shard = held[0]["shard"]
    # (Ownership may still be balancing: a shard handed back is briefly without an owner.)
    owner = bed.wait_owner(shard)
    victim = bed.index_of(owner)
    bed.kill(victim)
    sink.release.set()  # the held request answers 503 to a dead connection
    survivor = next(n for i, n in enumerate(bed.nodes) if i != victim)
    work.admin = CaughtUp(survivor.client(), work)
    work.run(20, start=36)
    wait_until(lambda: len(unique(sink.records(pool))) >= work.total(), timeout=60, what="every record after the failover")
    records = sink.records(pool)
    check(records, work)
    assert not {r["identityId"] for r in records} & set(before.identities)
    # The held batch came again from the shard's new owner, with the same shard sequences.
    again = [r for r in records if r["shard"] == shard and (r["identityId"], r["dataSetName"], r["syncCount"]) in
             {(h["identityId"], h["dataSetName"], h["syncCount"]) for h in held}]
    assert len(again) >= 2 * len(held), "the unacknowledged batch was delivered again"
    assert {r["shardSequence"] for r in again} == {h["shardSequence"] for h in held}
    # The cursors sit in the cluster's bucket: per shard, at the shard's last streamed message.
    mine = [c for c in cursors(bed) if c["pool"] == pool and c["streamName"] == name]
    assert {c["shard"] for c in mine} == set(range(SHARDS))
    streamed = {}
    for r in records:
        streamed[r["shard"]] = max(streamed.get(r["shard"], 0), r["shardSequence"])
    wait_until(lambda: all(c["cursor"] >= streamed.get(c["shard"], 0) for c in cursors(bed) if c["pool"] == pool),
               what="every cursor past what was streamed")
    bed.restart(victim)
    bed.wait_owned()


def test_bulk_publish_runs_on_the_registry_owner_over_every_shard(bed):
    sink = bed.sink
    pool, name = new_id(), "b-" + new_id().split(":")[1][:8]
    configure(bed, name)
    admin = bed.nodes[2].client()
    work = cluster_workload(bed.nodes[2], pool, seed=21)
    work.run(40)
    enable(admin, pool, name)
    admin.bulk_publish(IdentityPoolId=pool)  # a registry write: forwarded to shard 0's owner
    done = wait_until(lambda: (d := admin.get_bulk_publish_details(IdentityPoolId=pool))["BulkPublishStatus"] != "IN_PROGRESS" and d,
                      timeout=60, what="the bulk publish to end")
    assert done["BulkPublishStatus"] == "SUCCEEDED", done
    bulk = [r for r in sink.records(pool) if r.get("bulkPublish")]
    live = {}
    for (identity, dataset), entries in work.expected.items():
        if entries and entries[-1][0] != "remove":
            live[(identity, dataset)] = len(entries)
    got = {(r["identityId"], r["dataSetName"]): r for r in bulk}
    assert set(got) == set(live), "one bulk record per live dataset, of every shard"
    for (identity, dataset), count in live.items():
        record = got[(identity, dataset)]
        assert record["syncCount"] == count
        listed = work.admin.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)["Records"]
        assert {x["key"]: x["value"] for x in record["kinesisSyncRecords"]} == \
               {x["Key"]: x["Value"] for x in listed if x.get("Value") is not None}
