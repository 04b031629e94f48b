"""Helpers for the device registry and device-message wire tests (test_devices.py,
test_messages.py): signed calls to `/devices…` and `/messages…` as one credential, message
consumers that start where a test starts, and what the log holds (read with the real CLI,
`syncledger log --json`, beside the running server)."""

import json
import os
import subprocess
import uuid
from unittest import mock

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, Server, expect_raw_error

MESSAGES_DATASET = "_syncledger.messages"


def device_info(platform="APNS", **fields):
    """What an app sends on launch; `fields` override or add (`Settings`, `DeviceCode`)."""
    info = {"Platform": platform, "OsVersion": "17.4.1", "AppVersion": "3.2.0", "Model": "iPhone15,2", "Locale": "de_CH"}
    info.update(fields)
    return {k: v for k, v in info.items() if v is not None}


def hex_apns_token():
    """An APNs device token as iOS hands it to the app: 64 hex digits, upper case."""
    return (uuid.uuid4().hex + uuid.uuid4().hex).upper()


class Caller:
    """Signed requests to the device and message endpoints with one credential (an identity's,
    or the admin's)."""

    def __init__(self, server, key, secret, token=None, pool=None, identity=None):
        self.server, self.key, self.secret, self.token = server, key, secret, token
        self.pool, self.identity = pool, identity

    def on(self, server):
        """The same credential against another server (e.g. the same data directory restarted)."""
        return Caller(server, self.key, self.secret, self.token, self.pool, self.identity)

    def boto(self):
        """A boto3 cognito-sync client with the same credential."""
        return self.server.client(self.key, self.secret, self.token)

    @classmethod
    def admin(cls, server):
        return cls(server, ADMIN_KEY, ADMIN_SECRET)

    @classmethod
    def of(cls, server, pool, identity, cred=None):
        """An identity's caller, with a credential minted by `syncledger credentials create`
        (or the one given)."""
        cred = cred or server.mint(pool, identity)
        return cls(server, cred["AccessKeyId"], cred["SecretAccessKey"], cred.get("SessionToken"), pool, identity)

    def call(self, method, path, body=b"", query="", headers=None):
        return self.server.raw(method, path, body, query=query, key=self.key, secret=self.secret, token=self.token,
                               headers=headers)

    def ok(self, method, path, body=b"", query=""):
        r = self.call(method, path, body, query)
        assert r.status_code == 200, (method, path, r.status_code, r.headers.get("x-amzn-ErrorType"), r.text[:500])
        return r.json()

    def refused(self, method, path, body, code, status, query=""):
        """Asserts the request is refused with `code`/`status`; returns the message."""
        return expect_raw_error(self.call(method, path, body, query), code, status)

    # -- devices --------------------------------------------------------------------------

    def sync(self, **fields):
        """`POST /devices/sync`; returns the device code."""
        return self.ok("POST", "/devices/sync", fields)["DeviceCode"]

    def new_device(self, platform="APNS", **fields):
        return self.sync(**device_info(platform, **fields))

    def sync_token(self, code, token, **extra):
        out = self.ok("POST", "/devices/sync-token", {"DeviceCode": code, "Token": token, **extra})
        assert out == {"DeviceCode": code}, out
        return out

    def login(self, code, subscribe_all=None):
        body = {"DeviceCode": code}
        if subscribe_all is not None:
            body["SubscribeAll"] = subscribe_all
        return self.ok("POST", "/devices/login", body)["Device"]

    def logout(self, code, **extra):
        return self.ok("POST", "/devices/logout", {"DeviceCode": code, **extra})["Device"]

    def describe(self, code, query=""):
        return self.ok("GET", "/devices/" + code, query=query)["Device"]

    def devices(self, query=""):
        """`GET /devices`: the devices logged in as the caller's identity (the admin names one
        in `query`), as {code: device}."""
        listing = self.ok("GET", "/devices", query=query)
        return {d["DeviceCode"]: d for d in listing["Devices"]}

    # -- messages -------------------------------------------------------------------------

    def post(self, code, message_id, data, ttl=3600, sent_at=None):
        """`POST /messages`; returns the raw response."""
        body = {"DeviceCode": code, "MessageId": message_id, "TimeToLive": ttl, "Data": data}
        if sent_at is not None:
            body["SentAt"] = sent_at
        return self.call("POST", "/messages", body)

    def send(self, code, message_id, data, ttl=3600, sent_at=None):
        """Posts a message that must be taken for the first time; returns its Sequence."""
        r = self.post(code, message_id, data, ttl, sent_at)
        assert r.status_code == 200, (r.status_code, r.text[:500])
        assert "x-syncledger-replayed" not in r.headers, dict(r.headers)
        body = r.json()
        assert body["MessageId"] == message_id and isinstance(body["Sequence"], int) and body["Sequence"] > 0, body
        return body["Sequence"]


class Consumer:
    """A message consumer with a fresh name. Consumers are global (every pool), so a test
    first acknowledges everything up to a marker message it posted (`start_after`): its reads
    and counts then concern only what the test posts after that."""

    def __init__(self, server, name=None):
        self.admin = Caller.admin(server)
        self.name = name or "wire-" + uuid.uuid4().hex[:16]

    def read(self, limit=None):
        query = f"consumer={self.name}" + (f"&limit={limit}" if limit is not None else "")
        page = self.admin.ok("GET", "/messages", query=query)
        assert page["Consumer"] == self.name, page
        return page

    def ack(self, sequence):
        out = self.admin.ok("POST", "/messages/ack", {"Consumer": self.name, "Sequence": sequence})["Consumer"]
        assert out["Name"] == self.name, out
        return out

    def start_after(self, sequence):
        """Moves the cursor to `sequence` (the test's marker message); returns the consumer."""
        consumer = self.ack(sequence)
        assert consumer["Cursor"] == sequence, consumer
        return consumer

    def listed(self):
        """This consumer as `GET /messages/consumers` lists it (None when absent)."""
        consumers = self.admin.ok("GET", "/messages/consumers")["Consumers"]
        mine = [c for c in consumers if c["Name"] == self.name]
        assert len(mine) <= 1, consumers
        return mine[0] if mine else None


def log_entries(server, after=0, system=False):
    """The change feed after position `after`, as `syncledger log --json` prints it (run beside
    the server, as an operator would)."""
    args = [BINARY, "log", "--data", server.data_dir, "--json", "--after", str(after), "--limit", "1000000"]
    if system:
        args.append("--system")
    out = subprocess.run(args, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return [json.loads(line) for line in out.stdout.decode().splitlines() if line.strip()]


def message_entries(server, pool, identity, after=0):
    """The entries of `identity`'s message stream after feed position `after`."""
    return [e for e in log_entries(server, after)
            if e["stream"] == {"pool": pool, "identity": identity, "dataset": MESSAGES_DATASET}]


def stored_message(entry):
    """The message an entry of a message stream holds (its one `message` record)."""
    [event] = entry["events"]
    assert event["op"] == "put" and event["key"] == "message", entry
    return json.loads(event["value"])


def registry_entries(server, pool, after=0):
    """The entries of `pool`'s system streams (devices, subscriptions, configuration) after
    feed position `after`."""
    return [e for e in log_entries(server, after, system=True)
            if e["stream"]["pool"] == pool and e["stream"]["identity"] == "_syncledger:0"]


def mint_session(server, pool, identity, seconds):
    """A temporary credential (with a session token) that expires after `seconds`."""
    out = subprocess.run([BINARY, "credentials", "create", "--data", server.data_dir, "--identity-pool-id", pool,
                          "--identity-id", identity, "--session-token", "--duration", str(seconds)],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    cred = json.loads(out.stdout)
    assert cred["SessionToken"], cred
    return cred


def start_with_env(data_dir, extra_args=(), **env):
    """A private `syncledger serve` whose process gets `env` on top of ours (e.g.
    SYNCLEDGER_FAULT)."""
    with mock.patch.dict(os.environ, env):
        return Server(data_dir, extra_args)
