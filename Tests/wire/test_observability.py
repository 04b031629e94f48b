"""/health, /metrics, and the server's life: graceful shutdown on SIGTERM/SIGINT, data kept
across a restart."""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from conftest import (ADMIN_KEY, ADMIN_SECRET, BINARY, Dataset, api_path, dataset_path, expect_error, new_id,
                      start_server)

METRIC = re.compile(r'^syncledger_requests_total\{operation="([^"]+)",status="(\d+)"\} (\d+)$')


def request_counts(server):
    counts = {}
    for line in server.metrics().splitlines():
        m = METRIC.match(line)
        if m:
            counts[(m.group(1), int(m.group(2)))] = int(m.group(3))
    return counts


def test_health(server):
    response = server.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_metrics_count_every_operation(server, admin):
    pool, identity = new_id(), new_id()
    before = request_counts(server)
    d = Dataset(admin, pool, identity)
    ids = dict(IdentityPoolId=pool, IdentityId=identity)
    token = d.token("m")                                                              # ListRecords
    d.update("m", [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}], token=token)  # UpdateRecords
    admin.describe_dataset(**d.ids("m"))
    admin.list_datasets(**ids)
    admin.describe_identity_usage(**ids)
    admin.describe_identity_pool_usage(IdentityPoolId=pool)
    admin.list_identity_pool_usage(MaxResults=1)
    device = admin.register_device(**ids, Platform="GCM", Token="t")["DeviceId"]
    admin.subscribe_to_dataset(**d.ids("m"), DeviceId=device)
    admin.unsubscribe_from_dataset(**d.ids("m"), DeviceId=device)
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={"StreamName": "s", "StreamingStatus": "ENABLED"})
    admin.get_identity_pool_configuration(IdentityPoolId=pool)
    admin.set_cognito_events(IdentityPoolId=pool, Events={})
    admin.get_cognito_events(IdentityPoolId=pool)
    admin.bulk_publish(IdentityPoolId=pool)
    admin.get_bulk_publish_details(IdentityPoolId=pool)
    admin.delete_dataset(**d.ids("m"))
    expect_error(admin.describe_dataset, "ResourceNotFoundException", 404, **d.ids("m"))
    expect_error(admin.describe_dataset, "ResourceNotFoundException", 404, **d.ids("m"))
    assert server.raw("GET", api_path(pool, "nope")).status_code == 404
    after = request_counts(server)

    def delta(op, status):
        return after.get((op, status), 0) - before.get((op, status), 0)

    for op in ["UpdateRecords", "ListDatasets", "DescribeIdentityUsage", "DescribeIdentityPoolUsage",
               "ListIdentityPoolUsage", "RegisterDevice", "SubscribeToDataset", "UnsubscribeFromDataset",
               "SetIdentityPoolConfiguration", "GetIdentityPoolConfiguration", "SetCognitoEvents",
               "GetCognitoEvents", "BulkPublish", "GetBulkPublishDetails", "DeleteDataset", "ListRecords"]:
        assert delta(op, 200) == 1, (op, delta(op, 200))
    assert delta("DescribeDataset", 200) == 1
    assert delta("DescribeDataset", 404) == 2
    assert delta("Unknown", 404) == 1
    text = server.metrics()
    assert "# TYPE syncledger_requests_total counter" in text
    assert 'syncledger_request_duration_seconds_count{operation="UpdateRecords"}' in text


def test_restart_keeps_data_and_credentials(tmp_root):
    # Durable mode (no --fast), so this also covers the fsync path.
    first = start_server(tmp_root, "restart")
    admin = first.client()
    pool, identity = new_id(), new_id()
    d = Dataset(admin, pool, identity)
    d.put("keep", {"a": "1"})
    d.put("keep", {"a": "2", "b": "3"})
    cred = first.mint(pool, identity, session_token=True)
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={"StreamName": "kept"})
    assert first.stop(timeout=10) == 0

    second = start_server(tmp_root, "restart")
    try:
        admin = second.client()
        d = Dataset(admin, pool, identity)
        assert d.records("keep") == {"a": ("2", 2), "b": ("3", 2)}
        assert d.list("keep")["DatasetSyncCount"] == 2
        # Counts go on from where they were.
        assert d.put("keep", {"c": "4"})["Records"][0]["SyncCount"] == 3
        assert admin.get_identity_pool_configuration(IdentityPoolId=pool)["CognitoStreams"] == {"StreamName": "kept"}
        # The credential minted before the restart still works (with its token only).
        me = second.client_for(cred)
        assert me.describe_dataset(IdentityPoolId=pool, IdentityId=identity, DatasetName="keep")["Dataset"]["NumRecords"] == 3
        bare = second.client(cred["AccessKeyId"], cred["SecretAccessKey"])
        expect_error(bare.describe_dataset, "NotAuthorizedException", 403, IdentityPoolId=pool, IdentityId=identity, DatasetName="keep")
    finally:
        # SIGINT shuts down gracefully too.
        second.process.send_signal(signal.SIGINT)
        try:
            code = second.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            second.process.kill()
            code = None
        second.exit_code = code
    assert code == 0, f"exit {code} after SIGINT"


def test_admin_credential_comes_from_the_environment(server):
    # Another admin key pair is not accepted, and the configured one is.
    stranger = server.client("AKIDSOMEOTHERADMIN", "secret")
    expect_error(stranger.list_identity_pool_usage, "NotAuthorizedException", 403)
    assert server.client().list_identity_pool_usage(MaxResults=1)["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_bulk_publish_interrupted_by_a_restart_resumes_and_completes(tmp_root):
    first = start_server(tmp_root, "publish-restart", ["--fast", "--bulk-publish-min-seconds", "2"])
    out = subprocess.run([BINARY, "streams", "configure", "--data", first.data_dir, "--stream-name", "s",
                          "--directory", os.path.join(tmp_root, "publish-restart-sink")], capture_output=True)
    assert out.returncode == 0, out.stderr
    admin = first.client()
    pool = new_id()
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={"StreamName": "s", "StreamingStatus": "ENABLED"})
    admin.bulk_publish(IdentityPoolId=pool)
    started = admin.get_bulk_publish_details(IdentityPoolId=pool)
    assert started["BulkPublishStatus"] == "IN_PROGRESS"
    assert first.stop(timeout=10) == 0          # stopped while the publish runs

    second = start_server(tmp_root, "publish-restart", ["--fast", "--bulk-publish-min-seconds", "2"])
    try:
        admin = second.client()
        deadline = time.monotonic() + 10
        status = None
        while time.monotonic() < deadline:
            status = admin.get_bulk_publish_details(IdentityPoolId=pool)
            if status["BulkPublishStatus"] != "IN_PROGRESS":
                break
            time.sleep(0.1)
        # The restarted server carries on with the same run (same start time) and ends it, or
        # every later BulkPublish of this pool would be refused as a duplicate for ever.
        assert status["BulkPublishStatus"] == "SUCCEEDED", status
        assert status["BulkPublishStartTime"] == started["BulkPublishStartTime"]
    finally:
        assert second.stop(timeout=10) == 0


def test_sigterm_lets_in_flight_writes_finish(tmp_root):
    server = start_server(tmp_root, "inflight")          # durable: each write waits for fsync
    pool, identity = new_id(), new_id()
    d = Dataset(server.client(), pool, identity)
    tokens = {f"w{i}": d.token(f"w{i}") for i in range(6)}
    outcomes = {}
    started = threading.Barrier(len(tokens) + 1)

    def writer(name):
        client = server.client()
        started.wait(timeout=10)
        try:
            client.update_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=name,
                                  SyncSessionToken=tokens[name],
                                  RecordPatches=[{"Op": "replace", "Key": "big", "Value": "v" * 300_000, "SyncCount": 0}])
            outcomes[name] = "ok"
        except ClientError as e:
            outcomes[name] = e.response["Error"]["Code"]
        except (EndpointConnectionError, ConnectionClosedError, ConnectionError):
            # Not connected yet, or connected but its request not read yet when the server
            # stopped: either way unacknowledged.
            outcomes[name] = "connection"

    threads = [threading.Thread(target=writer, args=(n,)) for n in tokens]
    for t in threads:
        t.start()
    started.wait(timeout=10)
    time.sleep(0.01)
    assert server.stop(timeout=10) == 0
    for t in threads:
        t.join(timeout=30)
    assert set(outcomes) == set(tokens), outcomes
    assert set(outcomes.values()) <= {"ok", "TooManyRequestsException", "connection"}, outcomes

    again = start_server(tmp_root, "inflight")
    try:
        d = Dataset(again.client(), pool, identity)
        for name, outcome in outcomes.items():
            page = d.list(name)
            if outcome == "ok":
                # Acknowledged writes are durable.
                assert page["DatasetSyncCount"] == 1 and page["Records"][0]["Value"] == "v" * 300_000, name
            elif outcome == "TooManyRequestsException":
                assert page["DatasetSyncCount"] == 0, name
    finally:
        assert again.stop(timeout=10) == 0


def test_sigterm_finishes_a_request_it_is_receiving(tmp_root):
    """SIGTERM arrives while the server is reading a request's body: it answers that request
    (200, written), then exits 0."""
    server = start_server(tmp_root, "receiving")
    pool, identity = new_id(), new_id()
    d = Dataset(server.client(), pool, identity)
    path = dataset_path(pool, identity, "late")
    body = json.dumps({"SyncSessionToken": d.token("late"),
                       "RecordPatches": [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}]}).encode()
    signed = AWSRequest(method="POST", url=server.url + path, data=body)
    SigV4Auth(Credentials(ADMIN_KEY, ADMIN_SECRET), "cognito-sync", "us-east-1").add_auth(signed)
    head = (f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in signed.headers.items())
            + f"Host: {server.host}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + body[:10])
        time.sleep(0.3)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert server.process.poll() is None, "the server exited with a request half received"
        sock.sendall(body[10:])
        reply = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    assert b'"SyncCount":1' in reply
    assert server.stop(timeout=10) == 0
    again = start_server(tmp_root, "receiving")
    try:
        assert Dataset(again.client(), pool, identity).records("late") == {"k": ("v", 1)}
    finally:
        assert again.stop(timeout=10) == 0
