"""Each of the 17 Cognito Sync operations through boto3, with the values they must return."""

import datetime
import os
import subprocess
import time

import pytest

from conftest import BINARY, expect_error, new_id, strip, start_server

ALL_OPERATIONS = {
    "BulkPublish", "DeleteDataset", "DescribeDataset", "DescribeIdentityPoolUsage", "DescribeIdentityUsage",
    "GetBulkPublishDetails", "GetCognitoEvents", "GetIdentityPoolConfiguration", "ListDatasets",
    "ListIdentityPoolUsage", "ListRecords", "RegisterDevice", "SetCognitoEvents",
    "SetIdentityPoolConfiguration", "SubscribeToDataset", "UnsubscribeFromDataset", "UpdateRecords",
}


def test_model_has_exactly_the_17_operations(admin):
    assert set(admin.meta.service_model.operation_names) == ALL_OPERATIONS


def test_list_records_of_a_new_dataset(ds):
    page = ds.list("fresh")
    assert page["Records"] == []
    assert page["Count"] == 0
    assert page["DatasetSyncCount"] == 0
    assert page["DatasetExists"] is False
    assert page["DatasetDeletedAfterRequestedSyncCount"] is False
    assert page.get("NextToken") is None
    assert isinstance(page["SyncSessionToken"], str) and len(page["SyncSessionToken"]) > 20


def test_update_records_then_list_records(ds):
    token = ds.token("profile")
    device_time = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)
    out = ds.update("profile", [
        {"Op": "replace", "Key": "name", "Value": "Ada", "SyncCount": 0, "DeviceLastModifiedDate": device_time},
        {"Op": "replace", "Key": "lang", "Value": "en", "SyncCount": 0},
    ], token=token)
    by_key = {r["Key"]: r for r in out["Records"]}
    assert set(by_key) == {"name", "lang"}
    assert by_key["name"]["Value"] == "Ada" and by_key["lang"]["Value"] == "en"
    assert by_key["name"]["SyncCount"] == 1 and by_key["lang"]["SyncCount"] == 1
    assert by_key["name"]["DeviceLastModifiedDate"] == device_time
    assert by_key["name"]["LastModifiedBy"] == "admin:AKIDWIRETESTADMIN0001"

    page = ds.list("profile")
    assert page["Count"] == 2
    assert page["DatasetSyncCount"] == 1
    assert page["DatasetExists"] is True
    assert sorted((r["Key"], r["Value"], r["SyncCount"]) for r in page["Records"]) == [("lang", "en", 1), ("name", "Ada", 1)]
    assert ds.list("profile", LastSyncCount=1)["Records"] == []

    # A DeviceId becomes the author of the change.
    out = ds.update("profile", [{"Op": "replace", "Key": "lang", "Value": "fr", "SyncCount": 1}], DeviceId="device-42")
    assert out["Records"][0]["LastModifiedBy"] == "device-42"
    assert out["Records"][0]["SyncCount"] == 2
    page = ds.list("profile", LastSyncCount=1)
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in page["Records"]] == [("lang", "fr", 2)]
    assert page["LastModifiedBy"] == "device-42"


def test_update_records_with_no_patches_writes_nothing(ds):
    ds.put("d", {"a": "1"})
    out = ds.update("d", [])
    assert out["Records"] == []
    assert ds.list("d")["DatasetSyncCount"] == 1


def test_describe_dataset(ds):
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    ds.put("settings", {"k1": "value-1", "k2": "vé"})
    d = ds.describe("settings")
    assert d["DatasetName"] == "settings"
    assert d["IdentityId"] == ds.identity
    assert d["NumRecords"] == 2
    # Keys and values in UTF-8 bytes: k1 + value-1 + k2 + vé
    assert d["DataStorage"] == 2 + 7 + 2 + 3
    assert d["CreationDate"] >= before and d["LastModifiedDate"] >= d["CreationDate"]
    assert d["LastModifiedBy"] == "admin:AKIDWIRETESTADMIN0001"
    expect_error(ds.client.describe_dataset, "ResourceNotFoundException", 404, **ds.ids("never-written"))


def test_list_datasets(ds):
    assert ds.client.list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity)["Datasets"] == []
    for name in ["zeta", "alpha", "mid.dle"]:
        ds.put(name, {"x": name})
    out = ds.client.list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity)
    assert [d["DatasetName"] for d in out["Datasets"]] == ["alpha", "mid.dle", "zeta"]
    assert out["Count"] == 3
    assert out.get("NextToken") is None
    assert {d["DatasetName"]: d["DataStorage"] for d in out["Datasets"]} == {"alpha": 6, "mid.dle": 8, "zeta": 5}
    assert all(d["NumRecords"] == 1 and d["IdentityId"] == ds.identity for d in out["Datasets"])


def test_delete_dataset(ds):
    ds.put("gone", {"a": "1", "b": "22"})
    out = ds.client.delete_dataset(**ds.ids("gone"))["Dataset"]
    assert out["DatasetName"] == "gone" and out["NumRecords"] == 2 and out["DataStorage"] == 5
    expect_error(ds.client.describe_dataset, "ResourceNotFoundException", 404, **ds.ids("gone"))
    assert ds.client.list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity)["Datasets"] == []
    page = ds.list("gone")
    assert page["DatasetExists"] is False and page["Records"] == []
    # Deleting again: nothing to delete.
    expect_error(ds.client.delete_dataset, "ResourceNotFoundException", 404, **ds.ids("gone"))
    expect_error(ds.client.delete_dataset, "ResourceNotFoundException", 404, **ds.ids("never-was"))


def test_describe_identity_usage(ds):
    expect_error(ds.client.describe_identity_usage, "ResourceNotFoundException", 404,
                 IdentityPoolId=ds.pool, IdentityId=ds.identity)
    ds.put("a", {"k": "vv"})
    ds.put("b", {"kk": "v"})
    usage = ds.client.describe_identity_usage(IdentityPoolId=ds.pool, IdentityId=ds.identity)["IdentityUsage"]
    assert usage["IdentityId"] == ds.identity and usage["IdentityPoolId"] == ds.pool
    assert usage["DatasetCount"] == 2
    assert usage["DataStorage"] == 6
    assert isinstance(usage["LastModifiedDate"], datetime.datetime)
    ds.client.delete_dataset(**ds.ids("a"))
    usage = ds.client.describe_identity_usage(IdentityPoolId=ds.pool, IdentityId=ds.identity)["IdentityUsage"]
    assert usage["DatasetCount"] == 1
    assert usage["DataStorage"] == 3


def test_describe_identity_pool_usage(admin, ds):
    expect_error(admin.describe_identity_pool_usage, "ResourceNotFoundException", 404, IdentityPoolId=ds.pool)
    other = new_id()
    ds.put("a", {"k": "12345"})        # 1 ListRecords (one session) + 1 update
    ds.list("a")                       # another session
    ds2 = type(ds)(admin, ds.pool, other)
    ds2.put("b", {"kk": "v"})          # a third session
    usage = admin.describe_identity_pool_usage(IdentityPoolId=ds.pool)["IdentityPoolUsage"]
    assert usage["IdentityPoolId"] == ds.pool
    assert usage["DataStorage"] == 6 + 3
    assert usage["SyncSessionsCount"] == 3
    assert isinstance(usage["LastModifiedDate"], datetime.datetime)


def test_list_identity_pool_usage(admin, ds):
    ds.put("a", {"key": "value"})
    found = {}
    token = None
    while True:
        kw = {"MaxResults": 50}
        if token:
            kw["NextToken"] = token
        page = admin.list_identity_pool_usage(**kw)
        assert page["Count"] == len(page["IdentityPoolUsages"])
        for u in page["IdentityPoolUsages"]:
            found[u["IdentityPoolId"]] = u
        token = page.get("NextToken")
        if not token:
            break
    assert found[ds.pool]["DataStorage"] == 8
    assert found[ds.pool]["SyncSessionsCount"] == 1


def test_register_device(admin, pool, identity):
    ids = dict(IdentityPoolId=pool, IdentityId=identity)
    first = admin.register_device(**ids, Platform="GCM", Token="token-1")["DeviceId"]
    assert isinstance(first, str) and 1 <= len(first) <= 256
    assert admin.register_device(**ids, Platform="GCM", Token="token-1")["DeviceId"] == first
    other_token = admin.register_device(**ids, Platform="GCM", Token="token-2")["DeviceId"]
    other_platform = admin.register_device(**ids, Platform="APNS", Token="token-1")["DeviceId"]
    assert len({first, other_token, other_platform}) == 3
    # A token belongs to one device: registered by another identity (the next user on the
    # phone), it is the same device, now logged in as that identity.
    other_identity = admin.register_device(IdentityPoolId=pool, IdentityId=new_id(), Platform="GCM", Token="token-1")["DeviceId"]
    assert other_identity == first
    WEBHOOK = dict(Platform="WEBHOOK", Token="https://example.com/d")  # not a Cognito platform
    expect_error(admin.register_device, "InvalidParameterException", 400, **ids, **WEBHOOK)
    for platform in ["APNS_SANDBOX", "ADM"]:
        assert admin.register_device(**ids, Platform=platform, Token="t")["DeviceId"]
    expect_error(admin.register_device, "InvalidParameterException", 400, **ids, Platform="WNS", Token="token-1")


def test_subscribe_and_unsubscribe(admin, ds):
    device = admin.register_device(IdentityPoolId=ds.pool, IdentityId=ds.identity, Platform="APNS", Token="apns-1")["DeviceId"]
    ds.put("news", {"a": "1"})
    out = admin.subscribe_to_dataset(**ds.ids("news"), DeviceId=device)
    assert out["ResponseMetadata"]["HTTPStatusCode"] == 200 and strip(out) == {}
    # Subscribing again is harmless.
    assert admin.subscribe_to_dataset(**ds.ids("news"), DeviceId=device)["ResponseMetadata"]["HTTPStatusCode"] == 200
    out = admin.unsubscribe_from_dataset(**ds.ids("news"), DeviceId=device)
    assert out["ResponseMetadata"]["HTTPStatusCode"] == 200 and strip(out) == {}

    # A device nobody registered, and one registered to another identity.
    expect_error(admin.subscribe_to_dataset, "ResourceNotFoundException", 404, **ds.ids("news"), DeviceId="no-such-device")
    expect_error(admin.unsubscribe_from_dataset, "ResourceNotFoundException", 404, **ds.ids("news"), DeviceId="no-such-device")
    foreign = admin.register_device(IdentityPoolId=ds.pool, IdentityId=new_id(), Platform="APNS", Token="apns-1")["DeviceId"]
    expect_error(admin.subscribe_to_dataset, "ResourceNotFoundException", 404, **ds.ids("news"), DeviceId=foreign)


def test_identity_pool_configuration(admin, pool):
    out = admin.get_identity_pool_configuration(IdentityPoolId=pool)
    assert strip(out) == {"IdentityPoolId": pool}

    push = {"ApplicationArns": ["arn:aws:sns:us-east-1:123456789012:app/GCM/my-app_1.0"],
            "RoleArn": "arn:aws:iam::123456789012:role/push-role"}
    streams = {"StreamName": "my-stream", "RoleArn": "arn:aws:iam::123456789012:role/streams-role",
               "StreamingStatus": "ENABLED"}
    out = admin.set_identity_pool_configuration(IdentityPoolId=pool, PushSync=push, CognitoStreams=streams)
    assert strip(out) == {"IdentityPoolId": pool, "PushSync": push, "CognitoStreams": streams}
    assert strip(admin.get_identity_pool_configuration(IdentityPoolId=pool)) == strip(out)

    # Setting one part keeps the other.
    streams2 = {"StreamName": "other-stream", "StreamingStatus": "DISABLED"}
    out = admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams=streams2)
    assert strip(out) == {"IdentityPoolId": pool, "PushSync": push, "CognitoStreams": streams2}
    expected = strip(admin.get_identity_pool_configuration(IdentityPoolId=pool))
    assert expected == strip(out)

    bad = [
        dict(PushSync={"ApplicationArns": ["arn:aws:sns:us-east-1:123:app/gcm/lowercase-platform"]}),
        dict(PushSync={"ApplicationArns": ["not-an-arn"]}),
        dict(PushSync={"RoleArn": "arn:aws:iam::1:user/someone-else"}),
        dict(PushSync={"RoleArn": "arn:aws:iam::x:role/someone-else"}),
        dict(PushSync={"RoleArn": "arn:aws:iam::123456789012:user/someone"}),
        dict(CognitoStreams={"StreamName": "s", "StreamingStatus": "PAUSED"}),
        dict(CognitoStreams={"StreamName": "s" * 129}),
    ]
    for params in bad:
        expect_error(admin.set_identity_pool_configuration, "InvalidParameterException", 400, IdentityPoolId=pool, **params)
    assert strip(admin.get_identity_pool_configuration(IdentityPoolId=pool)) == expected
    # The shortest valid role ARN (20 characters) is accepted.
    out = admin.set_identity_pool_configuration(IdentityPoolId=pool, PushSync={"RoleArn": "arn:aws:iam::1:role/"})
    assert out["PushSync"] == {"RoleArn": "arn:aws:iam::1:role/"}


def test_cognito_events(admin, pool):
    assert strip(admin.get_cognito_events(IdentityPoolId=pool)) == {"Events": {}}
    lam = "arn:aws:lambda:us-east-1:123456789012:function:on-sync"
    out = admin.set_cognito_events(IdentityPoolId=pool, Events={"SyncTrigger": lam})
    assert out["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert admin.get_cognito_events(IdentityPoolId=pool)["Events"] == {"SyncTrigger": lam}
    expect_error(admin.set_cognito_events, "InvalidParameterException", 400, IdentityPoolId=pool,
                 Events={"SyncTrigger": lam, "Other": lam})
    expect_error(admin.set_cognito_events, "InvalidParameterException", 400, IdentityPoolId=pool,
                 Events={"OnCreate": lam})
    assert admin.get_cognito_events(IdentityPoolId=pool)["Events"] == {"SyncTrigger": lam}
    admin.set_cognito_events(IdentityPoolId=pool, Events={})
    assert admin.get_cognito_events(IdentityPoolId=pool)["Events"] == {}


@pytest.fixture(scope="module")
def slow_publish_server(tmp_root):
    s = start_server(tmp_root, "slow-publish", ["--fast", "--bulk-publish-min-seconds", "2"])
    yield s
    assert s.stop(timeout=10) == 0


def test_bulk_publish_state_machine(slow_publish_server):
    admin = slow_publish_server.client()
    pool = new_id()
    details = admin.get_bulk_publish_details(IdentityPoolId=pool)
    assert details["IdentityPoolId"] == pool
    assert details["BulkPublishStatus"] == "NOT_STARTED"
    assert "BulkPublishStartTime" not in details and "BulkPublishCompleteTime" not in details

    # No CognitoStreams stream configured.
    expect_error(admin.bulk_publish, "InvalidParameterException", 400, IdentityPoolId=pool)
    assert admin.get_bulk_publish_details(IdentityPoolId=pool)["BulkPublishStatus"] == "NOT_STARTED"

    # Streaming disabled: bulk publish fails as the model documents.
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={"StreamName": "kinesis-stream", "StreamingStatus": "DISABLED"})
    expect_error(admin.bulk_publish, "InvalidParameterException", 400, IdentityPoolId=pool)
    assert admin.get_bulk_publish_details(IdentityPoolId=pool)["BulkPublishStatus"] == "NOT_STARTED"

    # The stream's sink: a folder of JSON lines (the run publishes the pool's datasets there).
    out = subprocess.run([BINARY, "streams", "configure", "--data", slow_publish_server.data_dir, "--stream-name", "kinesis-stream",
                          "--directory", os.path.join(slow_publish_server.data_dir, "..", "slow-publish-sink")], capture_output=True)
    assert out.returncode == 0, out.stderr
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={
        "StreamName": "kinesis-stream", "RoleArn": "arn:aws:iam::123456789012:role/streams", "StreamingStatus": "ENABLED"})
    started = time.monotonic()
    assert strip(admin.bulk_publish(IdentityPoolId=pool)) == {"IdentityPoolId": pool}
    details = admin.get_bulk_publish_details(IdentityPoolId=pool)
    assert details["BulkPublishStatus"] == "IN_PROGRESS"
    assert isinstance(details["BulkPublishStartTime"], datetime.datetime)
    assert "BulkPublishCompleteTime" not in details

    # While it runs: DuplicateRequestException.
    expect_error(admin.bulk_publish, "DuplicateRequestException", 400, IdentityPoolId=pool)
    assert time.monotonic() - started < 2, "the duplicate check ran too late to see IN_PROGRESS"

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        details = admin.get_bulk_publish_details(IdentityPoolId=pool)
        if details["BulkPublishStatus"] != "IN_PROGRESS":
            break
        time.sleep(0.2)
    assert details["BulkPublishStatus"] == "SUCCEEDED"
    assert time.monotonic() - started >= 1.9
    assert details["BulkPublishCompleteTime"] >= details["BulkPublishStartTime"]
    assert "FailureMessage" not in details

    # Within 24 hours of a success: AlreadyStreamedException, state unchanged.
    expect_error(admin.bulk_publish, "AlreadyStreamedException", 400, IdentityPoolId=pool)
    assert admin.get_bulk_publish_details(IdentityPoolId=pool)["BulkPublishStatus"] == "SUCCEEDED"
