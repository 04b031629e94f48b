"""SyncTrigger as a webhook (issue 13, part 1): a real hook server on loopback that checks the
signature and changes, removes, adds, rejects, times out, throttles and answers garbage; each case
checked through boto3 with the records and the log afterwards. Developer (admin) writes do not
invoke it, as in Cognito."""

import hashlib
import hmac
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from botocore.exceptions import ClientError

from conftest import BINARY, Dataset, Server, dataset_path, new_id

SECRET = "hook-secret-0123456789abcdef"
ARN = "arn:aws:lambda:us-east-1:123456789012:function:validate"


class Hook:
    """A SyncTrigger hook: `mode` picks what it answers; every request's signature is checked."""

    def __init__(self):
        self.mode = "echo"
        self.events = []
        self.bad_signatures = 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                stamp = self.headers.get("x-syncledger-timestamp", "")
                expected = "sha256=" + hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(expected, self.headers.get("x-syncledger-signature", "")):
                    hook.bad_signatures += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                event = json.loads(body)
                hook.events.append(event)
                status, answer = hook.answer(event)
                if hook.mode == "slow":
                    time.sleep(6)          # the behaviour under test: a hook slower than 5 s
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                try:
                    self.wfile.write(answer)
                except BrokenPipeError:
                    pass                   # the server stopped waiting (the slow case)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, event):
        records = event["datasetRecords"]
        if self.mode == "change":          # upper-case every value being written
            for r in records.values():
                if r["op"] == "replace" and r["newValue"] is not None and r["newValue"] != r["oldValue"]:
                    r["newValue"] = r["newValue"].upper()
        elif self.mode == "remove":        # refuse to keep a key named "password"
            if "password" in records:
                records["password"] = {"oldValue": records["password"]["oldValue"], "newValue": None, "op": "remove"}
        elif self.mode == "add":
            records["checkedBy"] = {"newValue": "hook", "op": "replace"}
        elif self.mode == "omit":          # leave every record as it was
            event["datasetRecords"] = {}
        elif self.mode == "reject":
            return 500, b'{"errorMessage": "validation failed"}'
        elif self.mode == "throttle":
            return 429, b"{}"
        elif self.mode == "garbage":
            return 200, b"not json at all"
        elif self.mode == "readonly":
            event["identityId"] = "us-east-1:00000000-0000-0000-0000-000000000000"
        return 200, json.dumps(event).encode()


@pytest.fixture(scope="module")
def hook(server, tmp_path_factory):
    h = Hook()
    secret = tmp_path_factory.mktemp("hook") / "secret"
    secret.write_text(SECRET + "\n")
    out = subprocess.run([BINARY, "sync-trigger", "set", "--data", server.data_dir, "--arn", ARN, "--url", h.url,
                          "--secret-file", str(secret)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    yield h
    h.server.shutdown()


@pytest.fixture
def device(server, admin, hook):
    pool, identity = new_id(), new_id()
    admin.set_cognito_events(IdentityPoolId=pool, Events={"SyncTrigger": ARN})
    hook.mode = "echo"
    return Dataset(server.client_for(server.mint(pool, identity)), pool, identity), Dataset(admin, pool, identity)


def push(ds, name, values):
    """UpdateRecords with the records' current sync counts; returns the response."""
    current = ds.records(name)
    patches = [{"Op": "replace" if v is not None else "remove", "Key": k, **({"Value": v} if v is not None else {}),
                "SyncCount": current.get(k, (None, 0))[1]} for k, v in values.items()]
    return ds.update(name, patches)


def test_the_hook_sees_every_record_and_its_answer_is_written(device, hook):
    mine, _ = device
    push(mine, "profile", {"name": "ada", "password": "x"})
    assert hook.events[-1]["datasetRecords"]["name"] == {"oldValue": None, "newValue": "ada", "op": "replace"}
    assert {k: v for k, v in hook.events[-1].items() if k != "datasetRecords"} == {
        "version": 2, "eventType": "SyncTrigger", "region": "us-east-1", "identityPoolId": mine.pool,
        "identityId": mine.identity, "datasetName": "profile"}
    hook.mode = "change"
    out = push(mine, "profile", {"city": "london"})
    # Every record of the dataset is in the event; the unchanged ones as they are.
    assert hook.events[-1]["datasetRecords"]["name"] == {"oldValue": "ada", "newValue": "ada", "op": "replace"}
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in out["Records"]] == [("city", "LONDON", 2)]
    assert mine.records("profile") == {"name": ("ada", 1), "password": ("x", 1), "city": ("LONDON", 2)}
    hook.mode = "remove"
    out = push(mine, "profile", {"name": "ada lovelace"})
    assert sorted((r["Key"], r.get("Value"), r["SyncCount"]) for r in out["Records"]) == [("name", "ada lovelace", 3), ("password", None, 3)]
    assert mine.records("profile") == {"name": ("ada lovelace", 3), "city": ("LONDON", 2), "password": (None, 3)}
    hook.mode = "add"
    out = push(mine, "profile", {"city": "paris"})
    assert sorted((r["Key"], r["Value"], r["SyncCount"]) for r in out["Records"]) == [("checkedBy", "hook", 4), ("city", "paris", 4)]
    hook.mode = "omit"
    out = push(mine, "profile", {"city": "rome"})
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in out["Records"]] == [("city", "paris", 4)]
    assert mine.records("profile")["city"] == ("paris", 4)
    assert hook.bad_signatures == 0


@pytest.mark.parametrize("mode, code, status", [
    ("reject", "InvalidLambdaFunctionOutputException", 400),
    ("garbage", "InvalidLambdaFunctionOutputException", 400),
    ("readonly", "InvalidLambdaFunctionOutputException", 400),
    ("throttle", "LambdaThrottledException", 429),
    ("slow", "LambdaSocketTimeoutException", 504),
])
def test_a_failing_hook_writes_nothing(device, hook, mode, code, status):
    mine, _ = device
    push(mine, "orders", {"o1": "pending"})
    hook.mode = mode
    with pytest.raises(ClientError) as raised:
        push(mine, "orders", {"o1": "paid", "o2": "new"})
    error = raised.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (code, status), error["Error"]
    assert mine.records("orders") == {"o1": ("pending", 1)}


def test_developer_writes_do_not_invoke_it_and_the_log_records_what_it_did(server, device, hook):
    mine, as_admin = device
    seen = len(hook.events)
    hook.mode = "change"
    push(as_admin, "notes", {"n": "quiet"})
    assert len(hook.events) == seen and as_admin.records("notes") == {"n": ("quiet", 1)}
    push(mine, "notes", {"m": "loud"})
    assert len(hook.events) == seen + 1 and mine.records("notes")["m"] == ("LOUD", 2)
    # The invocation is a log entry of the identity's own _syncledger.sync-trigger stream (in
    # its shard on a cluster), beside the write.
    out = subprocess.run([BINARY, "log", "--data", server.data_dir, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    audits = [json.loads(line) for line in out.stdout.splitlines() if '"_syncledger.sync-trigger"' in line and mine.pool in line]
    assert all(mine.identity in json.dumps(a) for a in audits), audits
    assert audits, out.stdout[-2000:]
    record = json.loads(audits[-1]["events"][-1]["value"])
    assert record["hook"] == "arn:aws:lambda:us-east-1:123456789012:function:validate" and record["changed"] == "m" and record["offset"] == "2"


def test_a_trigger_without_a_hook_is_refused_not_skipped(server, admin):
    pool, identity = new_id(), new_id()
    admin.set_cognito_events(IdentityPoolId=pool, Events={"SyncTrigger": "arn:aws:lambda:us-east-1:1:function:missing"})
    ds = Dataset(server.client_for(server.mint(pool, identity)), pool, identity)
    with pytest.raises(ClientError) as raised:
        ds.update("d", [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])
    assert raised.value.response["Error"]["Code"] == "InvalidLambdaFunctionOutputException"
    assert "no hook endpoint" in raised.value.response["Error"]["Message"]
    assert ds.records("d") == {}


class HeldHook:
    """A SyncTrigger hook that holds every call until the test releases it, counting calls, and
    then echoes the event (the records as the device sent them)."""

    def __init__(self):
        self.calls = 0
        self.release = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                hook.calls += 1
                hook.release.wait(60)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/held"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def idempotency_waits(server):
    """`syncledger_idempotency_waits_total` from /metrics (0 when the server has no such line)."""
    for line in server.metrics().splitlines():
        if line.startswith("syncledger_idempotency_waits_total "):
            return int(line.split()[1])
    return 0


def test_a_retry_racing_its_original_calls_the_hook_once_and_gets_the_same_answer(tmp_path):
    """Issue 22, item 6c: two identical UpdateRecords with one Idempotency-Key, the second sent
    while the hook still holds the first: the hook is called once and both get the same 200.
    Deterministic: the hook is released only once the server counts the retry waiting for the
    original, and this server gives the hook 60 s (`--sync-trigger-timeout`), not 5 — so a slow
    machine cannot time the original out (504) and let the retry call the hook again."""
    server = Server(str(tmp_path / "held-hook"), ["--fast", "--sync-trigger-timeout", "60"])
    admin = server.client()
    held = HeldHook()
    arn = "arn:aws:lambda:us-east-1:123456789012:function:held"
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    out = subprocess.run([BINARY, "sync-trigger", "set", "--data", server.data_dir, "--arn", arn, "--url", held.url,
                          "--secret-file", str(secret)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    try:
        pool, identity = new_id(), new_id()
        admin.set_cognito_events(IdentityPoolId=pool, Events={"SyncTrigger": arn})
        cred = server.mint(pool, identity)
        mine = Dataset(server.client_for(cred), pool, identity)
        body = {"SyncSessionToken": mine.token("cart"), "DeviceId": "phone-1",
                "RecordPatches": [{"Op": "replace", "Key": "item", "Value": "book", "SyncCount": 0}]}
        answers = [None, None]

        def send(i):
            answers[i] = server.raw("POST", dataset_path(pool, identity, "cart"), body, key=cred["AccessKeyId"],
                                    secret=cred["SecretAccessKey"], headers={"Idempotency-Key": "cart-write-1"})

        waits = idempotency_waits(server)
        first = threading.Thread(target=send, args=(0,))
        first.start()
        deadline = time.monotonic() + 45   # well within the hook's 60 s
        while held.calls < 1:
            assert time.monotonic() < deadline, "the hook was never called"
            time.sleep(0.01)
        second = threading.Thread(target=send, args=(1,))
        second.start()
        # The retry is in: it either called the hook too (the bug) or waits for the original.
        while held.calls < 2 and idempotency_waits(server) == waits:
            assert time.monotonic() < deadline, "the retry neither called the hook nor waited"
            time.sleep(0.01)
        held.release.set()
        first.join(60)
        second.join(60)
        assert held.calls == 1
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        assert answers[0].json() == answers[1].json()
        assert [h.get("x-syncledger-replayed") for h in (answers[0].headers, answers[1].headers)] == [None, "true"]
        assert mine.records("cart") == {"item": ("book", 1)}
        assert idempotency_waits(server) == waits + 1
    finally:
        held.release.set()
        held.server.shutdown()
        server.stop(timeout=10)
