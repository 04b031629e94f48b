"""The README's example hook and example consumer (examples/) run as they are, against the real
server: the hook changes and removes records of a device's UpdateRecords and refuses an oversized
value; the consumer receives every sync and a bulk publish and ends with the same datasets as
ListRecords."""

import json
import os
import queue
import subprocess
import sys
import threading

import pytest

from conftest import BINARY, Dataset, Server, expect_error, new_id
from test_bulk_publish import wait_done
from test_streams import enable, syncledger, wait_until

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
ARN = "arn:aws:lambda:us-east-1:000000000000:function:validate"


class Example:
    """Runs an example script; collects its stdout lines; knows its port."""

    def __init__(self, script, *args):
        self.process = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, script), "--port", "0", *args],
                                        stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()
        first = self.lines.get(timeout=30)
        assert first.startswith("listening on "), first
        self.port = int(first.split()[-1])

    def read(self):
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret"
    path.write_text("example-secret-0123456789\n")
    return str(path)


def test_the_example_hook_changes_removes_and_refuses(tmp_root, secret):
    server = Server(os.path.join(tmp_root, "example-hook"), ["--fast"])
    hook = Example("sync-trigger-hook.py", "--secret-file", secret)
    try:
        syncledger(server.data_dir, "sync-trigger", "set", "--arn", ARN, "--url", f"http://127.0.0.1:{hook.port}/hook", "--secret-file", secret)
        admin, pool, identity = server.client(), new_id(), new_id()
        admin.set_cognito_events(IdentityPoolId=pool, Events={"SyncTrigger": ARN})
        device = Dataset(server.client_for(server.mint(pool, identity)), pool, identity)
        out = device.update("profile", [{"Op": "replace", "Key": "email", "Value": "Ada@Example.COM", "SyncCount": 0},
                                        {"Op": "replace", "Key": "password", "Value": "hunter2", "SyncCount": 0},
                                        {"Op": "replace", "Key": "name", "Value": "Ada", "SyncCount": 0}])
        # The removed password comes back as a removed record, so the device drops its copy.
        assert sorted((r["Key"], r.get("Value")) for r in out["Records"]) == [("email", "ada@example.com"), ("name", "Ada"), ("password", None)]
        assert device.records("profile") == {"email": ("ada@example.com", 1), "name": ("Ada", 1), "password": (None, 1)}
        expect_error(device.update, "InvalidLambdaFunctionOutputException", 400, "profile",
                     [{"Op": "replace", "Key": "bio", "Value": "x" * 10_001, "SyncCount": 0}])
        assert device.records("profile") == {"email": ("ada@example.com", 1), "name": ("Ada", 1), "password": (None, 1)}
    finally:
        hook.stop()
        server.stop()


def test_the_example_consumer_mirrors_every_dataset(tmp_root, secret, tmp_path):
    server = Server(os.path.join(tmp_root, "example-consumer"), ["--fast"])
    state_file = str(tmp_path / "state.json")
    consumer = Example("stream-consumer.py", "--secret-file", secret, "--state", state_file)
    try:
        admin, pool, name = server.client(), new_id(), "analytics"
        syncledger(server.data_dir, "streams", "configure", "--stream-name", name, "--http", f"http://127.0.0.1:{consumer.port}/",
                   "--secret-file", secret)
        identities = [new_id() for _ in range(3)]
        # Written before streaming is enabled: only the bulk publish brings these.
        for i, identity in enumerate(identities):
            Dataset(admin, pool, identity).update("before", [{"Op": "replace", "Key": "k", "Value": f"old{i}", "SyncCount": 0}])
        enable(admin, pool, name)
        for i, identity in enumerate(identities):
            ds = Dataset(admin, pool, identity)
            ds.update("live", [{"Op": "replace", "Key": "a", "Value": f"a{i}", "SyncCount": 0},
                               {"Op": "replace", "Key": "b", "Value": "x" * 10 + "é\"" * 300_000 if i == 0 else f"b{i}", "SyncCount": 0}])
            ds.update("live", [{"Op": "remove", "Key": "a", "SyncCount": 1}])
        admin.bulk_publish(IdentityPoolId=pool)
        assert wait_done(admin, pool, timeout=60)["BulkPublishStatus"] == "SUCCEEDED"

        def mirrored():
            if not os.path.exists(state_file):
                return None
            with open(state_file) as f:
                state = json.load(f)
            return state if len(state) == 6 else None

        state = wait_until(mirrored, timeout=60, what="the consumer to hold all six datasets")
        for identity in identities:
            for dataset in ("before", "live"):
                listed = admin.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)
                live = {r["Key"]: r["Value"] for r in listed["Records"] if r.get("Value") is not None}
                held = state[f"{pool}/{identity}/{dataset}"]
                assert held["records"] == live and held["syncCount"] == listed["DatasetSyncCount"], (identity, dataset)
    finally:
        consumer.stop()
        server.stop()
