"""Cognito Streams end to end: with a pool's CognitoStreams ENABLED the real server delivers every
sync (one log entry of a user's dataset) as Cognito's stream JSON, in order per dataset and at
least once, to a loopback HTTP sink that checks the HMAC signature, and to a directory of JSON
lines. DISABLED pauses without loss; a kill -9 mid-stream repeats only the unacknowledged batch."""

import base64
import hashlib
import hmac
import json
import os
import random
import subprocess
import threading
import time
from urllib.parse import urlparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import BINARY, Server, new_id

SECRET = "stream-sink-secret-0123456789"


def wait_until(predicate, timeout=30.0, what="condition"):
    """Polls `predicate` until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


class Sink:
    """A loopback HTTP sink: verifies X-SyncLedger-Signature, keeps every record received, can
    answer 503 a number of times, and can hold one batch unanswered (for the crash test)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches = []        # lists of records, in arrival order (acknowledged or not)
        self.bad_signatures = 0
        self.fail_next = 0
        self.failed = 0
        self.hold_after = None   # hold the batch that arrives after this many batches
        self.held = None         # the records of the held batch
        self.release = threading.Event()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(self.headers.get("X-SyncLedger-Signature", ""), expected):
                    with sink.lock:
                        sink.bad_signatures += 1
                    return self.answer(401)
                with sink.lock:
                    if sink.fail_next > 0:
                        sink.fail_next -= 1
                        sink.failed += 1
                        return self.answer(503)
                    records = json.loads(body)["Records"]
                    assert 1 <= len(records) <= 500 and len(body) <= (1 << 20) + 64
                    sink.batches.append(records)
                    hold = sink.hold_after is not None and sink.held is None and len(sink.batches) > sink.hold_after
                    if hold:
                        sink.held = records
                if hold:
                    sink.release.wait(60)
                    return self.answer(503)
                self.answer(200)

            def answer(self, status):
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/streams"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self, pool=None):
        with self.lock:
            return [r for b in self.batches for r in b if pool is None or r["identityPoolId"] == pool]

    def stop(self):
        self.release.set()
        self.server.shutdown()


def syncledger(data, *args):
    out = subprocess.run([BINARY, *args, "--data", data], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out.stdout.decode()


def configure_http(server, name, sink, tmp_root):
    secret_file = os.path.join(tmp_root, "stream-secret")
    with open(secret_file, "w") as f:
        f.write(SECRET)
    syncledger(server.data_dir, "streams", "configure", "--stream-name", name, "--http", sink.url, "--secret-file", secret_file)


def status(server):
    return json.loads(syncledger(server.data_dir, "streams", "status", "--json"))


def target(server, pool):
    return next(t for t in status(server)["targets"] if t["pool"] == pool)


def enable(admin, pool, name, on=True):
    admin.set_identity_pool_configuration(
        IdentityPoolId=pool, CognitoStreams={"StreamName": name, "StreamingStatus": "ENABLED" if on else "DISABLED"})


class Workload:
    """Random UpdateRecords and DeleteDataset over several identities and datasets of a pool,
    remembering what each entry should stream as."""

    def __init__(self, admin, pool, seed, identities=3, datasets=("a", "b", "c")):
        self.admin, self.pool = admin, pool
        self.rng = random.Random(seed)
        self.identities = [new_id() for _ in range(identities)]
        self.datasets = datasets
        self.expected = {}   # (identity, dataset) -> [(operation, {key: (op, value)})]
        self.live = {}       # (identity, dataset) -> {key: syncCount}

    def step(self, n):
        ident, name = self.rng.choice(self.identities), self.rng.choice(self.datasets)
        ids = dict(IdentityPoolId=self.pool, IdentityId=ident, DatasetName=name)
        live = self.live.setdefault((ident, name), {})
        entries = self.expected.setdefault((ident, name), [])
        if live and self.rng.random() < 0.15:
            self.admin.delete_dataset(**ids)
            live.clear()
            entries.append(("remove", {}))
            return
        listed = self.admin.list_records(**ids)
        counts = {r["Key"]: r["SyncCount"] for r in listed["Records"]}
        alive = {r["Key"] for r in listed["Records"] if r.get("Value") is not None}
        patches, changes = [], {}
        for key in self.rng.sample(["k1", "k2", "k3", "k4", "k5"], self.rng.randint(1, 3)):
            if key in alive and self.rng.random() < 0.3:
                patches.append({"Op": "remove", "Key": key, "SyncCount": counts[key]})
                changes[key] = ("remove", None)
            else:
                value = f"v{n}-{key}"
                patches.append({"Op": "replace", "Key": key, "Value": value, "SyncCount": counts.get(key, 0)})
                changes[key] = ("replace", value)
        self.admin.update_records(**ids, SyncSessionToken=listed["SyncSessionToken"], RecordPatches=patches)
        for key, (op, _) in changes.items():
            if op == "remove":
                live.pop(key, None)
            else:
                live[key] = 1
        entries.append(("replace", changes))

    def run(self, count, start=0):
        for n in range(start, start + count):
            self.step(n)

    def total(self):
        return sum(len(e) for e in self.expected.values())


def check(records, workload, feed_order=True):
    """Every entry of the workload arrived, in order per dataset (syncCount 1, 2, …), with the
    right contents; repeats (same sequence) are dropped first. Returns how many repeats."""
    seen, unique = set(), []
    for r in records:
        if r["sequence"] not in seen:
            seen.add(r["sequence"])
            unique.append(r)
    per = {}
    for r in unique:
        assert r["identityPoolId"] == workload.pool and r["payloadType"] == "Inline"
        per.setdefault((r["identityId"], r["dataSetName"]), []).append(r)
    assert set(per) == {k for k, v in workload.expected.items() if v}, "datasets streamed differ from those written"
    for key, expected in workload.expected.items():
        got = per.get(key, [])
        assert [r["syncCount"] for r in got] == list(range(1, len(expected) + 1)), f"{key}: sync counts out of order or missing"
        for r, (operation, changes) in zip(got, expected):
            assert r["operation"] == operation
            assert {x["key"]: (x["op"], x["value"]) for x in r["kinesisSyncRecords"]} == changes
            for x in r["kinesisSyncRecords"]:
                assert x["syncCount"] == r["syncCount"] and x["lastModifiedDate"] == r["lastModifiedDate"] > 1e12
    sequences = [r["sequence"] for r in unique]
    assert not feed_order or sequences == sorted(sequences), "records left the feed order"
    return len(records) - len(unique)


@pytest.fixture(scope="module")
def sink():
    s = Sink()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stream_server(tmp_root):
    s = Server(os.path.join(tmp_root, "streams-data"), ["--fast"])
    yield s
    s.stop()


def test_every_sync_arrives_in_order_per_dataset_signed(stream_server, sink, tmp_root):
    admin, pool, name = stream_server.client(), new_id(), "s-" + new_id().split(":")[1][:8]
    configure_http(stream_server, name, sink, tmp_root)
    before = Workload(admin, pool, seed=1)
    before.run(5)  # before streaming is enabled: not streamed (Cognito streams only new changes)
    enable(admin, pool, name)
    work = Workload(admin, pool, seed=2)
    with sink.lock:
        sink.fail_next = 2  # two 503s: the batch is sent again, nothing skipped
    work.run(80)
    wait_until(lambda: len({r["sequence"] for r in sink.records(pool)}) >= work.total(), what="every record")
    assert check(sink.records(pool), work) == 0
    assert sink.failed >= 2 and sink.bad_signatures == 0
    assert not {r["identityId"] for r in sink.records(pool)} & set(before.identities)
    t = wait_until(lambda: (t := target(stream_server, pool)) and t["lagEntries"] == 0 and t, what="no lag")
    assert t["streamingStatus"] == "ENABLED" and t["delivered"] == work.total() and t["failures"] >= 2
    metrics = stream_server.metrics()
    assert f'syncledger_stream_lag_entries{{stream="{name}",pool="{pool}"}} 0' in metrics
    assert f'syncledger_stream_delivered_records_total{{stream="{name}",pool="{pool}"}} {work.total()}' in metrics


def test_disabled_pauses_and_enabled_resumes_without_loss(stream_server, sink, tmp_root):
    admin, pool, name = stream_server.client(), new_id(), "p-" + new_id().split(":")[1][:8]
    marker_pool = new_id()
    configure_http(stream_server, name, sink, tmp_root)
    enable(admin, pool, name)
    enable(admin, marker_pool, name)
    work = Workload(admin, pool, seed=3)
    work.run(20)
    wait_until(lambda: len(sink.records(pool)) >= work.total(), what="the first stretch")
    enable(admin, pool, name, on=False)
    delivered = target(stream_server, pool)["delivered"]
    work.run(20, start=100)
    # Two markers of another pool on the same stream, each after the previous arrived: the pass
    # that delivers the second began after the paused writes, so it saw (and held) them.
    marker = Workload(admin, marker_pool, seed=4, identities=1)
    for i in range(2):
        marker.run(1, start=200 + i)
        wait_until(lambda: len(sink.records(marker_pool)) >= marker.total(), what="a marker")
    assert len({r["sequence"] for r in sink.records(pool)}) == 20, "records streamed while DISABLED"
    t = target(stream_server, pool)
    assert t["streamingStatus"] == "DISABLED" and t["delivered"] == delivered == 20 and t["lagEntries"] >= 20
    enable(admin, pool, name)
    wait_until(lambda: len({r["sequence"] for r in sink.records(pool)}) >= work.total(), what="the paused stretch")
    assert check(sink.records(pool), work) == 0


def test_directory_sink_gets_the_same_records(stream_server, sink, tmp_root):
    admin, name = stream_server.client(), "d-" + new_id().split(":")[1][:8]
    http_pool, dir_pool = new_id(), new_id()
    folder = os.path.join(tmp_root, "stream-files")
    syncledger(stream_server.data_dir, "streams", "configure", "--stream-name", name, "--directory", folder, "--max-file-bytes", "4096")
    configure_http(stream_server, name + "-h", sink, tmp_root)
    enable(admin, dir_pool, name)
    enable(admin, http_pool, name + "-h")
    to_dir, to_http = Workload(admin, dir_pool, seed=5), Workload(admin, http_pool, seed=5)
    to_http.identities = to_dir.identities
    for n in range(60):
        to_dir.step(n)
        to_http.step(n)

    def lines():
        if not os.path.isdir(folder):
            return []
        out = []
        for f in sorted(os.listdir(folder)):
            with open(os.path.join(folder, f)) as fh:
                out += [json.loads(x) for x in fh if x.strip()]
        return out

    wait_until(lambda: len(lines()) >= to_dir.total() and len(sink.records(http_pool)) >= to_http.total(), what="both sinks")
    assert check(lines(), to_dir) == 0
    assert len(os.listdir(folder)) > 1, "files were not rotated at --max-file-bytes"
    strip = lambda rs: [(r["identityId"], r["dataSetName"], r["syncCount"], r["operation"],
                         sorted((x["key"], x["op"], x["value"]) for x in r["kinesisSyncRecords"])) for r in rs]
    assert sorted(strip(lines())) == sorted(strip(sink.records(http_pool)))


def test_kill_9_mid_stream_repeats_only_the_unacknowledged_batch(tmp_root):
    sink = Sink()
    data = os.path.join(tmp_root, "streams-crash")
    server = Server(data, ["--fast"])
    try:
        admin, pool, name = server.client(), new_id(), "c-" + new_id().split(":")[1][:8]
        configure_http(server, name, sink, tmp_root)
        enable(admin, pool, name)
        work = Workload(admin, pool, seed=6)
        work.run(10)
        wait_until(lambda: len(sink.records(pool)) >= work.total(), what="the first stretch")
        with sink.lock:
            sink.hold_after = len(sink.batches)
        work.run(40, start=100)
        wait_until(lambda: sink.held is not None, what="a batch in flight")
        held = {r["sequence"] for r in sink.held}
        server.process.kill()  # kill -9 while the sink holds the batch unacknowledged
        server.process.wait()
        server._log.close()
        sink.release.set()
        server = Server(data, ["--fast"])
        admin = server.client()
        work.admin = admin
        work.run(10, start=300)
        wait_until(lambda: len({r["sequence"] for r in sink.records(pool)}) >= work.total(), what="every record after the restart")
        records = sink.records(pool)
        repeats = check(records, work)
        counts = {}
        for r in records:
            counts[r["sequence"]] = counts.get(r["sequence"], 0) + 1
        repeated = {s for s, c in counts.items() if c > 1}
        assert repeated <= held, "a repeat outside the unacknowledged batch"
        assert repeats == len(repeated) == len(held), f"{repeats} repeats; the held batch had {len(held)}"
        assert sink.bad_signatures == 0
    finally:
        server.stop()
        sink.stop()


KINESIS_KEY, KINESIS_SECRET = "AKIDKINESISSTANDIN01", "kinesis-stand-in-secret/0123456789"


def sigv4_valid(method, path, headers, body, secret, region, service):
    """Recomputes a SigV4 Authorization header from what arrived (header form, no query)."""
    lower = {k.lower(): " ".join(v.strip().split()) for k, v in headers.items()}
    auth = lower.get("authorization", "")
    try:
        scope = auth.split("Credential=")[1].split(",")[0].split("/", 1)[1]
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    except IndexError:
        return False
    day, scope_region, scope_service, _ = scope.split("/")
    if (scope_region, scope_service) != (region, service):
        return False
    canonical = "\n".join([method, path, "", *(f"{h}:{lower.get(h, '')}" for h in signed), "", ";".join(signed),
                           hashlib.sha256(body).hexdigest()])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", lower["x-amz-date"], scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.compare_digest(auth.split("Signature=")[1], hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest())


class KinesisStandIn:
    """PutRecords over awsJson1_1: checks the target, content type and SigV4, refuses a share
    of the records of the first calls (as a throttled shard does), keeps what it accepted."""

    def __init__(self, refuse_calls=3):
        self.lock = threading.Lock()
        self.accepted, self.bad, self.refused, self.calls = [], 0, 0, 0
        self.open = threading.Event()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = (self.headers.get("X-Amz-Target") == "Kinesis_20131202.PutRecords"
                      and self.headers.get("Content-Type") == "application/x-amz-json-1.1"
                      and sigv4_valid("POST", urlparse(self.path).path, dict(self.headers), body, KINESIS_SECRET, "us-east-1", "kinesis"))
                if not ok:
                    with stand_in.lock:
                        stand_in.bad += 1
                        stand_in.last_bad = dict(self.headers)
                    return self.reply(400, {"__type": "InvalidSignatureException"})
                if not stand_in.open.is_set():
                    return self.reply(500, {"__type": "InternalFailure"})  # until the workload is in: one big batch
                request = json.loads(body)
                results = []
                with stand_in.lock:
                    stand_in.calls += 1
                    throttle = stand_in.calls <= refuse_calls
                    for i, r in enumerate(request["Records"]):
                        if throttle and i % 2 == 0:
                            stand_in.refused += 1
                            results.append({"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"})
                            continue
                        record = json.loads(base64.b64decode(r["Data"]))
                        assert r["PartitionKey"] == f"{record['identityId']}/{record['dataSetName']}"
                        assert request["StreamName"]
                        stand_in.accepted.append(record)
                        results.append({"SequenceNumber": str(len(stand_in.accepted)), "ShardId": "shardId-000000000000"})
                self.reply(200, {"FailedRecordCount": sum("ErrorCode" in x for x in results), "Records": results})

            def reply(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self, pool):
        with self.lock:
            return [r for r in self.accepted if r["identityPoolId"] == pool]


def test_kinesis_put_records_signed_in_order_per_dataset_despite_partial_failures(stream_server, tmp_root):
    kinesis = KinesisStandIn()
    try:
        admin, pool, name = stream_server.client(), new_id(), "k-" + new_id().split(":")[1][:8]
        secret_file = os.path.join(tmp_root, "kinesis-secret")
        with open(secret_file, "w") as f:
            f.write(KINESIS_SECRET)
        syncledger(stream_server.data_dir, "streams", "configure", "--stream-name", name, "--kinesis", kinesis.url,
                   "--region", "us-east-1", "--access-key-id", KINESIS_KEY, "--secret-access-key-file", secret_file)
        enable(admin, pool, name)
        work = Workload(admin, pool, seed=7)
        work.run(60)
        kinesis.open.set()
        try:
            wait_until(lambda: len({r["sequence"] for r in kinesis.records(pool)}) >= work.total(), what="every record in Kinesis")
        except AssertionError as e:
            log = open(stream_server.log_path, errors="replace").read()[-1500:]
            raise AssertionError(f"{e}; calls {kinesis.calls}, bad {kinesis.bad} {getattr(kinesis, 'last_bad', None)}, refused {kinesis.refused}; log: {log}")
        check(kinesis.records(pool), work, feed_order=False)
        assert kinesis.bad == 0 and kinesis.refused > 0
        assert kinesis.calls > 3, "the batch was not split into rounds of one record per dataset"
        assert KINESIS_SECRET not in syncledger(stream_server.data_dir, "streams", "status", "--json")
    finally:
        kinesis.open.set()
        kinesis.server.shutdown()
