"""Cluster mode: three SyncLedger nodes over a real 3-node JetStream cluster (nats-server 2.15,
`sync_interval: always`), every shard's log an R3 file stream, every node's LMDB a replica.
"""


import pytest

from conftest import ADMIN_KEY, new_id
from cluster_env import retry_unwritten, running_bed


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster") as bed:
        yield bed


def put(client, pool, identity, dataset, values):
    page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)
    counts = {r["Key"]: r["SyncCount"] for r in page["Records"]}
    patches = [{"Op": "replace", "Key": k, "Value": v, "SyncCount": counts.get(k, 0)} for k, v in sorted(values.items())]
    return retry_unwritten(client.update_records, IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset,
                           SyncSessionToken=page["SyncSessionToken"], RecordPatches=patches)


def test_writes_through_any_node_reach_every_replica(bed):
    pool = new_id()
    identities = [new_id() for _ in range(12)]
    for i, identity in enumerate(identities):
        client = bed.nodes[i % 3].client()
        answer = put(client, pool, identity, "notes", {"a": f"v{i}", "b": "x"})
        assert sorted(r["Key"] for r in answer["Records"]) == ["a", "b"]
        assert all(r["SyncCount"] == 1 for r in answer["Records"])
    bed.wait_converged()
    # Every shard has one owner — waited for, not read once: balancing hands shards over while
    # the writes run, and a shard handed over is briefly owned by nobody (seen in CI as 7 of 8).
    bed.wait_owned()
    for node in bed.nodes:
        client = node.client()
        for i, identity in enumerate(identities):
            page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="notes")
            assert {r["Key"]: r["Value"] for r in page["Records"]} == {"a": f"v{i}", "b": "x"}
            assert page["DatasetSyncCount"] == 1


def test_a_reader_ahead_of_a_replica_is_answered_once_the_replica_caught_up(bed):
    pool = new_id()
    for round in range(10):
        identity = new_id()
        writer, reader = bed.nodes[round % 3].client(), bed.nodes[(round + 1) % 3].client()
        answer = put(writer, pool, identity, "fresh", {"k": f"v{round}"})
        count = answer["Records"][0]["SyncCount"]
        # Right away, on another node, asking for what came after the count it was told about:
        # nothing new, and the dataset's count is the one the write reached.
        page = reader.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="fresh", LastSyncCount=count)
        assert page["DatasetSyncCount"] == count, page
        assert page["Records"] == []


def test_cluster_status_is_admin_only_and_counts_every_write(bed):
    pool, identity = new_id(), new_id()
    put(bed.nodes[0].client(), pool, identity, "s", {"a": "1"})
    status = bed.wait_converged()
    assert {s["Node"] for s in status} == {"node0", "node1", "node2"}
    assert len({s["HeadsDigest"] for s in status}) == 1
    cred = bed.nodes[0].mint(pool, identity)
    r = bed.nodes[0].raw("GET", "/cluster/status", key=cred["AccessKeyId"], secret=cred["SecretAccessKey"])
    assert r.status_code == 403, r.text
    r = bed.nodes[0].raw("GET", "/cluster/status", sign=False)
    assert r.status_code == 403, r.text
    metrics = bed.nodes[1].metrics()
    assert 'syncledger_shard_owned{shard="0"}' in metrics
    assert 'syncledger_shard_lag_messages{shard="7"} 0' in metrics


def test_a_request_already_forwarded_is_not_forwarded_again(bed):
    pool = new_id()
    # An identity whose shard node1 does not own.
    for _ in range(200):
        identity = new_id()
        statuses = {s["Shard"]: s for s in bed.status(bed.nodes[1])["Shards"]}
        from cluster_load import shard_of
        if not statuses[shard_of(pool, identity, bed.shards)]["OwnedHere"]:
            break
    body = {"RecordPatches": [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}],
            "SyncSessionToken": bed.nodes[1].client().list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="f")["SyncSessionToken"]}
    path = f"/identitypools/{pool}/identities/{identity}/datasets/f"
    r = bed.nodes[1].raw("POST", path, body=body, headers={"x-syncledger-forwarded": "someone"})
    assert r.status_code == 503, r.text
    assert r.headers["x-amzn-ErrorType"] == "ServiceUnavailableException"
    assert "owned by node" in r.json()["message"]
    # Without the header, the same request is forwarded to the owner and applied there.
    r = bed.nodes[1].raw("POST", path, body=body)
    assert r.status_code == 200, r.text
    assert r.headers.get("x-syncledger-node") not in (None, "node1")


def test_cluster_status_command_shows_owners_replicas_and_lag(bed):
    import json as _json
    import subprocess
    from conftest import BINARY
    out = subprocess.run([BINARY, "cluster", "status", "--cluster", bed.nats.urls, "--json"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    report = _json.loads(out.stdout)
    assert report["shardCount"] == bed.shards
    assert set(report["nodes"]) == {"node0", "node1", "node2"}
    assert all(s.get("owner") in report["nodes"] for s in report["shards"])
    assert all(len(s["replicas"]) == 3 for s in report["shards"])
    assert all(set(s["lag"]) == {"node0", "node1", "node2"} for s in report["shards"])
    out = subprocess.run([BINARY, "cluster", "status", "--cluster", bed.nats.urls], capture_output=True, timeout=60)
    assert out.returncode == 0 and b"8 shards, 3 live node(s)" in out.stdout, out.stdout + out.stderr


def test_cognito_identity_devices_and_messages_work_across_nodes(bed):
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    from conftest import ADMIN_SECRET, REGION
    no_retry = Config(retries={"max_attempts": 1, "mode": "standard"})
    admin = boto3.client("cognito-identity", endpoint_url=bed.nodes[0].url, region_name=REGION,
                         aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET, config=no_retry)
    anonymous = [boto3.client("cognito-identity", endpoint_url=n.url, region_name=REGION,
                              config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1, "mode": "standard"})) for n in bed.nodes]
    pid = admin.create_identity_pool(IdentityPoolName="Cluster", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    identity = anonymous[1].get_id(IdentityPoolId=pid)["IdentityId"]
    credentials = anonymous[2].get_credentials_for_identity(IdentityId=identity)["Credentials"]
    # Temporary credentials one node issued sign requests every node accepts.
    for n in bed.nodes:
        sync = boto3.client("cognito-sync", endpoint_url=n.url, region_name=REGION, config=no_retry,
                            aws_access_key_id=credentials["AccessKeyId"], aws_secret_access_key=credentials["SecretKey"],
                            aws_session_token=credentials["SessionToken"])
        put(sync, pid, identity, "prefs", {n.data_dir[-5:]: "seen"})
    # A device made through one node, its token and messages through others.
    creds = (credentials["AccessKeyId"], credentials["SecretKey"], credentials["SessionToken"])
    r = bed.nodes[0].raw("POST", "/devices/sync", body={"Platform": "APNS", "OsVersion": "17", "AppVersion": "1", "Model": "x", "Locale": "en"},
                         key=creds[0], secret=creds[1], token=creds[2])
    assert r.status_code == 200, r.text
    code = r.json()["DeviceCode"]
    r = bed.nodes[1].raw("POST", "/devices/sync-token", body={"DeviceCode": code, "Token": "ab" * 32}, key=creds[0], secret=creds[1], token=creds[2])
    assert r.status_code == 200, r.text
    r = bed.nodes[2].raw("POST", "/messages", body={"DeviceCode": code, "MessageId": "m-1", "TimeToLive": 600, "Data": {"a": "b"}},
                         key=creds[0], secret=creds[1], token=creds[2])
    assert r.status_code == 200, r.text
    again = bed.nodes[0].raw("POST", "/messages", body={"DeviceCode": code, "MessageId": "m-1", "TimeToLive": 600, "Data": {"a": "b"}},
                             key=creds[0], secret=creds[1], token=creds[2])
    assert again.status_code == 200, again.text
    assert again.headers.get("x-syncledger-replayed") == "true"
    bed.wait_converged()


def test_bulk_publish_of_a_pool_without_a_stream_is_refused_by_any_node_as_on_one(bed):
    """BulkPublish runs on cluster nodes (test_cluster_streams.py); its rules are the ledger's,
    whichever node the request reaches: a pool with no stream is refused, nothing left IN_PROGRESS."""
    from botocore.exceptions import ClientError
    client = bed.nodes[2].client()
    pool = new_id()
    put(client, pool, new_id(), "x", {"a": "1"})
    try:
        client.bulk_publish(IdentityPoolId=pool)
        raise AssertionError("BulkPublish was accepted")
    except ClientError as e:
        assert e.response["Error"]["Code"] == "InvalidParameterException", e.response
        assert "no CognitoStreams stream configured" in e.response["Error"]["Message"]
    details = client.get_bulk_publish_details(IdentityPoolId=pool)
    assert details.get("BulkPublishStatus", "NOT_STARTED") == "NOT_STARTED", details


def test_a_sync_trigger_runs_on_the_owner_and_its_audit_is_in_the_identitys_shard(bed, tmp_path):
    """UpdateRecords in a pool with a SyncTrigger: the hook runs on the identity's shard owner,
    and its audit entry (the identity's `_syncledger.sync-trigger` stream, in the same shard) is
    part of the same message, so every replica holds the write and its audit."""
    import json
    import subprocess
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    from conftest import ADMIN_SECRET, BINARY, REGION
    from cluster_load import shard_of
    from test_sync_trigger import ARN, SECRET, Hook
    hook = Hook()
    hook.mode = "change"  # upper-cases every value written
    secret = tmp_path / "hook-secret"
    secret.write_text(SECRET + "\n")
    try:
        for n in bed.nodes:  # each node's own secret store holds the hook's secret
            out = subprocess.run([BINARY, "sync-trigger", "set", "--data", n.data_dir, "--arn", ARN, "--url", hook.url,
                                  "--secret-file", str(secret)], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
        no_retry = Config(retries={"max_attempts": 1, "mode": "standard"})
        admin = boto3.client("cognito-identity", endpoint_url=bed.nodes[0].url, region_name=REGION,
                             aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET, config=no_retry)
        anonymous = boto3.client("cognito-identity", endpoint_url=bed.nodes[1].url, region_name=REGION,
                                 config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1, "mode": "standard"}))
        pid = admin.create_identity_pool(IdentityPoolName="Triggered", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
        identity = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
        while shard_of(pid, identity, bed.shards) == 0:  # outside the registry shard, where the pool's settings are
            identity = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
        credentials = anonymous.get_credentials_for_identity(IdentityId=identity)["Credentials"]
        bed.nodes[2].client().set_cognito_events(IdentityPoolId=pid, Events={"SyncTrigger": ARN})
        for i, n in enumerate(bed.nodes):  # through every node: two of them forward to the owner
            sync = boto3.client("cognito-sync", endpoint_url=n.url, region_name=REGION, config=no_retry,
                                aws_access_key_id=credentials["AccessKeyId"], aws_secret_access_key=credentials["SecretKey"],
                                aws_session_token=credentials["SessionToken"])
            sync.list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName="notes", LastSyncCount=i)  # caught up
            out = put(sync, pid, identity, "notes", {f"k{i}": f"value {i}"})
            assert [(r["Key"], r["Value"]) for r in out["Records"]] == [(f"k{i}", f"VALUE {i}")], out["Records"]
        assert len(hook.events) == 3 and hook.bad_signatures == 0
        bed.wait_converged()
        for n in bed.nodes:
            page = n.client().list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName="notes")
            assert {r["Key"]: r["Value"] for r in page["Records"]} == {"k0": "VALUE 0", "k1": "VALUE 1", "k2": "VALUE 2"}
            out = subprocess.run([BINARY, "log", "--data", n.data_dir, "--json", "--limit", "100000000"], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            audits = [line for line in out.stdout.splitlines() if '"_syncledger.sync-trigger"' in line and identity in line]
            assert len(audits) == 3, (n.data_dir, audits)
            assert json.loads(json.loads(audits[-1])["events"][-1]["value"])["changed"] == "k2"
    finally:
        hook.server.shutdown()


def test_a_restarted_node_is_handed_its_share_back(bed):
    """Last in the module: it stops a node. With 8 shards, the two others hold 4 each while it
    is away; once it is back (share 3), each hands shards back and it takes at least 2."""
    victim = max(range(3), key=lambda i: bed.status(bed.nodes[i])["OwnedHere"])
    assert bed.nodes[victim].stop(timeout=15) == 0
    owned = bed.wait_balanced(timeout=120)
    assert sorted(owned) == [4, 4], owned
    bed.restart(victim)
    bed.wait_converged()
    owned = bed.wait_balanced(timeout=120)  # per node, in order: all three are live
    assert owned[victim] >= 2, owned
