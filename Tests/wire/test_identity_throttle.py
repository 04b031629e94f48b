"""Cognito Identity abuse limits (issue 22, item 3): token buckets on the unsigned calls (GetId,
GetCredentialsForIdentity, GetOpenIdToken) per source address and per identity pool, answered
with 429 TooManyRequestsException in the awsJson1_1 shape; X-Forwarded-For believed only from a
`--trusted-proxy`; a warning when a pool passes 80 % of its cap; and paging of the admin
listings by seeking to the NextToken's key (every item exactly once; foreign or altered tokens
refused with a clear 400)."""

import json
import subprocess
import threading
import time

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, start_server

# One attempt in all (botocore's `max_attempts` counts retries: each refused call was sent twice).
NO_RETRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})
TARGET = "AWSCognitoIdentityService."


def identity_client(server, signed=True):
    if signed:
        return boto3.client("cognito-identity", endpoint_url=server.url, region_name=REGION,
                            aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET, config=NO_RETRY)
    return boto3.client("cognito-identity", endpoint_url=server.url, region_name=REGION,
                        config=Config(signature_version=UNSIGNED, retries={"total_max_attempts": 1, "mode": "standard"}))


def unsigned_call(server, operation, body, forwarded_for=None):
    """An unsigned awsJson1_1 call, as a browser SDK sends it; returns (status, headers, JSON)."""
    headers = {"X-Amz-Target": TARGET + operation, "Content-Type": "application/x-amz-json-1.1"}
    if forwarded_for:
        headers["X-Forwarded-For"] = forwarded_for
    reply = server.raw("POST", "/", body=json.dumps(body), headers=headers, sign=False)
    return reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, json.loads(reply.content or b"{}")


def is_throttled(status, headers, body):
    """A Cognito-shaped 429: status, `x-amzn-ErrorType` and `__type`."""
    if status != 429:
        return False
    assert headers.get("x-amzn-errortype") == "TooManyRequestsException", headers
    assert body["__type"] == "TooManyRequestsException" and "retry in" in body["message"], body
    return True


def poll(condition, timeout=30, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not hold within {timeout} s")


def metric(server, line_prefix):
    for line in server.metrics().splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def servers(tmp_root):
    started = []

    def start(name, args):
        s = start_server(tmp_root, name, ["--fast", *args])
        started.append(s)
        return s
    yield start
    for s in started:
        assert s.stop() == 0


# The buckets that are asserted empty refill one token per 100 s: nothing refills while a test
# asserts 429s, however slowly a loaded machine runs it. Recovery is tested apart, on servers
# whose buckets hold one token and refill two a second.
SLOW = "0.01"


def test_get_id_from_many_threads_gets_429s_and_other_pools_are_unaffected(servers):
    # On loopback every client is 127.0.0.1: the per-pool bucket is what this test trips.
    server = servers("throttle-pool", ["--identity-source-rate", "0", "--identity-pool-rate", SLOW, "--identity-pool-burst", "10"])
    admin = identity_client(server)
    busy = admin.create_identity_pool(IdentityPoolName="Busy", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    quiet = admin.create_identity_pool(IdentityPoolName="Quiet", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    outcomes, lock = [], threading.Lock()

    def worker():
        client = identity_client(server, signed=False)
        for _ in range(6):
            try:
                client.get_id(IdentityPoolId=busy)
                result = "ok"
            except ClientError as e:
                err = e.response
                assert err["ResponseMetadata"]["HTTPStatusCode"] == 429, err
                assert err["Error"]["Code"] == "TooManyRequestsException", err
                result = "throttled"
            with lock:
                outcomes.append(result)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    passed = outcomes.count("ok")
    assert len(outcomes) == 48
    # The burst, plus what the bucket earned while the threads ran (none unless they took 100 s).
    assert 10 <= passed <= 10 + int(float(SLOW) * elapsed), (passed, elapsed)
    assert outcomes.count("throttled") == 48 - passed
    # The raw answer is Cognito's awsJson1_1 error.
    assert is_throttled(*unsigned_call(server, "GetId", {"IdentityPoolId": busy}))
    # Another pool is not touched by the busy one's bucket.
    other = identity_client(server, signed=False)
    for _ in range(5):
        assert other.get_id(IdentityPoolId=quiet)["IdentityId"].startswith(REGION + ":")
    # The other unsigned calls share the pool's bucket.
    identity = admin.list_identities(IdentityPoolId=busy, MaxResults=1)["Identities"][0]["IdentityId"]
    for operation in ["GetCredentialsForIdentity", "GetOpenIdToken", "UnlinkIdentity"]:
        body = {"IdentityId": identity, **({"Logins": {}, "LoginsToRemove": []} if operation == "UnlinkIdentity" else {})}
        assert is_throttled(*unsigned_call(server, operation, body)), operation
    assert metric(server, 'syncledger_identity_throttled_total{operation="GetId",limit="pool"}') == 48 - passed + 1
    assert metric(server, 'syncledger_identity_throttled_total{operation="GetCredentialsForIdentity",limit="pool"}') == 1
    assert metric(server, 'syncledger_identity_throttled_total{operation="UnlinkIdentity",limit="pool"}') == 1
    assert metric(server, 'syncledger_identity_throttle_rate{limit="pool"}') == float(SLOW)
    assert metric(server, 'syncledger_identity_throttle_rate{limit="source"}') == 0
    # Signed admin calls are not limited.
    for _ in range(20):
        admin.describe_identity_pool(IdentityPoolId=busy)


def test_a_throttled_source_or_pool_recovers_once_its_bucket_refills(servers):
    for name, args, limit in [("recover-source", ["--identity-source-rate", "2", "--identity-source-burst", "1", "--identity-pool-rate", "0"], "source"),
                              ("recover-pool", ["--identity-source-rate", "0", "--identity-pool-rate", "2", "--identity-pool-burst", "1"], "pool")]:
        server = servers(name, args)
        pid = identity_client(server).create_identity_pool(IdentityPoolName="R", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
        found = {}

        def get_id():
            status, _, body = unsigned_call(server, "GetId", {"IdentityPoolId": pid})
            if status == 200:
                found["identity"] = body["IdentityId"]
            return status
        # A bucket of one token: calls in a row soon find it empty, then it refills.
        poll(lambda: get_id() == 429, timeout=60, what=f"a 429 from the {limit} bucket")
        poll(lambda: get_id() == 200, timeout=60, what=f"the {limit} bucket's recovery")
        credentials = lambda: unsigned_call(server, "GetCredentialsForIdentity", {"IdentityId": found["identity"]})[0]
        poll(lambda: credentials() == 429, timeout=60, what=f"GetCredentialsForIdentity refused by the {limit} bucket")
        poll(lambda: credentials() == 200, timeout=60, what=f"GetCredentialsForIdentity's recovery ({limit})")
        assert metric(server, f'syncledger_identity_throttled_total{{operation="GetId",limit="{limit}"}}') >= 1


def test_the_source_is_the_peer_and_forwarded_for_counts_only_from_a_trusted_proxy(servers):
    untrusted = servers("throttle-source", ["--identity-source-rate", SLOW, "--identity-source-burst", "5", "--identity-pool-rate", "0"])
    admin = identity_client(untrusted)
    pid = admin.create_identity_pool(IdentityPoolName="P", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    # Without --trusted-proxy, an attacker who names a new source in each request is still one
    # source: his address.
    answers = [unsigned_call(untrusted, "GetId", {"IdentityPoolId": pid}, forwarded_for=f"198.51.100.{i}") for i in range(12)]
    throttled = [a for a in answers if is_throttled(*a)]
    assert [a[0] for a in answers] == [200] * 5 + [429] * 7
    assert "127.0.0.1" in throttled[0][2]["message"]

    trusted = servers("throttle-proxy", ["--identity-source-rate", SLOW, "--identity-source-burst", "5", "--identity-pool-rate", "0",
                                         "--trusted-proxy", "127.0.0.1"])
    admin = identity_client(trusted)
    pid = admin.create_identity_pool(IdentityPoolName="P", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    # Behind a trusted proxy, the client it names is the source: one is throttled, another is not.
    answers = [unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for="203.0.113.7") for _ in range(12)]
    assert [a[0] for a in answers] == [200] * 5 + [429] * 7
    assert is_throttled(*answers[5]) and "203.0.113.7" in answers[5][2]["message"]
    assert unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for="203.0.113.8")[0] == 200
    # The proxy appends what it saw: the rightmost untrusted entry counts, not what the client wrote.
    assert is_throttled(*unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for="192.0.2.99, 203.0.113.7"))
    # A header padded past 4 KiB is still read from the right: no fresh bucket for the padding.
    padded = ", ".join(f"192.0.2.{i % 250}" for i in range(400)) + ", 203.0.113.7"
    assert len(padded) > 4096
    assert is_throttled(*unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for=padded))
    # A garbage entry stops at the proxy: the request is the proxy's own.
    assert unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for="not-an-address")[0] == 200
    # An IPv6 client is its /64: rotating addresses inside it gets no fresh bucket.
    answers = [unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for=f"2001:db8:1:2::{i:x}") for i in range(1, 8)]
    assert [a[0] for a in answers] == [200] * 5 + [429] * 2
    assert "2001:db8:1:2::/64" in answers[5][2]["message"], answers[5]
    assert unsigned_call(trusted, "GetId", {"IdentityPoolId": pid}, forwarded_for="2001:db8:1:3::1")[0] == 200
    assert metric(trusted, 'syncledger_identity_throttled_total{operation="GetId",limit="source"}') == 7 + 2 + 2


def test_bad_throttle_flags_are_refused_at_startup():
    for args, flag in [(["--identity-source-rate", "-1"], "--identity-source-rate"),
                       (["--identity-pool-burst", "0"], "--identity-pool-burst"),
                       (["--trusted-proxy", "proxy.example"], "--trusted-proxy")]:
        out = subprocess.run([BINARY, "serve", "--port", "0", "--data", "/nonexistent/never-made", *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and flag in out.stderr, (args, out.stderr)
    help_text = subprocess.run([BINARY, "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    for flag in ["--identity-source-rate", "--identity-source-burst", "--identity-pool-rate", "--identity-pool-burst", "--trusted-proxy"]:
        assert flag in help_text


def test_a_pool_past_80_percent_of_its_cap_is_warned_about_in_the_log_and_metrics(servers):
    server = servers("identity-cap-warning", ["--max-identities-per-pool", "5"])
    admin = identity_client(server)
    anonymous = identity_client(server, signed=False)
    pid = admin.create_identity_pool(IdentityPoolName="Small", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    for _ in range(3):
        anonymous.get_id(IdentityPoolId=pid)
    assert metric(server, f'syncledger_identity_pool_records{{pool="{pid}"}}') is None
    assert metric(server, "syncledger_identity_pool_cap_warnings_total") == 0
    assert "passed 80% of its cap" not in open(server.log_path, errors="replace").read()
    anonymous.get_id(IdentityPoolId=pid)  # 4 of 5: past 80 %
    assert metric(server, f'syncledger_identity_pool_records{{pool="{pid}"}}') == 4
    assert metric(server, "syncledger_identity_pool_cap") == 5
    assert metric(server, "syncledger_identity_pool_cap_warnings_total") == 1
    poll(lambda: "passed 80% of its cap" in open(server.log_path, errors="replace").read(), timeout=10, what="the log warning")
    log = open(server.log_path, errors="replace").read()
    warning = [line for line in log.splitlines() if "passed 80% of its cap" in line]
    assert len(warning) == 1 and pid in warning[0], warning
    anonymous.get_id(IdentityPoolId=pid)  # 5 of 5: still past, warned once
    assert metric(server, f'syncledger_identity_pool_records{{pool="{pid}"}}') == 5
    assert metric(server, "syncledger_identity_pool_cap_warnings_total") == 1
    with pytest.raises(ClientError) as full:
        anonymous.get_id(IdentityPoolId=pid)
    assert full.value.response["Error"]["Code"] == "LimitExceededException"


def all_pages(call, key, **kwargs):
    items, token, pages = [], None, 0
    while True:
        page = call(**kwargs, **({"NextToken": token} if token else {}))
        items += page[key]
        pages += 1
        token = page.get("NextToken")
        if not token:
            return items, pages


def tampered(token):
    i = len(token) // 3
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]


def error(call, **kwargs):
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    r = raised.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Message"]


def test_list_identities_pages_give_every_identity_once_and_refuse_foreign_or_altered_tokens(servers):
    server = servers("identity-paging", ["--identity-source-rate", "0", "--identity-pool-rate", "0"])
    admin = identity_client(server)
    anonymous = identity_client(server, signed=False)
    a = admin.create_identity_pool(IdentityPoolName="A", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    b = admin.create_identity_pool(IdentityPoolName="B", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    made = [anonymous.get_id(IdentityPoolId=a)["IdentityId"] for _ in range(53)]
    anonymous.get_id(IdentityPoolId=b)
    listed, pages = all_pages(admin.list_identities, "Identities", IdentityPoolId=a, MaxResults=7)
    ids = [i["IdentityId"] for i in listed]
    assert sorted(ids) == sorted(made) and len(ids) == len(set(ids)) == 53
    assert ids == sorted(ids)  # the order stays the id order
    assert pages == 8
    # Disabled identities hidden: the others, each once.
    for victim in made[:10]:
        out = subprocess.run([BINARY, "identities", "disable", victim, "--data", server.data_dir], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    shown, _ = all_pages(admin.list_identities, "Identities", IdentityPoolId=a, MaxResults=6, HideDisabled=True)
    assert sorted(i["IdentityId"] for i in shown) == sorted(made[10:])
    # A token of pool A is refused for pool B; an altered one and another call's are refused too.
    token = admin.list_identities(IdentityPoolId=a, MaxResults=5)["NextToken"]
    code, status, message = error(admin.list_identities, IdentityPoolId=b, MaxResults=5, NextToken=token)
    assert (code, status) == ("InvalidParameterException", 400) and "another identity pool" in message
    code, status, message = error(admin.list_identities, IdentityPoolId=a, MaxResults=5, NextToken=tampered(token))
    assert (code, status) == ("InvalidParameterException", 400) and "NextToken" in message
    pools_token = admin.list_identity_pools(MaxResults=1)["NextToken"]
    code, status, message = error(admin.list_identities, IdentityPoolId=a, MaxResults=5, NextToken=pools_token)
    assert (code, status) == ("InvalidParameterException", 400) and "NextToken" in message
    assert error(admin.list_identities, IdentityPoolId=a, MaxResults=5, NextToken="x" * 500)[:2] == ("InvalidParameterException", 400)
    # A page token keeps working when the identity it names is deleted meanwhile.
    first = admin.list_identities(IdentityPoolId=a, MaxResults=5)
    admin.delete_identities(IdentityIdsToDelete=[first["Identities"][-1]["IdentityId"]])
    rest, _ = all_pages(admin.list_identities, "Identities", IdentityPoolId=a, MaxResults=60)
    after = admin.list_identities(IdentityPoolId=a, MaxResults=60, NextToken=first["NextToken"])["Identities"]
    assert [i["IdentityId"] for i in after] == [i["IdentityId"] for i in rest][4:]


def test_list_identity_pools_and_pool_usage_pages_give_every_pool_once(servers, tmp_root):
    server = servers("pool-paging", [])
    admin = identity_client(server)
    made = [admin.create_identity_pool(IdentityPoolName=f"P{i}", AllowUnauthenticatedIdentities=False)["IdentityPoolId"] for i in range(23)]
    listed, pages = all_pages(admin.list_identity_pools, "IdentityPools", MaxResults=4)
    ids = [p["IdentityPoolId"] for p in listed]
    assert sorted(ids) == sorted(made) and len(set(ids)) == 23 and pages == 6 and ids == sorted(ids)
    token = admin.list_identity_pools(MaxResults=4)["NextToken"]
    code, status, message = error(admin.list_identity_pools, MaxResults=4, NextToken=tampered(token))
    assert (code, status) == ("InvalidParameterException", 400) and "NextToken" in message
    # Cognito Sync's ListIdentityPoolUsage: pools with data, paged the same way.
    sync = server.client()
    pools_with_data = [f"{REGION}:0000000{i}-0000-4000-8000-000000000000" for i in range(9)]
    for pool in pools_with_data:
        identity = f"{REGION}:11111111-0000-4000-8000-000000000000"
        session = sync.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d")["SyncSessionToken"]
        sync.update_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d", SyncSessionToken=session,
                            RecordPatches=[{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])
    usage, token = [], None
    while True:
        page = sync.list_identity_pool_usage(MaxResults=2, **({"NextToken": token} if token else {}))
        usage += [u["IdentityPoolId"] for u in page["IdentityPoolUsages"]]
        token = page.get("NextToken")
        if not token:
            break
    assert len(usage) == len(set(usage)) and set(pools_with_data) <= set(usage) and usage == sorted(usage)
    with pytest.raises(ClientError) as raised:
        sync.list_identity_pool_usage(MaxResults=2, NextToken=tampered(sync.list_identity_pool_usage(MaxResults=2)["NextToken"]))
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # An identity-pools token is not a usage token, and the other way round.
    with pytest.raises(ClientError) as raised:
        sync.list_identity_pool_usage(MaxResults=2, NextToken=admin.list_identity_pools(MaxResults=1)["NextToken"])
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    code, status, _ = error(admin.list_identity_pools, MaxResults=2, NextToken=sync.list_identity_pool_usage(MaxResults=1)["NextToken"])
    assert (code, status) == ("InvalidParameterException", 400)
