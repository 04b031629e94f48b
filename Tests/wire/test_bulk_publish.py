"""BulkPublish end to end: the real server publishes every dataset's current state of a pool, once,
through the pool's stream sink (a directory of JSON lines, or a loopback HTTP sink checking the
HMAC signature), compared record by record with ListRecords through boto3; it fails with a message
when no sink is configured, when the sink keeps failing, or when streaming is disabled; one at a
time, one success per 24 h; and a kill -9 mid-publish resumes after the last acknowledged batch."""

import concurrent.futures
import json
import os
import random
import threading
import time

import pytest

from conftest import Server, expect_error, new_id
from test_streams import Sink, configure_http, enable, syncledger, wait_until


def details(admin, pool):
    return admin.get_bulk_publish_details(IdentityPoolId=pool)


def wait_done(admin, pool, timeout=120.0):
    """Waits until the pool's bulk publish is no longer IN_PROGRESS; returns its details."""
    return wait_until(lambda: (lambda d: d if d["BulkPublishStatus"] != "IN_PROGRESS" else None)(details(admin, pool)),
                      timeout=timeout, what="the bulk publish to end")


def seed(server, pool, identities, per_identity, rng_seed, workers=8):
    """Writes `identities` × `per_identity` datasets (1-4 records each) through boto3 in
    parallel; a few have records removed, some are emptied and some deleted afterwards.
    Returns {(identity, dataset): deleted?}."""
    rng = random.Random(rng_seed)
    plan = []
    for i in range(identities):
        identity = new_id()
        for d in range(per_identity):
            keys = [f"k{j}" for j in range(rng.randint(1, 4))]
            fate = rng.choices(["keep", "remove-one", "empty", "delete"], weights=[85, 7, 3, 5])[0]
            plan.append((identity, f"d{d}", {k: f"v-{i}-{d}-{k}-" + "x" * rng.randint(0, 40) for k in keys}, fate))
    local = threading.local()

    def write(item):
        identity, name, values, fate = item
        if not hasattr(local, "admin"):
            local.admin = server.client()
        admin = local.admin
        ids = dict(IdentityPoolId=pool, IdentityId=identity, DatasetName=name)
        token = admin.list_records(**ids)["SyncSessionToken"]
        admin.update_records(**ids, SyncSessionToken=token, RecordPatches=[
            {"Op": "replace", "Key": k, "Value": v, "SyncCount": 0} for k, v in values.items()])
        if fate in ("remove-one", "empty"):
            listed = admin.list_records(**ids)
            doomed = list(values)[:1] if fate == "remove-one" else list(values)
            admin.update_records(**ids, SyncSessionToken=listed["SyncSessionToken"], RecordPatches=[
                {"Op": "remove", "Key": k, "SyncCount": 1} for k in doomed])
        elif fate == "delete":
            admin.delete_dataset(**ids)
        return (identity, name), fate == "delete"

    with concurrent.futures.ThreadPoolExecutor(workers) as pool_:
        return dict(pool_.map(write, plan))


def directory_records(folder):
    records = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def compare_with_list_records(server, pool, datasets, bulk, workers=8):
    """Every live dataset has exactly the bulk record(s) given, equal record by record to what
    ListRecords answers; deleted ones have none."""
    per = {}
    for r in bulk:
        assert r["identityPoolId"] == pool and r["bulkPublish"] is True and r["operation"] == "replace"
        assert r["payloadType"] == "Inline" and r["kinesisSyncRecordsURL"] is None
        per.setdefault((r["identityId"], r["dataSetName"]), []).append(r)
    assert set(per) == {k for k, deleted in datasets.items() if not deleted}, "published datasets differ from the live ones"
    local = threading.local()

    def check(key):
        if not hasattr(local, "admin"):
            local.admin = server.client()
        listed = local.admin.list_records(IdentityPoolId=pool, IdentityId=key[0], DatasetName=key[1])
        live = {r["Key"]: r for r in listed["Records"] if r.get("Value") is not None}
        for record in per[key]:
            assert record["syncCount"] == listed["DatasetSyncCount"], key
            got = {x["key"]: x for x in record["kinesisSyncRecords"]}
            assert set(got) == set(live), key
            for k, x in got.items():
                assert x["op"] == "replace" and x["value"] == live[k]["Value"], (key, k)
                assert x["syncCount"] == live[k]["SyncCount"], (key, k)
                assert x["lastModifiedDate"] == int(live[k]["LastModifiedDate"].timestamp() * 1000), (key, k)
        return True

    with concurrent.futures.ThreadPoolExecutor(workers) as pool_:
        assert all(pool_.map(check, list(per)))


@pytest.fixture(scope="module")
def server(tmp_root):
    s = Server(os.path.join(tmp_root, "bulk-data"), ["--fast", "--bulk-publish-attempts", "2"])
    yield s
    s.stop()


def test_ten_thousand_datasets_published_once_equal_to_list_records(server, tmp_root):
    admin, pool, name = server.client(), new_id(), "bulk-dir"
    datasets = seed(server, pool, identities=500, per_identity=20, rng_seed=1)
    assert len(datasets) == 10_000
    # A second pool's datasets must not be published with this pool's.
    other = new_id()
    seed(server, other, identities=3, per_identity=2, rng_seed=2)
    folder = os.path.join(tmp_root, "bulk-folder")
    syncledger(server.data_dir, "streams", "configure", "--stream-name", name, "--directory", folder)
    enable(admin, pool, name)
    admin.bulk_publish(IdentityPoolId=pool)
    d = wait_done(admin, pool)
    assert d["BulkPublishStatus"] == "SUCCEEDED", d
    assert d["BulkPublishCompleteTime"] >= d["BulkPublishStartTime"] and "FailureMessage" not in d
    bulk = [r for r in directory_records(folder) if r.get("bulkPublish")]
    assert all(r["identityPoolId"] == pool for r in bulk)
    compare_with_list_records(server, pool, datasets, bulk)
    assert len(bulk) == sum(1 for deleted in datasets.values() if not deleted), "a dataset was published twice"
    # Once per 24 hours, and the state stays.
    expect_error(admin.bulk_publish, "AlreadyStreamedException", 400, IdentityPoolId=pool)
    assert details(admin, pool)["BulkPublishStatus"] == "SUCCEEDED"


def test_no_sink_configured_fails_with_a_message(server):
    admin, pool = server.client(), new_id()
    seed(server, pool, identities=2, per_identity=2, rng_seed=3)
    enable(admin, pool, "nowhere")
    admin.bulk_publish(IdentityPoolId=pool)
    d = wait_done(admin, pool, timeout=30)
    assert d["BulkPublishStatus"] == "FAILED"
    assert "no sink is configured for stream nowhere" in d["FailureMessage"]
    assert "BulkPublishCompleteTime" not in d   # Cognito reports it only for a success
    # A failed run does not count against the 24 hours: configure the sink and it succeeds.


def test_a_failing_sink_fails_it_then_a_retry_succeeds(server, tmp_root):
    sink = Sink()
    try:
        admin, pool, name = server.client(), new_id(), "bulk-flaky"
        datasets = seed(server, pool, identities=3, per_identity=3, rng_seed=4)
        configure_http(server, name, sink, tmp_root)
        with sink.lock:
            sink.fail_next = 2              # --bulk-publish-attempts 2: two 503s in a row end it
        enable(admin, pool, name)
        admin.bulk_publish(IdentityPoolId=pool)
        d = wait_done(admin, pool, timeout=30)
        assert d["BulkPublishStatus"] == "FAILED" and "HTTP 503" in d["FailureMessage"], d
        assert sink.failed == 2 and not [r for r in sink.records(pool) if r.get("bulkPublish")]
        # A FAILED run may be started again at once (only a success waits 24 h).
        admin.bulk_publish(IdentityPoolId=pool)
        d = wait_done(admin, pool, timeout=30)
        assert d["BulkPublishStatus"] == "SUCCEEDED", d
        compare_with_list_records(server, pool, datasets, [r for r in sink.records(pool) if r.get("bulkPublish")])
        assert sink.bad_signatures == 0
    finally:
        sink.stop()


def test_disabling_the_stream_fails_a_running_publish(tmp_root):
    sink = Sink()
    server = Server(os.path.join(tmp_root, "bulk-disable"), ["--fast"])
    try:
        admin, pool, name = server.client(), new_id(), "bulk-held"
        seed(server, pool, identities=2, per_identity=2, rng_seed=5)
        configure_http(server, name, sink, tmp_root)
        enable(admin, pool, name)
        with sink.lock:
            sink.hold_after = 0             # hold the first batch: the run stays IN_PROGRESS
        admin.bulk_publish(IdentityPoolId=pool)
        wait_until(lambda: sink.held is not None, what="the first batch in flight")
        assert details(admin, pool)["BulkPublishStatus"] == "IN_PROGRESS"
        expect_error(admin.bulk_publish, "DuplicateRequestException", 400, IdentityPoolId=pool)
        enable(admin, pool, name, on=False)
        sink.release.set()                  # the held batch is refused (503), then the run sees DISABLED
        d = wait_done(admin, pool, timeout=30)
        assert d["BulkPublishStatus"] == "FAILED" and "disabled" in d["FailureMessage"], d
    finally:
        server.stop()
        sink.stop()


def test_kill_9_mid_publish_resumes_after_the_last_acknowledged_batch(tmp_root):
    sink = Sink()
    data = os.path.join(tmp_root, "bulk-crash")
    server = Server(data, ["--fast"])
    try:
        admin, pool, name = server.client(), new_id(), "bulk-crash"
        datasets = seed(server, pool, identities=80, per_identity=20, rng_seed=6)   # 1,600: 4 batches of ≤ 500
        configure_http(server, name, sink, tmp_root)
        enable(admin, pool, name)
        with sink.lock:
            sink.hold_after = 1             # acknowledge one batch, hold the second
        admin.bulk_publish(IdentityPoolId=pool)
        wait_until(lambda: sink.held is not None, what="the second batch in flight")
        acknowledged = {(r["identityId"], r["dataSetName"]) for r in sink.batches[0]}
        held = {(r["identityId"], r["dataSetName"]) for r in sink.held}
        server.process.kill()               # kill -9 while the sink holds the batch
        server.process.wait()
        server._log.close()
        sink.release.set()
        # The progress kept on disk: the acknowledged batch, not the held one.
        row = next(t for t in json.loads(syncledger(data, "streams", "status", "--json"))["targets"] if t["pool"] == pool)
        assert row["bulkPublish"]["published"] == len(acknowledged)
        server = Server(data, ["--fast"])
        admin = server.client()
        assert details(admin, pool)["BulkPublishStatus"] == "IN_PROGRESS"   # the real state, across the restart
        d = wait_done(admin, pool, timeout=60)
        assert d["BulkPublishStatus"] == "SUCCEEDED", d
        bulk = [r for r in sink.records(pool) if r.get("bulkPublish")]
        compare_with_list_records(server, pool, datasets, bulk)
        counts = {}
        for r in bulk:
            key = (r["identityId"], r["dataSetName"])
            counts[key] = counts.get(key, 0) + 1
        repeated = {k for k, c in counts.items() if c > 1}
        # The acknowledged batch is not sent again; only the unacknowledged one may be.
        assert not repeated & acknowledged
        assert repeated == held, f"{len(repeated)} datasets repeated; the held batch had {len(held)}"
        assert sink.bad_signatures == 0
    finally:
        server.stop()
        sink.stop()
