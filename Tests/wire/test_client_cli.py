"""`syncledger client` from a shell (issue 12): two devices (two stores) of one identity editing
offline and syncing through the real server, exit statuses (0 in sync, 2 on unresolved
conflicts), `--resolve`, `--json`, sign-in with Cognito Identity, the server down and back, and
kill -9 of a client in the middle of a sync: the store is consistent, the next sync finishes,
no edit is lost or applied twice."""

import json
import os
import random
import signal
import subprocess
import time

import boto3
import pytest

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, new_id

POOL = "us-east-1:00000000-0000-4000-8000-00000000c11e"


def client(server, store, *args, identity=None, cred=None, env_extra=None, endpoint=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if cred:
        env.update(AWS_ACCESS_KEY_ID=cred["AccessKeyId"], AWS_SECRET_ACCESS_KEY=cred["SecretAccessKey"])
        if cred.get("SessionToken"):
            env["AWS_SESSION_TOKEN"] = cred["SessionToken"]
    env.update(env_extra or {})
    depth = 2 if args[0] == "syncs" else 1
    sub, rest = list(args[:depth]), list(args[depth:])
    command = [BINARY, "client", *sub, "--store", store, "--endpoint", endpoint or server.url, "--pool", POOL]
    if identity:
        command += ["--identity", identity]
    out = subprocess.run(command + rest, capture_output=True, text=True, env=env, timeout=timeout)
    return out.returncode, out.stdout, out.stderr


def server_values(server, identity, dataset):
    sync = server.client()
    out = sync.list_records(IdentityPoolId=POOL, IdentityId=identity, DatasetName=dataset)
    return {r["Key"]: r["Value"] for r in out["Records"] if "Value" in r}, out["DatasetSyncCount"]


def test_two_devices_sync_from_the_shell(server, tmp_path):
    identity = new_id()
    cred = server.mint(POOL, identity)
    phone, tablet = str(tmp_path / "phone"), str(tmp_path / "tablet")
    assert client(server, phone, "put", "settings", "theme", "dark", identity=identity, cred=cred)[0] == 0
    assert client(server, tablet, "put", "settings", "font", "big", identity=identity, cred=cred)[0] == 0
    code, out, err = client(server, phone, "sync", "settings", "--json", identity=identity, cred=cred)
    assert code == 0, err
    report = json.loads(out)
    assert report["pushed"] == 1 and report["syncCount"] == 1
    code, out, err = client(server, tablet, "sync", "settings", identity=identity, cred=cred)
    assert code == 0 and "in sync at sync count 2" in out, err
    assert client(server, phone, "sync", "settings", identity=identity, cred=cred)[0] == 0
    code, out, _ = client(server, phone, "get", "settings", "font", identity=identity, cred=cred)
    assert (code, out.strip()) == (0, "big")
    assert server_values(server, identity, "settings")[0] == {"theme": "dark", "font": "big"}
    code, out, _ = client(server, phone, "status", "--json", identity=identity, cred=cred)
    status = json.loads(out)
    assert status["dataset"] == "settings" and status["unsynced"] == 0 and status["lastSync"] == "synced" and status["syncCount"] == 2
    code, _, err = client(server, phone, "get", "settings", "nothing", identity=identity, cred=cred)
    assert code == 1 and "no record nothing" in err


def test_conflicts_exit_2_until_resolved(server, tmp_path):
    identity = new_id()
    cred = server.mint(POOL, identity)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    client(server, a, "put", "prefs", "k", "from-a", identity=identity, cred=cred)
    client(server, b, "put", "prefs", "k", "from-b", identity=identity, cred=cred)
    assert client(server, a, "sync", "prefs", identity=identity, cred=cred)[0] == 0
    code, _, err = client(server, b, "sync", "prefs", identity=identity, cred=cred)
    assert code == 2 and "unresolved conflicts" in err and len(err.strip().splitlines()) == 1
    code, out, _ = client(server, b, "get", "prefs", "k", "--json", identity=identity, cred=cred)
    assert json.loads(out)["value"] == "from-b" and json.loads(out)["dirty"] is True
    code, out, err = client(server, b, "sync", "prefs", "--resolve", "local", "--json", identity=identity, cred=cred)
    assert code == 0 and json.loads(out)["conflicts"] == 1, err
    assert server_values(server, identity, "prefs")[0] == {"k": "from-b"}


def test_credentials_errors_and_a_server_that_is_down(server, tmp_path):
    identity = new_id()
    cred = server.mint(POOL, identity)
    store = str(tmp_path / "s")
    code, _, err = client(server, store, "sync", "prefs", identity=identity)
    assert code == 1 and "AWS_ACCESS_KEY_ID" in err
    code, _, err = client(server, store, "sync", "prefs", identity=identity, cred={"AccessKeyId": cred["AccessKeyId"], "SecretAccessKey": "wrong"})
    assert code == 1 and "not authorized" in err
    client(server, store, "put", "prefs", "k", "v", identity=identity, cred=cred)
    code, _, err = client(server, store, "sync", "prefs", identity=identity, cred=cred, endpoint="http://127.0.0.1:9")
    assert code == 1 and "cannot be reached" in err
    # The edit waits in the store, and goes up when the server is back.
    assert client(server, store, "sync", "prefs", identity=identity, cred=cred)[0] == 0
    assert server_values(server, identity, "prefs")[0] == {"k": "v"}


def test_sign_in_with_cognito_identity(server, tmp_path):
    identity_client = boto3.client("cognito-identity", endpoint_url=server.url, region_name=REGION,
                                   aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET)
    pool = identity_client.create_identity_pool(IdentityPoolName="Client", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    store = str(tmp_path / "signin")

    def run(*args):
        out = subprocess.run([BINARY, "client", args[0], "--store", store, "--endpoint", server.url, "--pool", pool,
                              "--identity-pool-signin", *args[1:]], capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
        return out.returncode, out.stdout, out.stderr

    assert run("put", "notes", "n1", "hello")[0] == 0
    code, out, err = run("sync", "notes", "--json")
    assert code == 0 and json.loads(out)["pushed"] == 1, err
    # The same identity next time (kept in the store): nothing new to push, the record is there.
    code, out, err = run("get", "notes", "n1")
    assert (code, out.strip()) == (0, "hello"), err
    ids = identity_client.list_identities(IdentityPoolId=pool, MaxResults=10)["Identities"]
    assert len(ids) == 1
    code, out, err = run("sync", "notes", "--json")
    assert code == 0 and json.loads(out)["pushed"] == 0, err
    assert len(identity_client.list_identities(IdentityPoolId=pool, MaxResults=10)["Identities"]) == 1


def test_kill_9_of_a_client_in_the_middle_of_a_sync(server, tmp_path):
    """Killed at a random moment of a sync that pushes 600 records, the client's next sync finishes:
    the server holds every edit, applied once (one entry: sync count 1), and the store agrees."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    outcomes = []
    for round_ in range(4):
        identity = new_id()
        cred = server.mint(POOL, identity)
        store = str(tmp_path / f"kill-{round_}")
        values = {f"k{i:03}": ("x" * 1400) + str(i) for i in range(600)}
        pairs = [item for kv in values.items() for item in kv]
        assert client(server, store, "put", "big", *pairs, identity=identity, cred=cred)[0] == 0
        outcomes.append(_kill_round(server, store, identity, cred, rng))
        synced, count = server_values(server, identity, "big")
        assert synced == values and count == 1, (seed, count)
        code, out, _ = client(server, store, "get", "big", "k599", identity=identity, cred=cred)
        assert out.strip() == values["k599"]
    print(f"client kill -9 rounds: {outcomes} (seed {seed})")


def _kill_round(server, store, identity, cred, rng):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=cred["AccessKeyId"], AWS_SECRET_ACCESS_KEY=cred["SecretAccessKey"])
    command = [BINARY, "client", "sync", "big", "--store", store, "--endpoint", server.url, "--pool", POOL, "--identity", identity]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        process.wait(timeout=rng.uniform(0.05, 0.6))
        outcome = f"finished in {(time.monotonic() - started) * 1000:.0f} ms"
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        outcome = f"killed at {(time.monotonic() - started) * 1000:.0f} ms"
    # The next sync finishes, whatever the kill interrupted.
    code, out, err = client(server, store, "sync", "big", "--json", identity=identity, cred=cred)
    assert code == 0, err
    code, out, err = client(server, store, "status", "--json", identity=identity, cred=cred)
    assert code == 0 and json.loads(out)["unsynced"] == 0, out + err
    return outcome


def test_named_syncs_from_a_json_file(server, tmp_path):
    identity = new_id()
    cred = server.mint(POOL, identity)
    writer, reader = str(tmp_path / "writer"), str(tmp_path / "reader")
    client(server, writer, "put", "catalog", "a", "1", "b", "2", identity=identity, cred=cred)
    assert client(server, writer, "sync", "catalog", identity=identity, cred=cred)[0] == 0
    config = tmp_path / "syncs.json"
    config.write_text(json.dumps({"syncs": [
        {"syncName": "catalogDown", "syncType": "syncDown", "datasets": ["catalog"], "options": {"mergeMode": "LEAVE_IF_CHANGED"}},
        {"syncName": "draftsUp", "syncType": "syncUp", "datasets": ["drafts"]}]}))
    code, out, err = client(server, reader, "syncs", "load", str(config), identity=identity, cred=cred)
    assert code == 0 and "catalogDown" in out, err
    code, out, _ = client(server, reader, "syncs", "status", "--json", identity=identity, cred=cred)
    assert {s["name"]: s["status"] for s in map(json.loads, out.splitlines())} == {"catalogDown": "NEW", "draftsUp": "NEW"}
    # A local change the down sync leaves alone (LEAVE_IF_CHANGED).
    client(server, reader, "put", "catalog", "b", "mine", identity=identity, cred=cred)
    code, out, err = client(server, reader, "syncs", "run", "catalogDown", "--json", identity=identity, cred=cred)
    state = json.loads(out)
    assert code == 0 and state["status"] == "DONE" and state["progress"] == 100 and state["skipped"] == 1, out + err
    assert client(server, reader, "get", "catalog", "a", identity=identity, cred=cred)[1].strip() == "1"
    assert client(server, reader, "get", "catalog", "b", identity=identity, cred=cred)[1].strip() == "mine"
    # resync is incremental: nothing new on the server, nothing fetched.
    client(server, writer, "put", "catalog", "c", "3", identity=identity, cred=cred)
    client(server, writer, "sync", "catalog", identity=identity, cred=cred)
    code, out, err = client(server, reader, "syncs", "resync", "catalogDown", "--json", identity=identity, cred=cred)
    assert code == 0 and json.loads(out)["pulled"] == 1, out + err
    client(server, reader, "put", "drafts", "d1", "text", identity=identity, cred=cred)
    code, out, err = client(server, reader, "syncs", "run", "draftsUp", "--json", identity=identity, cred=cred)
    assert code == 0 and json.loads(out)["pushed"] == 1, out + err
    assert server_values(server, identity, "drafts")[0] == {"d1": "text"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"syncs": [{"syncName": "x", "syncType": "sideways", "datasets": ["d"]}]}))
    code, _, err = client(server, reader, "syncs", "load", str(bad), identity=identity, cred=cred)
    assert code == 1 and "syncType" in err and len(err.strip().splitlines()) == 1
    code, _, err = client(server, reader, "syncs", "run", "nobody", identity=identity, cred=cred)
    assert code == 1 and "nobody" in err
