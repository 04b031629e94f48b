"""SigV4 verification (header and presigned forms), security tokens, and what an identity's
credential may reach."""

import json
import os
import re
import time

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import (ADMIN_KEY, ADMIN_SECRET, Dataset, dataset_path, expect_error, expect_raw_error,
                      new_id, skewed_clock, strip)

PATCH_B = [{"Op": "replace", "Key": "b", "Value": "intruder", "SyncCount": 0}]


def flip_last(text):
    """`text` with its last character replaced by a different one, so the result never equals it."""
    return text[:-1] + ("Z" if text[-1] != "Z" else "Y")


@pytest.fixture
def victim(admin, pool, identity):
    """A dataset with one record, and how it looks."""
    d = Dataset(admin, pool, identity)
    d.put("data", {"a": "1"})
    return d


# -- signatures -------------------------------------------------------------------------------

def test_unsigned_request_is_refused(server, victim):
    path = dataset_path(victim.pool, victim.identity, "data", "records")
    message = expect_raw_error(server.raw("GET", path, sign=False), "NotAuthorizedException", 403)
    assert "not signed" in message
    body = {"SyncSessionToken": victim.token("data"), "RecordPatches": PATCH_B}
    before = victim.snapshot("data")
    expect_raw_error(server.raw("POST", dataset_path(victim.pool, victim.identity, "data"), body, sign=False),
                     "NotAuthorizedException", 403)
    assert victim.snapshot("data") == before


def test_signed_raw_request_is_accepted(server, victim):
    # The control for the tests below: the same helper, unaltered, works.
    response = server.raw("GET", dataset_path(victim.pool, victim.identity, "data", "records"), query="lastSyncCount=0")
    assert response.status_code == 200, response.text
    assert [(r["Key"], r["Value"]) for r in response.json()["Records"]] == [("a", "1")]


def test_bad_signatures(server, victim):
    path = dataset_path(victim.pool, victim.identity, "data")
    body = json.dumps({"SyncSessionToken": victim.token("data"), "RecordPatches": PATCH_B})
    before = victim.snapshot("data")

    def flip_signature(h):
        sig = h["Authorization"]
        h["Authorization"] = sig[:-1] + ("0" if sig[-1] != "0" else "1")

    def change_date(h):
        d = h["X-Amz-Date"]                      # yyyyMMddTHHmmssZ: change the last digit of the seconds
        h["X-Amz-Date"] = d[:-2] + ("0" if d[-2] != "0" else "1") + "Z"

    for mutate in [flip_signature, change_date]:
        message = expect_raw_error(server.raw("POST", path, body, mutate=mutate), "NotAuthorizedException", 403)
        assert "signature" in message, message
    assert victim.snapshot("data") == before
    # A body altered after signing (the payload hash no longer matches).
    good = json.dumps({"SyncSessionToken": victim.token("data"),
                       "RecordPatches": [{"Op": "replace", "Key": "c", "Value": "x", "SyncCount": 0}]})
    request = AWSRequest(method="POST", url=server.url + path, data=good.encode())
    SigV4Auth(Credentials(ADMIN_KEY, ADMIN_SECRET), "cognito-sync", "us-east-1").add_auth(request)
    evil = good.replace('"x"', '"y"')
    response = requests.post(server.url + path, data=evil.encode(), headers=dict(request.headers.items()), timeout=30)
    expect_raw_error(response, "NotAuthorizedException", 403)
    assert victim.snapshot("data") == before
    assert "c" not in victim.records("data")


def test_expired_and_future_signatures(server, victim):
    before = victim.snapshot("data")
    token = victim.token("data")
    admin = server.client()
    with skewed_clock(-20 * 60):
        message = expect_error(admin.list_records, "NotAuthorizedException", 403, **victim.ids("data"))
        assert "15 minutes" in message, message
        expect_error(admin.update_records, "NotAuthorizedException", 403, **victim.ids("data"),
                     SyncSessionToken=token, RecordPatches=PATCH_B)
    with skewed_clock(+20 * 60):
        expect_error(admin.update_records, "NotAuthorizedException", 403, **victim.ids("data"),
                     SyncSessionToken=token, RecordPatches=PATCH_B)
    assert victim.snapshot("data") == before
    # 10 minutes off is within the 15 minutes allowed.
    with skewed_clock(-10 * 60):
        assert admin.list_records(**victim.ids("data"))["DatasetSyncCount"] == 1
    # Raw, with botocore's own signer on a fixed old clock.
    response = server.raw("GET", dataset_path(victim.pool, victim.identity, "data", "records"), clock_skew=-20 * 60)
    expect_raw_error(response, "NotAuthorizedException", 403)


def test_foreign_credentials(server, victim):
    token = victim.token("data")
    before = victim.snapshot("data")
    unknown = server.client("AKIDNOBODYKNOWSTHIS", "some-secret")
    message = expect_error(unknown.list_records, "NotAuthorizedException", 403, **victim.ids("data"))
    assert "AKIDNOBODYKNOWSTHIS" not in message, message
    wrong_secret = server.client(ADMIN_KEY, ADMIN_SECRET + "x")
    # An unknown key and a wrong secret get the very same answer: no key can be probed.
    assert expect_error(wrong_secret.list_records, "NotAuthorizedException", 403, **victim.ids("data")) == message
    expect_error(wrong_secret.update_records, "NotAuthorizedException", 403, **victim.ids("data"),
                 SyncSessionToken=token, RecordPatches=PATCH_B)
    expect_error(wrong_secret.list_identity_pool_usage, "NotAuthorizedException", 403)
    cred = server.mint(victim.pool, victim.identity)
    wrong_identity_secret = server.client(cred["AccessKeyId"], flip_last(cred["SecretAccessKey"]))
    expect_error(wrong_identity_secret.update_records, "NotAuthorizedException", 403, **victim.ids("data"),
                 SyncSessionToken=token, RecordPatches=PATCH_B)
    assert victim.snapshot("data") == before


def test_session_token_credentials(server, victim):
    cred = server.mint(victim.pool, victim.identity, session_token=True)
    good = server.client_for(cred)
    # With its token it works.
    page = good.list_records(**victim.ids("data"))
    assert [(r["Key"], r["Value"]) for r in page["Records"]] == [("a", "1")]
    before = victim.snapshot("data")

    missing = server.client(cred["AccessKeyId"], cred["SecretAccessKey"])
    message = expect_error(missing.list_records, "NotAuthorizedException", 403, **victim.ids("data"))
    assert "session token" in message, message
    expect_error(missing.update_records, "NotAuthorizedException", 403, **victim.ids("data"),
                 SyncSessionToken=page["SyncSessionToken"], RecordPatches=PATCH_B)
    wrong = server.client(cred["AccessKeyId"], cred["SecretAccessKey"], cred["SessionToken"][:-2] + "xx")
    expect_error(wrong.update_records, "NotAuthorizedException", 403, **victim.ids("data"),
                 SyncSessionToken=page["SyncSessionToken"], RecordPatches=PATCH_B)
    other = server.mint(victim.pool, victim.identity, session_token=True)
    swapped = server.client(cred["AccessKeyId"], cred["SecretAccessKey"], other["SessionToken"])
    expect_error(swapped.list_records, "NotAuthorizedException", 403, **victim.ids("data"))
    # A token sent for a credential that has none.
    plain = server.mint(victim.pool, victim.identity)
    extra = server.client(plain["AccessKeyId"], plain["SecretAccessKey"], "made-up-token")
    expect_error(extra.list_records, "NotAuthorizedException", 403, **victim.ids("data"))
    # The right token, but added after signing (not a signed header).
    path = dataset_path(victim.pool, victim.identity, "data", "records")
    response = server.raw("GET", path, key=cred["AccessKeyId"], secret=cred["SecretAccessKey"],
                          mutate=lambda h: h.__setitem__("X-Amz-Security-Token", cred["SessionToken"]))
    message = expect_raw_error(response, "NotAuthorizedException", 403)
    assert "signed" in message, message
    assert victim.snapshot("data") == before

    out = good.update_records(**victim.ids("data"), SyncSessionToken=page["SyncSessionToken"], RecordPatches=PATCH_B)
    assert out["Records"][0]["SyncCount"] == 2
    assert out["Records"][0]["LastModifiedBy"] == victim.identity


def test_presigned_urls(server, victim):
    admin = server.client()
    url = admin.generate_presigned_url("list_records", Params=victim.ids("data"), ExpiresIn=300)
    assert "X-Amz-Signature=" in url
    response = requests.get(url, timeout=30)
    assert response.status_code == 200, response.text
    assert [(r["Key"], r["Value"]) for r in response.json()["Records"]] == [("a", "1")]
    url2 = admin.generate_presigned_url("describe_dataset", Params=victim.ids("data"))
    described = requests.get(url2, timeout=30)
    assert described.status_code == 200 and described.json()["Dataset"]["NumRecords"] == 1

    # Tampered signature, altered parameter, and an expired URL.
    i = url.index("X-Amz-Signature=") + len("X-Amz-Signature=")
    bad = url[:i] + ("0" if url[i] != "0" else "1") + url[i + 1:]
    expect_raw_error(requests.get(bad, timeout=30), "NotAuthorizedException", 403)
    expect_raw_error(requests.get(url.replace("/data/records", "/other/records"), timeout=30), "NotAuthorizedException", 403)
    short = admin.generate_presigned_url("list_records", Params=victim.ids("data"), ExpiresIn=1)
    time.sleep(2.1)
    message = expect_raw_error(requests.get(short, timeout=30), "NotAuthorizedException", 403)
    assert "expired" in message, message

    # A presigned URL from a credential with a session token carries it.
    cred = server.mint(victim.pool, victim.identity, session_token=True)
    token_url = server.client_for(cred).generate_presigned_url("list_records", Params=victim.ids("data"))
    assert "X-Amz-Security-Token=" in token_url
    assert requests.get(token_url, timeout=30).status_code == 200
    without = "&".join(p for p in token_url.split("&") if not p.startswith("X-Amz-Security-Token="))
    expect_raw_error(requests.get(without, timeout=30), "NotAuthorizedException", 403)


# -- identity credentials ---------------------------------------------------------------------

def test_credential_minted_while_running_works_at_once(server, pool, identity):
    cred = server.mint(pool, identity)
    client = server.client_for(cred)    # no retries: the very first call must succeed
    page = client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="first")
    assert page["DatasetSyncCount"] == 0
    out = client.update_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="first",
                                SyncSessionToken=page["SyncSessionToken"],
                                RecordPatches=[{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])
    assert out["Records"][0]["SyncCount"] == 1
    assert out["Records"][0]["LastModifiedBy"] == identity


def test_identity_credential_reaches_its_own_data(server, pool, identity):
    me = server.client_for(server.mint(pool, identity))
    d = Dataset(me, pool, identity)
    ids = dict(IdentityPoolId=pool, IdentityId=identity)
    assert d.put("own", {"a": "1"})["Records"][0]["SyncCount"] == 1
    assert d.describe("own")["NumRecords"] == 1
    assert [x["DatasetName"] for x in me.list_datasets(**ids)["Datasets"]] == ["own"]
    assert me.describe_identity_usage(**ids)["IdentityUsage"]["DatasetCount"] == 1
    device = me.register_device(**ids, Platform="GCM", Token="my-phone")["DeviceId"]
    assert me.subscribe_to_dataset(**d.ids("own"), DeviceId=device)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert me.unsubscribe_from_dataset(**d.ids("own"), DeviceId=device)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert me.delete_dataset(**d.ids("own"))["Dataset"]["NumRecords"] == 1
    expect_error(me.describe_dataset, "ResourceNotFoundException", 404, **d.ids("own"))


def test_identity_credential_cannot_reach_another_identity(server, admin, victim):
    device = admin.register_device(IdentityPoolId=victim.pool, IdentityId=victim.identity, Platform="GCM", Token="victim-phone")["DeviceId"]
    admin.subscribe_to_dataset(**victim.ids("data"), DeviceId=device)
    before = victim.snapshot("data")
    usage_before = admin.describe_identity_usage(IdentityPoolId=victim.pool, IdentityId=victim.identity)["IdentityUsage"]
    token = victim.token("data")

    # A neighbour in the same pool, and the victim's own identity id minted for another pool.
    for cred in [server.mint(victim.pool, new_id()), server.mint(new_id(), victim.identity)]:
        c = server.client_for(cred)
        ids = dict(IdentityPoolId=victim.pool, IdentityId=victim.identity)
        dataset = dict(ids, DatasetName="data")
        calls = [
            (c.list_records, dataset),
            (c.update_records, dict(dataset, SyncSessionToken=token, RecordPatches=PATCH_B)),
            (c.describe_dataset, dataset),
            (c.delete_dataset, dataset),
            (c.list_datasets, ids),
            (c.describe_identity_usage, ids),
            (c.register_device, dict(ids, Platform="GCM", Token="evil")),
            (c.subscribe_to_dataset, dict(dataset, DeviceId=device)),
            (c.unsubscribe_from_dataset, dict(dataset, DeviceId=device)),
            (c.update_records, dict(ids, DatasetName="planted", SyncSessionToken=victim.token("planted"), RecordPatches=PATCH_B)),
        ]
        for call, params in calls:
            message = expect_error(call, "NotAuthorizedException", 403, **params)
            assert cred["AccessKeyId"] in message, message

    assert victim.snapshot("data") == before
    assert admin.describe_identity_usage(IdentityPoolId=victim.pool, IdentityId=victim.identity)["IdentityUsage"] == usage_before
    expect_error(admin.describe_dataset, "ResourceNotFoundException", 404, **victim.ids("planted"))
    assert [x["DatasetName"] for x in admin.list_datasets(IdentityPoolId=victim.pool, IdentityId=victim.identity)["Datasets"]] == ["data"]
    # The victim's device is still registered and subscribed: unsubscribing it works once.
    assert admin.register_device(IdentityPoolId=victim.pool, IdentityId=victim.identity, Platform="GCM", Token="victim-phone")["DeviceId"] == device


def test_identity_credential_cannot_call_pool_operations(server, admin, pool, identity):
    streams = {"StreamName": "s1", "StreamingStatus": "ENABLED"}
    lam = "arn:aws:lambda:us-east-1:1:function:f"
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams=streams)
    admin.set_cognito_events(IdentityPoolId=pool, Events={"SyncTrigger": lam})
    Dataset(admin, pool, identity).put("d", {"k": "v"})
    config_before = strip(admin.get_identity_pool_configuration(IdentityPoolId=pool))
    usage_before = admin.describe_identity_pool_usage(IdentityPoolId=pool)["IdentityPoolUsage"]

    for session_token in [False, True]:
        c = server.client_for(server.mint(pool, identity, session_token=session_token))
        p = dict(IdentityPoolId=pool)
        calls = [
            (c.bulk_publish, p),
            (c.get_bulk_publish_details, p),
            (c.describe_identity_pool_usage, p),
            (c.list_identity_pool_usage, {}),
            (c.get_identity_pool_configuration, p),
            (c.set_identity_pool_configuration, dict(p, CognitoStreams={"StreamName": "hijacked", "StreamingStatus": "DISABLED"})),
            (c.get_cognito_events, p),
            (c.set_cognito_events, dict(p, Events={"SyncTrigger": "arn:aws:lambda:us-east-1:1:function:evil"})),
        ]
        for call, params in calls:
            message = expect_error(call, "NotAuthorizedException", 403, **params)
            assert "admin" in message, message

    assert strip(admin.get_identity_pool_configuration(IdentityPoolId=pool)) == config_before
    assert admin.get_cognito_events(IdentityPoolId=pool)["Events"] == {"SyncTrigger": lam}
    assert admin.get_bulk_publish_details(IdentityPoolId=pool)["BulkPublishStatus"] == "NOT_STARTED"
    assert admin.describe_identity_pool_usage(IdentityPoolId=pool)["IdentityPoolUsage"] == usage_before


def test_credential_scope_must_match(server, victim):
    path = dataset_path(victim.pool, victim.identity, "data", "records")
    # Signed for another service.
    message = expect_raw_error(server.raw("GET", path, service="s3"), "NotAuthorizedException", 403)
    assert "s3" in message, message

    # The scope's date differs from x-amz-date.
    def yesterday_scope(h):
        auth = h["Authorization"]
        day = h["X-Amz-Date"][:8]
        h["Authorization"] = auth.replace(f"/{day}/", "/20200101/")

    message = expect_raw_error(server.raw("GET", path, mutate=yesterday_scope), "NotAuthorizedException", 403)
    assert "20200101" in message, message
    # Not AWS4-HMAC-SHA256, and no x-amz-date at all.
    expect_raw_error(server.raw("GET", path, mutate=lambda h: h.__setitem__("Authorization", "AWS AKID:signature")),
                     "NotAuthorizedException", 403)
    expect_raw_error(server.raw("GET", path, mutate=lambda h: h.pop("X-Amz-Date")), "NotAuthorizedException", 403)


def test_presigned_url_times(server, victim):
    admin = server.client()
    # Signed 20 minutes ago but valid for an hour: accepted (the 15-minute rule is for headers).
    with skewed_clock(-20 * 60):
        old = admin.generate_presigned_url("list_records", Params=victim.ids("data"), ExpiresIn=3600)
    response = requests.get(old, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["DatasetSyncCount"] == 1
    # Signed 20 minutes ago, valid for 10: expired.
    with skewed_clock(-20 * 60):
        expired = admin.generate_presigned_url("list_records", Params=victim.ids("data"), ExpiresIn=600)
    expect_raw_error(requests.get(expired, timeout=30), "NotAuthorizedException", 403)
    # Dated 20 minutes in the future.
    with skewed_clock(+20 * 60):
        future = admin.generate_presigned_url("list_records", Params=victim.ids("data"), ExpiresIn=3600)
    message = expect_raw_error(requests.get(future, timeout=30), "NotAuthorizedException", 403)
    assert "future" in message, message


# -- what the server's log says of a refusal ----------------------------------------------------

def _log_since(server, offset):
    with open(server.log_path, errors="replace") as f:
        f.seek(offset)
        return f.read()


def _refusals(server, offset, count, timeout=10):
    """(reason, key) of the request lines with `refused=` written since `offset`, once there are
    `count` of them (the line is written before the answer is sent, but through the process's
    output buffer)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [(re.search(r"\brefused=(\S+)", line).group(1), re.search(r"\bkey=(\S+)", line).group(1))
                 for line in _log_since(server, offset).splitlines() if "refused=" in line]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_refused_request_is_logged_with_why_and_its_key_never_the_secret(server, victim):
    path = dataset_path(victim.pool, victim.identity, "data", "records")
    wrong = "wrong-secret-" + new_id().split(":")[1]
    cases = [
        (dict(secret=wrong), ("signature", ADMIN_KEY)),                                   # a known key, a wrong secret
        (dict(key="AKIDNOBODYKNOWSTHIS", secret=wrong), ("unknown-key", "AKIDNOBODYKNOWSTHIS")),
        (dict(key="BAD!KEY<x>", secret=wrong), ("unknown-key", "<unreadable>")),          # nothing odd reaches the log
        (dict(region="eu-west-1"), ("region", ADMIN_KEY)),
        (dict(clock_skew=-20 * 60), ("expired", ADMIN_KEY)),
        (dict(sign=False), ("unsigned", "-")),
    ]
    offset = os.path.getsize(server.log_path)
    answers = []
    for kwargs, _ in cases:
        answers.append(expect_raw_error(server.raw("GET", path, query="lastSyncCount=0", **kwargs), "NotAuthorizedException", 403))
    # The caller learns nothing more than before: an unknown key and a wrong secret read alike.
    assert answers[0] == answers[1] == answers[2]
    assert _refusals(server, offset, len(cases)) == [expected for _, expected in cases]
    log = _log_since(server, offset)
    assert wrong not in log and ADMIN_SECRET not in log
    # A request that gets through is logged without a refusal.
    offset = os.path.getsize(server.log_path)
    assert server.raw("GET", path, query="lastSyncCount=0").status_code == 200
    assert "refused=" not in _log_since(server, offset)
