"""A push test bed: the APNs, FCM and webhook stand-ins on loopback (one self-signed certificate
the server trusts with --push-ca) and helpers to configure a pool's push sync through the real
CLI and the Cognito API."""

import json
import os
import subprocess
import time
import uuid

from conftest import BINARY, Server, new_id
from push import certs
from push.apns import ApnsStandIn
from push.fcm import FcmStandIn
from push.webhook import WebhookReceiver

TEAM_ID = "TEAM123456"
KEY_ID = "KEY1234567"
TOPIC = "com.example.syncledger"
ACCOUNT = "123456789012"
ARN_APNS = f"arn:aws:sns:us-east-1:{ACCOUNT}:app/APNS/SyncApp"
ARN_SANDBOX = f"arn:aws:sns:us-east-1:{ACCOUNT}:app/APNS_SANDBOX/SyncApp"
ARN_GCM = f"arn:aws:sns:us-east-1:{ACCOUNT}:app/GCM/SyncApp"
ARN_ADM = f"arn:aws:sns:us-east-1:{ACCOUNT}:app/ADM/SyncApp"
WEBHOOK_SECRET = "webhook-secret-0123456789abcdef"
# Fast retries so a test sees several attempts within a second.
PUSH_ARGS = ["--push-backoff", "0.05", "--push-max-backoff", "0.3", "--push-max-attempts", "8"]


def hex_token():
    return uuid.uuid4().hex + uuid.uuid4().hex


class PushBed:
    """The stand-ins, their files, and the server arguments that point at them."""

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.tls = certs.make_tls_cert(directory)
        self.apns_key = certs.make_apns_key(directory, KEY_ID)
        self.apns = ApnsStandIn(TEAM_ID, KEY_ID, self.apns_key.public_key, [TOPIC], tls=self.tls).start()
        self.sandbox = ApnsStandIn(TEAM_ID, KEY_ID, self.apns_key.public_key, [TOPIC], tls=self.tls).start()
        self.fcm = FcmStandIn("syncledger-push-test", tls=self.tls).start()
        self.service_account = self.fcm.make_service_account(directory)
        self.webhook = WebhookReceiver(WEBHOOK_SECRET).start()
        self.secret_file = os.path.join(directory, "webhook.secret")
        with open(self.secret_file, "w") as f:
            f.write(WEBHOOK_SECRET)

    def server_args(self):
        return ["--apns-url", self.apns.url, "--apns-sandbox-url", self.sandbox.url, "--fcm-url", self.fcm.url,
                "--push-ca", self.tls.cert, *PUSH_ARGS]

    def configure(self, server):
        """Configures every transport on `server`'s data directory with the real CLI."""
        cli(server, "push", "configure", "apns", "--arn", ARN_APNS, "--key-file", self.apns_key.path,
            "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC)
        cli(server, "push", "configure", "apns", "--arn", ARN_SANDBOX, "--key-file", self.apns_key.path,
            "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC)
        cli(server, "push", "configure", "fcm", "--arn", ARN_GCM, "--service-account", self.service_account[0])
        cli(server, "push", "configure", "webhook", "--arn", ARN_ADM, "--url", self.webhook.url + "/push",
            "--secret-file", self.secret_file)

    def reset(self):
        for standin in (self.apns, self.sandbox, self.fcm, self.webhook):
            standin.reset()

    def stop(self):
        for standin in (self.apns, self.sandbox, self.fcm, self.webhook):
            standin.stop()


def cli(server, *args, check=True):
    """Runs `syncledger ARGS --data DIR`; returns the completed process."""
    out = subprocess.run([BINARY, *args, "--data", server.data_dir], capture_output=True, timeout=60)
    if check:
        assert out.returncode == 0, (args, out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace"))
    return out


def status(server):
    """`syncledger push status --json`."""
    return json.loads(cli(server, "push", "status", "--json").stdout)


def counter(server, transport, name):
    return status(server)["transports"][transport][name]


def wait_until(predicate, timeout=15.0, what="condition"):
    """Waits for an outcome the server reports through its CLI (a counter reached); the
    predicate is re-checked after each CLI run (each takes milliseconds), never on a timer alone."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


class Identity:
    """An identity of a pool with push sync configured, its devices and datasets."""

    def __init__(self, admin, pool, arns=(ARN_APNS, ARN_SANDBOX, ARN_GCM, ARN_ADM)):
        self.admin = admin
        self.pool = pool
        self.identity = new_id()
        admin.set_identity_pool_configuration(IdentityPoolId=pool, PushSync={"ApplicationArns": list(arns)})

    def device(self, platform, token=None):
        token = token or (hex_token().upper() if platform.startswith("APNS") else "tok-" + uuid.uuid4().hex)
        out = self.admin.register_device(IdentityPoolId=self.pool, IdentityId=self.identity, Platform=platform, Token=token)
        return out["DeviceId"], token

    def subscribe(self, dataset, *device_ids):
        for device_id in device_ids:
            self.admin.subscribe_to_dataset(IdentityPoolId=self.pool, IdentityId=self.identity,
                                            DatasetName=dataset, DeviceId=device_id)

    def put(self, dataset, values, device_id=None):
        ids = dict(IdentityPoolId=self.pool, IdentityId=self.identity, DatasetName=dataset)
        listed = self.admin.list_records(**ids)
        counts = {r["Key"]: r["SyncCount"] for r in listed["Records"]}
        patches = [{"Op": "replace", "Key": k, "Value": v, "SyncCount": counts.get(k, 0)} for k, v in values.items()]
        extra = {"DeviceId": device_id} if device_id else {}
        out = self.admin.update_records(**ids, SyncSessionToken=listed["SyncSessionToken"], RecordPatches=patches, **extra)
        return max(r["SyncCount"] for r in out["Records"])

    def data(self, dataset, sync_count):
        """The five keys a Cognito client expects, every value a string."""
        return {"source": "cognito-sync", "identityPoolId": self.pool, "identityId": self.identity,
                "datasetName": dataset, "syncCount": str(sync_count)}
