"""Kill -9 rounds under load: no write the server acknowledged may be lost.

Each round starts `syncledger serve` (durable: no `--fast`) on the same data directory, runs
WRITERS threads that each do a device's Cognito sync loop with boto3 on an identity and dataset
of their own (ListRecords, then UpdateRecords of one to three records; now and then
DeleteDataset, RegisterDevice, SubscribeToDataset and UnsubscribeFromDataset), and sends the
server SIGKILL after a random delay while the writers are mid-request. A write counts as
acknowledged when its HTTP 200 answer arrived; one that met a connection error is "in flight at
the kill": it may or may not have committed, and either is correct.

While the server is down, `syncledger verify --data DIR` must print "ok:", and the change feed
(`syncledger log`) must hold every acknowledged device registration and (un)subscription. Then
the server is started again and, before any writer runs, each writer's dataset is listed and
compared with what its writer knows: every record as it was last acknowledged, or as the write
in flight at the kill left it (with a later sync count); nothing else. Sync counts may never go
backwards. After the last round the server is started once more for that check, stopped with
SIGTERM, and verified again.

Every wait is on a process, a thread or an event with a deadline; the delay before each kill is
drawn from `random.Random(seed)` (the writers' choices from `random.Random(f"{seed}:{round}:
{writer}")`), so a seed replays the same kill times and operation choices.

`--self-check` proves the checker can fail: `delete` removes one acknowledged record through the
API behind the checker's back (it must be reported lost, and nothing else); `rollback` puts back
a copy of the data directory taken one round earlier, as a disk that dropped acknowledged writes
would (the round's writes must be reported lost and their sync counts as gone backwards).

Used by `Tests/wire/test_crash_rounds.py` (3 short rounds) and `tools/crash-rounds`:

    python3 Tests/wire/crash_rounds.py --rounds 20 --writers 8   # $SYNCLEDGER_BIN, else .build/debug
    python3 Tests/wire/crash_rounds.py --rounds 2 --self-check rollback
"""

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from unittest import mock

import boto3
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402  (the wire tests' Server and admin credential)

KEYS = [f"k{i}" for i in range(6)]
PLATFORMS = ["GCM", "APNS", "ADM"]          # token i of a writer is registered on PLATFORMS[i]
TOKENS_PER_WRITER = 3
SYSTEM_IDENTITY = "_syncledger:0"
WRITER_JOIN_SECONDS = 90                    # a writer must notice the kill within this long
VERIFY_TIMEOUT = 300
IN_FLIGHT_WAIT = 5.0                        # seconds the kill waits for writes to be outstanding


class ServerGone(Exception):
    """A request met a connection error after the kill: its write is not acknowledged."""


class Flight:
    """How many writes have been sent and not answered, for the kill to wait on."""

    def __init__(self):
        self.changed = threading.Condition()
        self.outstanding = 0

    def add(self, n):
        with self.changed:
            self.outstanding += n
            self.changed.notify_all()


def _described(records):
    return dict(sorted(records.items()))


# --------------------------------------------------------------------------------------------
# One writer: a device's sync loop on its own identity and dataset, and what it knows

class Writer:
    def __init__(self, index, pool, seed):
        self.index = index
        self.pool = pool
        self.seed = seed
        self.identity = f"us-east-1:{uuid.uuid4()}"
        self.dataset = f"crash-w{index}"
        self.tokens = [f"crash-{self.identity.split(':')[1]}-t{j}" for j in range(TOKENS_PER_WRITER)]
        # What the writer knows the server holds, from acknowledged answers only.
        self.records = {}            # key -> (value or None for a removed record, sync count)
        self.written_by = {}         # key -> the acknowledged write that left the key as it is
        self.exists = False
        self.sync_count = 0          # the dataset's sync count (exact, or a floor after a delete)
        self.count_exact = True
        self.devices = {}            # token -> device id
        self.subscribed = set()      # device ids subscribed to the dataset
        self.pending = None          # the write that met the kill, if any
        self.resync = False          # an unexpected answer: list everything before writing again
        # Figures.
        self.acked = collections.Counter()
        self.in_flight = 0
        self.in_flight_committed = 0
        self.lost = []
        self.backwards = []
        self.anomalies = []
        self.seq = 0
        self.round = 0
        self.client = None
        self.stop, self.killing, self.flight = threading.Event(), threading.Event(), Flight()
        self.writing = self.sent = False     # a write is being sent / went to the wire

    def ids(self):
        return dict(IdentityPoolId=self.pool, IdentityId=self.identity, DatasetName=self.dataset)

    def who(self):
        return f"writer {self.index} ({self.identity}/{self.dataset})"

    # -- the loop ------------------------------------------------------------------------------

    def run_round(self, client, round_no, stop, killing, flight):
        self.client, self.round, self.stop, self.killing, self.flight = client, round_no, stop, killing, flight
        client.meta.events.register("before-send", self.on_send)
        rng = random.Random(f"{self.seed}:{round_no}:{self.index}")
        try:
            while not stop.is_set():
                if self.resync:
                    self.full_resync()
                    continue
                r = rng.random()
                if r < 0.05 and self.exists:
                    self.delete_dataset()
                elif r < 0.11:
                    self.register_device(rng)
                elif r < 0.16 and self.devices:
                    self.toggle_subscription(rng)
                else:
                    self.sync(rng)
        except ServerGone:
            return
        except Exception as e:  # noqa: BLE001 (a bug here must show, not hang the round)
            self.anomalies.append(f"round {round_no}: {self.who()}: {type(e).__name__}: {e}")

    def on_send(self, **_):
        """botocore's before-send event: the signed request is about to go on the wire."""
        if self.writing and not self.sent:
            self.sent = True
            self.flight.add(1)

    def call(self, operation, **kw):
        """One request. A connection error after the kill raises ServerGone; before it, it is an
        anomaly (and also ends this writer's round). ClientError propagates."""
        try:
            return getattr(self.client, operation)(**kw)
        except ClientError:
            raise
        except (BotoCoreError, OSError) as e:
            if not self.killing.is_set():
                self.anomalies.append(f"round {self.round}: {self.who()}: {operation} failed while the server "
                                      f"was up: {type(e).__name__}: {e}")
            raise ServerGone() from e

    def write(self, operation, pending, **kw):
        """A write: `pending` describes it while its answer is outstanding. Returns the answer,
        or None when the server refused it (an anomaly: this writer owns its dataset)."""
        if self.stop.is_set():
            raise ServerGone()       # the kill is under way: start no new write
        self.pending = pending
        self.writing = True
        try:
            out = self.call(operation, **kw)
        except ServerGone as gone:
            if isinstance(gone.__cause__, EndpointConnectionError):
                self.pending = None  # no connection, so the request was never sent
            else:
                self.in_flight += 1  # self.pending stays: the check after the restart resolves it
            raise
        except ClientError as e:
            self.pending = None
            self.refused(operation, e)
            return None
        finally:
            self.writing = False
            if self.sent:
                self.sent = False
                self.flight.add(-1)
        self.pending = None
        self.acked[operation] += 1
        return out

    def refused(self, operation, error):
        response = error.response
        self.anomalies.append(f"round {self.round}: {self.who()}: {operation} refused: "
                              f"{response['ResponseMetadata'].get('HTTPStatusCode')} "
                              f"{response['Error'].get('Code')}: {response['Error'].get('Message')}")
        self.resync = True

    def listing(self, after=0):
        """ListRecords after `after`, every page: (records, exists, sync count, session token)."""
        records, token, kw = {}, None, {}
        while True:
            try:
                page = self.call("list_records", **self.ids(), LastSyncCount=after, **kw)
            except ClientError as e:
                self.refused("ListRecords", e)
                return None
            for r in page["Records"]:
                records[r["Key"]] = (r.get("Value"), r["SyncCount"])
            token = token or page["SyncSessionToken"]
            if not page.get("NextToken"):
                return records, page["DatasetExists"], page["DatasetSyncCount"], token
            kw = {"NextToken": page["NextToken"]}

    def full_resync(self):
        got = self.listing(0)
        if got is None:
            raise ServerGone()   # refused twice in a row: give up this round (already an anomaly)
        self.records, self.exists, self.sync_count, _ = got
        self.count_exact = True
        self.written_by = {k: f"state adopted after an anomaly in round {self.round}" for k in self.records}
        self.resync = False

    def sync(self, rng):
        full = rng.random() < 0.1          # a device's first sync: everything, compared whole
        got = self.listing(0 if full else self.sync_count)
        if got is None:
            return
        records, exists, count, token = got
        if count < self.sync_count:
            self.backwards.append(f"round {self.round}: {self.who()}: ListRecords gave sync count {count} after "
                                  f"{self.sync_count} was acknowledged")
        if full:
            if records != self.records or exists != self.exists or (self.count_exact and count != self.sync_count):
                self.anomalies.append(f"round {self.round}: {self.who()}: ListRecords from 0 gave {_described(records)} "
                                      f"(exists {exists}, count {count}); acknowledged: {_described(self.records)} "
                                      f"(exists {self.exists}, count {self.sync_count})")
                self.records, self.exists = records, exists
        elif records or (self.count_exact and count != self.sync_count):
            self.anomalies.append(f"round {self.round}: {self.who()}: ListRecords after {self.sync_count} gave "
                                  f"{_described(records)} and count {count}, though nobody else writes here")
            self.resync = True
        self.sync_count, self.count_exact = max(count, self.sync_count), True
        if self.resync:
            return                         # write nothing on a state this writer got wrong

        keys = rng.sample(KEYS, rng.randint(1, 3))
        patches = []
        for key in keys:
            value, count_of_key = self.records.get(key, (None, 0))
            if value is not None and rng.random() < 0.2:
                patches.append({"Op": "remove", "Key": key, "SyncCount": count_of_key})
            else:
                self.seq += 1
                patches.append({"Op": "replace", "Key": key, "Value": f"w{self.index}r{self.round}n{self.seq}",
                                "SyncCount": count_of_key})
        floor = self.sync_count
        out = self.write("update_records", dict(kind="update", patches=patches, floor=floor),
                         **self.ids(), SyncSessionToken=token, RecordPatches=patches)
        if out is None:
            return
        answered = {r["Key"]: (r.get("Value"), r["SyncCount"]) for r in out["Records"]}
        for patch in patches:
            key = patch["Key"]
            got = answered.get(key)
            if got is None or got[0] != patch.get("Value") or got[1] <= floor:
                self.anomalies.append(f"round {self.round}: {self.who()}: UpdateRecords of {patch} answered {got}")
                self.resync = True
                continue
            self.records[key] = got
            self.written_by[key] = f"UpdateRecords {patch['Op']} {key}={patch.get('Value')!r} -> sync count {got[1]} (round {self.round})"
            self.sync_count = max(self.sync_count, got[1])
        self.exists = True

    def delete_dataset(self):
        floor = self.sync_count
        out = self.write("delete_dataset", dict(kind="delete", floor=floor), **self.ids())
        if out is None:
            return
        for key in self.records:
            self.written_by[key] = f"DeleteDataset after sync count {floor} (round {self.round})"
        self.records, self.exists = {}, False
        self.sync_count, self.count_exact = floor + 1, False   # the delete is an entry: a floor

    def register_device(self, rng):
        j = rng.randrange(TOKENS_PER_WRITER)
        token, platform = self.tokens[j], PLATFORMS[j]
        out = self.write("register_device", dict(kind="register", token=token),
                         IdentityPoolId=self.pool, IdentityId=self.identity, Platform=platform, Token=token)
        if out is None:
            return
        device = out["DeviceId"]
        known = self.devices.get(token)
        if known is not None and known != device:
            self.lost.append(f"round {self.round}: {self.who()}: RegisterDevice of acknowledged token {token} "
                             f"(device {known}) answered a new device {device}")
            self.subscribed.discard(known)
        self.devices[token] = device
        if device not in self.subscribed and rng.random() < 0.6:
            self.set_subscription(device, True)

    def toggle_subscription(self, rng):
        device = rng.choice(sorted(self.devices.values()))
        self.set_subscription(device, device not in self.subscribed)

    def set_subscription(self, device, on):
        operation = "subscribe_to_dataset" if on else "unsubscribe_from_dataset"
        out = self.write(operation, dict(kind="subscription", device=device, on=on), **self.ids(), DeviceId=device)
        if out is not None:
            (self.subscribed.add if on else self.subscribed.discard)(device)

    # -- the checks ----------------------------------------------------------------------------

    def check_records(self, got, round_no):
        """After a restart, before anyone writes: the dataset as listed from 0 (`got`) against
        what this writer knows, allowing the write in flight at the kill either way. Adopts the
        server's state afterwards."""
        records, exists, count, _ = got
        pending = self.pending if self.pending and self.pending["kind"] in ("update", "delete") else None
        where = f"after the kill of round {round_no}: {self.who()}"
        if count < self.sync_count:
            self.backwards.append(f"{where}: dataset sync count {count} < {self.sync_count} acknowledged")

        old_ok = (records == self.records and exists == self.exists
                  and (count == self.sync_count if self.count_exact else count >= self.sync_count))
        new_ok = False
        if pending and pending["kind"] == "update":
            patched = {p["Key"]: p.get("Value") for p in pending["patches"]}
            new_counts = {records.get(k, (None, -1))[1] for k in patched}
            new_ok = (exists and count > pending["floor"] and len(new_counts) == 1
                      and all(k in records and records[k][0] == v and records[k][1] > pending["floor"]
                              for k, v in patched.items())
                      and all(records.get(k) == self.records.get(k) for k in set(records) | set(self.records)
                              if k not in patched))
        elif pending and pending["kind"] == "delete":
            new_ok = records == {} and not exists and count > pending["floor"]

        if pending:
            if new_ok:
                self.in_flight_committed += 1
        if not (old_ok or new_ok):
            self._report_record_differences(records, exists, count, pending, where)

        self.records, self.exists, self.sync_count, self.count_exact = records, exists, count, True
        for key in records:
            self.written_by.setdefault(key, f"the write in flight at the kill of round {round_no}")
        if pending:
            self.pending = None

    def _report_record_differences(self, records, exists, count, pending, where):
        patched = {p["Key"]: p.get("Value") for p in pending["patches"]} if pending and pending["kind"] == "update" else {}
        found = 0
        for key in sorted(set(records) | set(self.records)):
            acked, now = self.records.get(key), records.get(key)
            if acked == now:
                continue
            if key in patched and now is not None and now[0] == patched[key] and now[1] > pending["floor"]:
                continue   # the write in flight committed (torn with other keys: reported below)
            if pending and pending["kind"] == "delete" and now is None and not exists:
                continue
            found += 1
            if acked is None and key not in self.written_by:
                self.anomalies.append(f"{where}: record {key} = {now} that this writer never wrote")
                continue
            self.lost.append(f"{where}: {key} acknowledged as {acked or 'absent'} by {self.written_by.get(key)}, found {now}")
            if now is not None and acked is not None and now[1] < acked[1]:
                self.backwards.append(f"{where}: {key} sync count {now[1]} < {acked[1]} acknowledged")
        if exists != self.exists and not found and not (pending and pending["kind"] == "delete"):
            found += 1
            self.lost.append(f"{where}: dataset exists={exists}, acknowledged exists={self.exists} "
                             f"(the last acknowledged write: {'DeleteDataset' if not self.exists else 'UpdateRecords'})")
        if not found:
            self.anomalies.append(f"{where}: listed {_described(records)} exists={exists} count={count}; acknowledged "
                                  f"{_described(self.records)} exists={self.exists} count={self.sync_count}"
                                  f"{'' if self.count_exact else ' (a floor)'}; in flight {pending}")

    def check_devices(self, feed_devices, feed_subscriptions, round_no):
        """While the server is down: the devices and subscriptions of the change feed against
        what this writer knows. Adopts the feed's state afterwards."""
        where = f"after the kill of round {round_no}: {self.who()}"
        mine = {token: device for (identity, _platform, token), device in feed_devices.items() if identity == self.identity}
        subscribed = {device for (identity, dataset, device) in feed_subscriptions
                      if identity == self.identity and dataset == self.dataset}
        pending = self.pending if self.pending and self.pending["kind"] in ("register", "subscription") else None
        committed = False
        for token, device in sorted(self.devices.items()):
            if mine.get(token) != device:
                self.lost.append(f"{where}: RegisterDevice of {token} acknowledged device {device}; the feed has {mine.get(token)}")
        for token in sorted(set(mine) - set(self.devices)):
            if pending and pending["kind"] == "register" and pending["token"] == token:
                committed = True
            else:
                self.anomalies.append(f"{where}: device {mine[token]} of token {token} that this writer never registered")
        if pending and pending["kind"] == "register" and pending["token"] in self.devices:
            committed = True     # registering a known token again changes nothing either way
        for device in sorted(set(self.devices.values()) | subscribed):
            expected, actual = device in self.subscribed, device in subscribed
            if expected == actual:
                continue
            if pending and pending["kind"] == "subscription" and pending["device"] == device and pending["on"] == actual:
                committed = True
                continue
            what = "SubscribeToDataset" if expected else "UnsubscribeFromDataset"
            self.lost.append(f"{where}: {what} of device {device} was acknowledged; the feed says subscribed={actual}")
        if pending and pending["kind"] == "subscription" and (pending["device"] in subscribed) == pending["on"]:
            committed = True
        if pending:
            self.in_flight_committed += committed
            self.pending = None
        self.devices, self.subscribed = mine, subscribed


# --------------------------------------------------------------------------------------------
# The server and the offline checks

def start_server(binary, data_dir, serve_args):
    # conftest.Server starts `conftest.BINARY` with the admin credential in
    # SYNCLEDGER_ACCESS_KEY_ID / SYNCLEDGER_SECRET_ACCESS_KEY.
    with mock.patch.object(conftest, "BINARY", binary):
        return conftest.Server(data_dir, list(serve_args))


def kill_server(server, killing):
    killing.set()
    server.process.send_signal(signal.SIGKILL)
    code = server.process.wait()          # waits for the process to be gone
    server._log.close()
    server.exit_code = code
    return code


def keep_log(server, name):
    target = os.path.join(os.path.dirname(server.log_path), name)
    with contextlib.suppress(OSError):
        os.replace(server.log_path, target)
    return target


def run_verify(binary, data_dir):
    out = subprocess.run([binary, "verify", "--data", data_dir], capture_output=True, text=True, timeout=VERIFY_TIMEOUT)
    text = (out.stdout + out.stderr).strip()
    return out.returncode == 0 and out.stdout.startswith("ok:"), out.returncode, text


def read_feed(binary, data_dir, pool):
    """The devices and subscriptions of `pool`, replayed from `syncledger log --system --json`
    (the whole change feed; the system streams are not readable through the Cognito API or
    `syncledger get`)."""
    out = subprocess.run([binary, "log", "--data", data_dir, "--system", "--json", "--limit", str(2**62)],
                         capture_output=True, text=True, timeout=VERIFY_TIMEOUT)
    if out.returncode != 0:
        raise AssertionError(f"syncledger log failed ({out.returncode}): {out.stderr[-2000:]}")
    records, subscriptions = {}, set()
    for line in out.stdout.splitlines():
        entry = json.loads(line)
        stream = entry["stream"]
        if stream["pool"] != pool or stream["identity"] != SYSTEM_IDENTITY or stream["dataset"] not in ("devices", "subscriptions"):
            continue
        for event in entry["events"]:
            op, key, value = event["op"], event.get("key", ""), event.get("value")
            if stream["dataset"] == "devices" and key.startswith("device/"):
                # The device record: its code, the identity logged in on it, platform, token.
                if op == "put":
                    records[key[len("device/"):]] = json.loads(value)
                else:
                    records.pop(key[len("device/"):], None)
            elif stream["dataset"] == "subscriptions":
                identity, dataset, device = key.split("/", 2)
                (subscriptions.add if op == "put" else subscriptions.discard)((identity, dataset, device))
    devices = {(d["identity"], d["platform"], d["token"]): code for code, d in records.items()
               if d.get("identity") and d.get("platform") and d.get("token")}
    return devices, subscriptions


# --------------------------------------------------------------------------------------------
# The rounds

def run(binary, rounds, writers, seconds_per_round, data_root, seed, *, self_check=None, serve_args=(),
        progress=None):
    """Runs `rounds` kill -9 rounds with `writers` writers on `data_root/data` and returns the
    summary: seed, rounds, acknowledged_writes (and acknowledged_by_operation), in_flight_at_kill
    (writes sent and unanswered when the server died; in_flight_committed of them were found
    applied), lost (acknowledged writes missing after a restart; must be 0) with lost_details,
    backwards (sync counts lower than acknowledged) with backwards_details, anomalies (anything
    else unexpected: refusals, connection errors while the server was up, records nobody wrote),
    verify (each `syncledger verify` run) and verify_ok, kill_delays, outstanding_at_kill,
    final_stop_exit, seconds. `self_check`: None, "delete" or "rollback" (module docstring)."""
    assert rounds >= 1 and writers >= 1
    assert self_check in (None, "delete", "rollback"), self_check
    assert self_check != "rollback" or rounds >= 2, "--self-check rollback needs 2 rounds or more"
    say = progress or (lambda text: None)
    started = time.monotonic()
    rng = random.Random(seed)
    os.makedirs(data_root, exist_ok=True)
    data_dir = os.path.join(data_root, "data")
    pool = f"us-east-1:{uuid.uuid4()}"
    team = [Writer(i, pool, seed) for i in range(writers)]
    session = boto3.session.Session()

    def client(server):
        return session.client(conftest.SERVICE, endpoint_url=server.url, region_name=conftest.REGION,
                              aws_access_key_id=conftest.ADMIN_KEY, aws_secret_access_key=conftest.ADMIN_SECRET,
                              config=conftest._NO_RETRY)

    summary = dict(seed=seed, rounds=0, writers=writers, seconds_per_round=seconds_per_round, binary=binary,
                   serve_args=list(serve_args), data_dir=data_dir, kill_delays=[], outstanding_at_kill=[],
                   verify=[], self_check=None)
    snapshot = os.path.join(data_root, "snapshot") if self_check == "rollback" else None
    sabotage = None

    def check_after_restart(server, round_no):
        """The API check of every writer's dataset, before any writer runs again."""
        nonlocal sabotage
        checker = client(server)
        if self_check == "delete" and sabotage is None:
            sabotage = sabotage_one_record(checker, team, random.Random(f"{seed}:sabotage"))
            summary["self_check"] = dict(mode="delete", target=sabotage)
        lost_before = sum(len(w.lost) for w in team)
        for w in team:
            w.client, w.round, w.stop, w.killing, w.flight = checker, round_no, threading.Event(), threading.Event(), Flight()
            try:
                got = w.listing(0)
            except ServerGone:
                got = None   # a connection error with the server up: already an anomaly
            if got is None:
                w.anomalies.append(f"after the kill of round {round_no}: {w.who()}: the check's ListRecords was refused")
                continue
            w.check_records(got, round_no)
        return sum(len(w.lost) for w in team) - lost_before

    server = None
    try:
        for round_no in range(1, rounds + 1):
            round_start = time.monotonic()
            server = start_server(binary, data_dir, serve_args)
            lost_at_restart = check_after_restart(server, round_no - 1) if round_no > 1 else 0
            stop, killing, flight = threading.Event(), threading.Event(), Flight()
            acked_before = sum(sum(w.acked.values()) for w in team)
            in_flight_before = sum(w.in_flight for w in team)
            threads = []
            for w in team:
                t = threading.Thread(target=w.run_round, args=(client(server), round_no, stop, killing, flight),
                                     name=f"writer-{w.index}", daemon=True)
                threads.append(t)
            for t in threads:
                t.start()
            delay = rng.uniform(0.25, 1.0) * seconds_per_round
            summary["kill_delays"].append(round(delay, 3))
            stop.wait(delay)     # the round's load: the writers run until the kill
            # Then kill while writes are outstanding: at least half the writers' (or, failing
            # that within IN_FLIGHT_WAIT seconds, one). The lock is held through the SIGKILL, so
            # no writer's bookkeeping moves in between; what reached the wire is what counts.
            with flight.changed:
                if not flight.changed.wait_for(lambda: flight.outstanding >= max(1, writers // 2), IN_FLIGHT_WAIT):
                    flight.changed.wait_for(lambda: flight.outstanding >= 1, IN_FLIGHT_WAIT)
                summary["outstanding_at_kill"].append(flight.outstanding)
                kill_code = kill_server(server, killing)
            stop.set()           # a write sent after the kill meets a refused connection: never sent
            deadline = time.monotonic() + WRITER_JOIN_SECONDS
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            stuck = [t.name for t in threads if t.is_alive()]
            if stuck:
                raise AssertionError(f"round {round_no}: writers {stuck} did not stop within {WRITER_JOIN_SECONDS} s of the kill")
            keep_log(server, f"server-round-{round_no}.log")
            server = None
            summary["rounds"] = round_no

            if snapshot and round_no == 2:
                # The disk "forgets" round 2: the copy taken after round 1 comes back.
                shutil.rmtree(data_dir)
                shutil.copytree(snapshot, data_dir)
                summary["self_check"] = dict(mode="rollback", restored="the data directory as it was after round 1's kill")
            ok, code, text = run_verify(binary, data_dir)
            summary["verify"].append(dict(after=f"round {round_no} (server killed)", ok=ok, exit=code, output=text[:2000]))
            devices, subscriptions = read_feed(binary, data_dir, pool)
            lost_before = sum(len(w.lost) for w in team)
            for w in team:
                w.check_devices(devices, subscriptions, round_no)
            lost_offline = sum(len(w.lost) for w in team) - lost_before
            if snapshot and round_no == 1:
                shutil.copytree(data_dir, snapshot)

            acked = sum(sum(w.acked.values()) for w in team) - acked_before
            in_flight = sum(w.in_flight for w in team) - in_flight_before
            say(f"round {round_no}/{rounds}: "
                + (f"restart check lost {lost_at_restart}; " if round_no > 1 else "")
                + f"{acked} writes acknowledged in {delay:.2f} s, SIGKILL (exit {kill_code}) with {summary['outstanding_at_kill'][-1]} write(s) outstanding, "
                f"{in_flight} of them in flight (sent, unanswered); "
                f"feed check lost {lost_offline}; verify {'ok' if ok else 'FAILED: ' + text[:300]} "
                f"({time.monotonic() - round_start:.1f} s)")

        # The last round's writes: one more restart and check, a graceful stop, verify.
        server = start_server(binary, data_dir, serve_args)
        lost_at_restart = check_after_restart(server, rounds)
        stop_code = server.stop(timeout=30)
        keep_log(server, "server-final.log")
        server = None
        summary["final_stop_exit"] = stop_code
        if stop_code != 0:
            team[0].anomalies.append(f"the final server did not exit 0 within 30 s of SIGTERM (exit {stop_code})")
        ok, code, text = run_verify(binary, data_dir)
        summary["verify"].append(dict(after="the final restart and SIGTERM", ok=ok, exit=code, output=text[:2000]))
        say(f"final restart: check lost {lost_at_restart}; SIGTERM exit {stop_code}; verify {'ok' if ok else 'FAILED: ' + text[:300]}")
    finally:
        if server is not None and server.process.poll() is None:
            server.process.kill()
            server.process.wait()

    acked_by_kind = collections.Counter()
    for w in team:
        acked_by_kind.update(w.acked)
    summary.update(
        acknowledged_writes=sum(acked_by_kind.values()),
        acknowledged_by_operation=dict(sorted(acked_by_kind.items())),
        in_flight_at_kill=sum(w.in_flight for w in team),
        in_flight_committed=sum(w.in_flight_committed for w in team),
        lost=sum(len(w.lost) for w in team),
        lost_details=[x for w in team for x in w.lost],
        backwards=sum(len(w.backwards) for w in team),
        backwards_details=[x for w in team for x in w.backwards],
        anomalies=[x for w in team for x in w.anomalies],
        verify_ok=bool(summary["verify"]) and all(v["ok"] for v in summary["verify"]),
        seconds=round(time.monotonic() - started, 1),
    )
    if self_check == "delete" and summary["self_check"]:
        target = summary["self_check"]["target"]
        summary["self_check"]["detected"] = (
            summary["lost"] == 1 and target is not None
            and f"writer {target['writer']} " in summary["lost_details"][0]
            and f": {target['key']} acknowledged" in summary["lost_details"][0])
    elif self_check == "rollback" and summary["self_check"]:
        summary["self_check"]["detected"] = summary["lost"] > 0 and summary["backwards"] > 0
    return summary


def sabotage_one_record(client, team, rng):
    """Removes one acknowledged record through the API, behind its writer's back: a record
    with a value that the write in flight at the kill did not touch."""
    choices = []
    for w in team:
        if w.pending and w.pending["kind"] == "delete":
            continue
        touched = {p["Key"] for p in w.pending["patches"]} if w.pending and w.pending["kind"] == "update" else set()
        choices += [(w, key) for key, (value, _) in sorted(w.records.items()) if value is not None and key not in touched]
    if not choices:
        return None
    w, key = rng.choice(choices)
    page = client.list_records(**w.ids())
    current = {r["Key"]: r["SyncCount"] for r in page["Records"]}
    client.update_records(**w.ids(), SyncSessionToken=page["SyncSessionToken"],
                          RecordPatches=[{"Op": "remove", "Key": key, "SyncCount": current[key]}])
    return dict(writer=w.index, key=key, acknowledged=list(w.records[key]))


def summary_line(s):
    return (f"{s['rounds']} kill -9 rounds, {s['acknowledged_writes']} acknowledged writes, "
            f"{s['in_flight_at_kill']} in flight at a kill, {s['lost']} lost, "
            f"verify {'ok' if s['verify_ok'] else 'FAILED'}")


# --------------------------------------------------------------------------------------------
# Command line (tools/crash-rounds)

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="longest time a round's load runs before the kill (each kill comes after 0.25-1x this)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--data-root", default=None, help="where the data directory and server logs go (default: a fresh temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (kept anyway when the run fails)")
    parser.add_argument("--self-check", nargs="?", const="delete", choices=["delete", "rollback"], default=None,
                        help="prove the checker fails: delete one acknowledged record behind its back (default), or "
                             "roll the data directory back one round; exits 0 only when the checker reports it")
    parser.add_argument("--fast", action="store_true", help="serve with --fast (no fsync): a process crash still loses nothing")
    parser.add_argument("--json", default=None, help="also write the summary to this file")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**9)
    root = args.data_root or tempfile.mkdtemp(prefix="syncledger-crash-rounds-")
    binary = conftest.BINARY
    print(f"crash-rounds: seed {seed}, {args.rounds} rounds, {args.writers} writers, binary {binary}, data {root}/data",
          flush=True)
    summary = run(binary, args.rounds, args.writers, args.seconds, root, seed, self_check=args.self_check,
                  serve_args=["--fast"] if args.fast else [], progress=lambda text: print(text, flush=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    by_op = ", ".join(f"{k} {v}" for k, v in summary["acknowledged_by_operation"].items())
    print(f"acknowledged: {by_op}; in flight at a kill: {summary['in_flight_at_kill']} "
          f"({summary['in_flight_committed']} of them found committed); sync counts gone backwards: "
          f"{summary['backwards']}; anomalies: {len(summary['anomalies'])}; {summary['seconds']} s")
    for title, items in (("LOST", summary["lost_details"]), ("BACKWARDS", summary["backwards_details"]),
                         ("ANOMALY", summary["anomalies"])):
        for item in items[:50]:
            print(f"{title}: {item}")
        if len(items) > 50:
            print(f"{title}: ... and {len(items) - 50} more")
    for v in summary["verify"]:
        if not v["ok"]:
            print(f"VERIFY FAILED after {v['after']} (exit {v['exit']}): {v['output'][:1000]}")
    if args.self_check:
        sc = summary["self_check"] or {}
        detected = sc.get("detected", False)
        print(f"self-check ({args.self_check}): {sc}")
        print(f"self-check {'passed: the checker reported the loss' if detected else 'FAILED: the checker did not report the loss'}")
        status = 0 if detected and summary["verify_ok"] else 1
    else:
        status = 0 if (summary["lost"] == 0 and summary["backwards"] == 0 and not summary["anomalies"]
                       and summary["verify_ok"]) else 1
    if status == 0 and not args.keep and not args.data_root:
        shutil.rmtree(root, ignore_errors=True)
    elif status != 0 or args.keep:
        print(f"kept the data directory and the server logs: {root}")
    print(f"seed {seed} ({summary['seconds']} s)")
    print(summary_line(summary))
    return status


if __name__ == "__main__":
    sys.exit(main())
