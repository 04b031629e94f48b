"""Real-client ("wire") tests of the SyncLedger server.

Every test talks to the real `syncledger serve` binary over HTTP with the clients people use:
boto3's `cognito-sync` client, the AWS CLI, and raw requests signed with botocore's SigV4.

The binary is `$SYNCLEDGER_BIN`, else `<repo>/.build/debug/syncledger` (build it first with
`swift build`). Nothing here installs anything.
"""

import contextlib
import datetime
import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from urllib.parse import quote
from unittest import mock

import boto3
import botocore.auth
import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("SYNCLEDGER_BIN") or os.path.join(REPO, ".build", "debug", "syncledger")

ADMIN_KEY = "AKIDWIRETESTADMIN0001"
ADMIN_SECRET = "wire-test-admin-secret/0123456789abcdefABCDEF"
REGION = "us-east-1"
SERVICE = "cognito-sync"

# Bodies larger than this are refused by the main test server.
MAIN_MAX_BODY_BYTES = 2 * 1024 * 1024

_NO_RETRY = Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=60,
                   parameter_validation=True)


def new_id(region="us-east-1"):
    """A fresh Cognito-style id, `[\\w-]+:[0-9a-f-]+` (46 characters)."""
    return f"{region}:{uuid.uuid4()}"


def fixed_clock(delta_seconds):
    """A stand-in for botocore's clock that is `delta_seconds` off the real time."""
    def now(remove_tzinfo=True):
        t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=delta_seconds)
        return t.replace(tzinfo=None) if remove_tzinfo else t
    return now


@contextlib.contextmanager
def skewed_clock(delta_seconds):
    """Makes botocore sign as if the time were `delta_seconds` off."""
    with mock.patch.object(botocore.auth, "get_current_datetime", fixed_clock(delta_seconds)):
        yield


def expect_error(call, code, status, *args, **kwargs):
    """Calls `call` and asserts it fails with model error `code` and HTTP `status`; returns the
    error message."""
    with pytest.raises(ClientError) as info:
        call(*args, **kwargs)
    response = info.value.response
    assert response["Error"]["Code"] == code, response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status, response
    headers = response["ResponseMetadata"]["HTTPHeaders"]
    assert headers.get("x-amzn-errortype") == code, headers
    message = response["Error"].get("Message", "")
    assert message, "the error carries no message"
    return message


def expect_raw_error(response, code, status):
    """Asserts a raw `requests` response is the wire error `code` with `status`; returns the
    message."""
    assert response.status_code == status, (response.status_code, response.text[:500])
    assert response.headers.get("x-amzn-ErrorType") == code, (dict(response.headers), response.text[:500])
    body = response.json()
    assert isinstance(body.get("message"), str) and body["message"], body
    return body["message"]


def api_path(*segments):
    """`/identitypools/...` with each segment percent-encoded as botocore does."""
    return "/identitypools" + "".join("/" + quote(str(s), safe="~") for s in segments)


def dataset_path(pool, identity, dataset, *rest):
    return api_path(pool, "identities", identity, "datasets", dataset, *rest)


def strip(response):
    response = dict(response)
    response.pop("ResponseMetadata", None)
    return response


class RawResponse:
    """What `Server.raw` returns: a small stand-in for a `requests` response."""

    def __init__(self, status, headers, content):
        self.status_code = status
        self.headers = requests.structures.CaseInsensitiveDict(headers)
        self.content = content
        self.text = content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


class Server:
    """One `syncledger serve` process on a free port with its own data directory."""

    def __init__(self, data_dir, extra_args=(), admin=(ADMIN_KEY, ADMIN_SECRET)):
        assert os.path.isfile(BINARY) and os.access(BINARY, os.X_OK), \
            f"{BINARY} is missing: build it with `swift build` (or set SYNCLEDGER_BIN)"
        self.data_dir = data_dir
        self.admin = admin
        self.log_path = os.path.join(os.path.dirname(data_dir), os.path.basename(data_dir) + ".log")
        env = dict(os.environ)
        env["SYNCLEDGER_ACCESS_KEY_ID"], env["SYNCLEDGER_SECRET_ACCESS_KEY"] = admin
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [BINARY, "serve", "--data", data_dir, "--host", "127.0.0.1", "--port", "0", *extra_args],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, env=env)
        self.url = self._wait_listening(timeout=30)
        self.port = int(self.url.rsplit(":", 1)[1])
        self.host = f"127.0.0.1:{self.port}"
        self.exit_code = None

    def _wait_listening(self, timeout):
        found = {}

        def read():
            for raw in self.process.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("SyncLedger listening on "):
                    found["url"] = line.split()[3]
                    break
            # Keep draining so the server never blocks on a full pipe.
            for _ in self.process.stdout:
                pass

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "url" in found:
                return found["url"]
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.process.kill()
        raise AssertionError(f"the server did not print its listening line (exit {self.process.poll()}); log:\n"
                             + open(self.log_path, errors="replace").read()[-3000:])

    # -- shutdown -------------------------------------------------------------------------

    def stop(self, timeout=10):
        """SIGTERM, then wait; returns the exit code (None if it had to be killed)."""
        if self.exit_code is not None:
            return self.exit_code
        self.process.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.exit_code = None
        self._log.close()
        return self.exit_code

    # -- clients --------------------------------------------------------------------------

    def client(self, key=ADMIN_KEY, secret=ADMIN_SECRET, token=None):
        """A boto3 cognito-sync client for this server (no retries)."""
        return boto3.session.Session().client(
            SERVICE, endpoint_url=self.url, region_name=REGION,
            aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token,
            config=_NO_RETRY)

    def client_with(self, config, key=ADMIN_KEY, secret=ADMIN_SECRET):
        """A boto3 cognito-sync client for this server with a botocore `config` of the test's."""
        return boto3.session.Session().client(
            SERVICE, endpoint_url=self.url, region_name=REGION,
            aws_access_key_id=key, aws_secret_access_key=secret, config=config)

    def client_for(self, cred):
        return self.client(cred["AccessKeyId"], cred["SecretAccessKey"], cred.get("SessionToken"))

    def mint(self, pool, identity, session_token=False):
        """`syncledger credentials create` on this server's data directory while it runs."""
        args = [BINARY, "credentials", "create", "--data", self.data_dir,
                "--identity-pool-id", pool, "--identity-id", identity]
        if session_token:
            args.append("--session-token")
        out = subprocess.run(args, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr.decode(errors="replace")
        cred = json.loads(out.stdout)
        assert cred["IdentityPoolId"] == pool and cred["IdentityId"] == identity, cred
        assert ("SessionToken" in cred) == session_token, cred
        return cred

    def raw(self, method, path, body=b"", query="", key=ADMIN_KEY, secret=ADMIN_SECRET, token=None,
            headers=None, sign=True, clock_skew=0, mutate=None, service=SERVICE, region=REGION):
        """Sends a request signed with botocore's SigV4Auth (or unsigned) and returns the
        `requests` response. `path` and `query` are sent as given (already percent-encoded).
        `mutate(headers)` may alter the signed headers before sending."""
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        url = self.url + path + (("?" + query) if query else "")
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        if sign:
            with skewed_clock(clock_skew):
                SigV4Auth(Credentials(key, secret, token), service, region).add_auth(request)
        sent = {k: v for k, v in request.headers.items()}
        if mutate:
            mutate(sent)
        # http.client sends the path exactly as signed (requests/urllib3 would re-quote a
        # malformed percent-escape).
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            target = path + (("?" + query) if query else "")
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            sent.setdefault("Host", self.host)
            for name, value in sent.items():
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(bytes(body))
            reply = connection.getresponse()
            return RawResponse(reply.status, reply.getheaders(), reply.read())
        finally:
            connection.close()

    def cli(self, *args, key=ADMIN_KEY, secret=ADMIN_SECRET, token=None):
        """Runs `aws cognito-sync ARGS --endpoint-url URL --region us-east-1 --output json`
        with only the given credentials; returns (exit code, parsed JSON or None, stderr)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null",
                   AWS_EC2_METADATA_DISABLED="true", AWS_MAX_ATTEMPTS="1", AWS_RETRY_MODE="standard",
                   AWS_PAGER="")
        if token:
            env["AWS_SESSION_TOKEN"] = token
        command = [shutil.which("aws") or "aws", "cognito-sync", *args,
                   "--endpoint-url", self.url, "--region", REGION, "--output", "json"]
        out = subprocess.run(command, capture_output=True, env=env, timeout=120)
        text = out.stdout.decode()
        parsed = json.loads(text) if text.strip() else None
        return out.returncode, parsed, out.stderr.decode(errors="replace")

    def get(self, path):
        return requests.get(self.url + path, timeout=30)

    def metrics(self):
        """The Prometheus text of `GET /metrics`, signed with the admin credential (the API's
        listener answers it to the admin only; `--metrics-listen` serves it unsigned)."""
        key, secret = self.admin
        response = self.raw("GET", "/metrics", key=key, secret=secret)
        assert response.status_code == 200, (response.status_code, response.text[:300])
        return response.text


def start_server(tmp_root, name, extra_args=()):
    data = os.path.join(tmp_root, name)
    return Server(data, extra_args)


@pytest.fixture(scope="session")
def tmp_root(tmp_path_factory):
    """The session's servers' data directories and logs (`<name>` and `<name>.log`), under
    pytest's base temporary directory: `tools/test` points it at a folder it keeps when a test
    fails and names in its last lines."""
    return str(tmp_path_factory.mktemp("servers"))


_failed_tests = []


def pytest_runtest_logreport(report):
    if report.failed:
        _failed_tests.append(report.nodeid + ("" if report.when == "call" else f" ({report.when})"))


def pytest_sessionfinish(session, exitstatus):
    """Writes the failing tests' ids to $SYNCLEDGER_WIRE_FAILURES (tools/test prints them last)."""
    path = os.environ.get("SYNCLEDGER_WIRE_FAILURES")
    if path:
        with open(path, "w") as out:
            out.writelines(name + "\n" for name in _failed_tests)


@pytest.fixture(scope="session")
def server(tmp_root):
    """The main server: fast mode, 2 MiB request bodies, default session lifetime."""
    s = start_server(tmp_root, "main", ["--fast", "--max-body-bytes", str(MAIN_MAX_BODY_BYTES)])
    yield s
    code = s.stop(timeout=10)
    assert code == 0, f"the server did not exit 0 within 10 s of SIGTERM (exit {code})"


@pytest.fixture(scope="session")
def admin(server):
    return server.client()


@pytest.fixture
def pool():
    return new_id()


@pytest.fixture
def identity():
    return new_id()


@pytest.fixture
def ds(admin, pool, identity):
    """Helpers on one fresh (pool, identity) through the admin boto3 client."""
    return Dataset(admin, pool, identity)


class Dataset:
    """Small sync helpers for one pool+identity through a boto3 client."""

    def __init__(self, client, pool, identity):
        self.client, self.pool, self.identity = client, pool, identity

    def ids(self, name):
        return dict(IdentityPoolId=self.pool, IdentityId=self.identity, DatasetName=name)

    def list(self, name, client=None, **kw):
        return (client or self.client).list_records(**self.ids(name), **kw)

    def token(self, name, client=None):
        return self.list(name, client)["SyncSessionToken"]

    def records(self, name, after=0):
        """All records after `after`, paging through, as {key: (value, syncCount)}."""
        out, next_token = {}, None
        while True:
            kw = {"LastSyncCount": after}
            if next_token:
                kw["NextToken"] = next_token
            page = self.list(name, **kw)
            for r in page["Records"]:
                out[r["Key"]] = (r.get("Value"), r["SyncCount"])
            next_token = page.get("NextToken")
            if not next_token:
                return out

    def update(self, name, patches, token=None, client=None, **kw):
        token = token or self.token(name, client)
        return (client or self.client).update_records(**self.ids(name), SyncSessionToken=token,
                                                      RecordPatches=patches, **kw)

    def put(self, name, values, counts=None, client=None):
        """Replaces each key with its value, using the given or current sync counts."""
        listing = self.list(name, client)
        current = {r["Key"]: r["SyncCount"] for r in listing["Records"]}
        counts = counts or {}
        patches = [{"Op": "replace", "Key": k, "Value": v, "SyncCount": counts.get(k, current.get(k, 0))}
                   for k, v in values.items()]
        return self.update(name, patches, token=listing["SyncSessionToken"], client=client)

    def describe(self, name):
        return self.client.describe_dataset(**self.ids(name))["Dataset"]

    def snapshot(self, name):
        """What the dataset looks like now (for asserting nothing changed)."""
        page = self.list(name)
        records = sorted((r["Key"], r.get("Value"), r["SyncCount"]) for r in page["Records"])
        try:
            d = self.describe(name)
            described = (d["NumRecords"], d["DataStorage"], d["LastModifiedDate"], d["LastModifiedBy"])
        except ClientError as e:
            described = e.response["Error"]["Code"]
        return dict(records=records, count=page["DatasetSyncCount"], exists=page["DatasetExists"],
                    described=described)
