"""Cognito's limits: 20 datasets per identity, 1024 records per dataset, 1 MB per dataset,
values up to 1,048,575 characters, keys 1-1024 characters. Over a limit nothing is written."""

import json

from conftest import dataset_path, expect_error, expect_raw_error

MAX_VALUE = 1_048_575
MAX_DATASET_BYTES = 1_048_576


def test_twenty_first_dataset(ds):
    for i in range(20):
        ds.put(f"ds{i:02d}", {"k": "v"})
    listed = ds.client.list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity, MaxResults=50)
    assert listed["Count"] == 20
    message = expect_error(ds.update, "LimitExceededException", 400, "ds20",
                           [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])
    assert "20" in message, message
    expect_error(ds.client.describe_dataset, "ResourceNotFoundException", 404, **ds.ids("ds20"))
    page = ds.list("ds20")
    assert page["DatasetExists"] is False and page["DatasetSyncCount"] == 0
    assert ds.client.list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity, MaxResults=50)["Count"] == 20
    usage = ds.client.describe_identity_usage(IdentityPoolId=ds.pool, IdentityId=ds.identity)["IdentityUsage"]
    assert usage["DatasetCount"] == 20
    # Writing to one of the 20 still works; after a delete there is room for a new one.
    assert ds.put("ds05", {"k2": "v"})["Records"][0]["SyncCount"] == 2
    ds.client.delete_dataset(**ds.ids("ds00"))
    assert ds.put("ds20", {"k": "v"})["Records"][0]["SyncCount"] == 1
    expect_error(ds.update, "LimitExceededException", 400, "ds21",
                 [{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])


def test_value_over_the_limit(ds):
    ds.put("big", {"small": "1"})
    before = ds.snapshot("big")
    message = expect_error(ds.update, "LimitExceededException", 400, "big",
                           [{"Op": "replace", "Key": "small", "Value": "2", "SyncCount": 1},
                            {"Op": "replace", "Key": "v", "Value": "x" * (MAX_VALUE + 1), "SyncCount": 0}])
    assert str(MAX_VALUE) in message, message
    assert ds.snapshot("big") == before


def test_value_at_the_limit_fills_the_dataset_exactly(ds):
    # A 1-character key and a 1,048,575-character value are exactly 1 MiB.
    out = ds.update("full", [{"Op": "replace", "Key": "k", "Value": "x" * MAX_VALUE, "SyncCount": 0}])
    assert out["Records"][0]["SyncCount"] == 1
    d = ds.describe("full")
    assert d["DataStorage"] == MAX_DATASET_BYTES and d["NumRecords"] == 1
    # Not one byte more.
    before = ds.snapshot("full")
    expect_error(ds.update, "LimitExceededException", 400, "full",
                 [{"Op": "replace", "Key": "k2", "Value": "", "SyncCount": 0}])
    assert ds.snapshot("full") == before
    # Shrinking and adding in one update is judged on the result.
    out = ds.update("full", [{"Op": "replace", "Key": "k", "Value": "x" * (MAX_VALUE - 4), "SyncCount": 1},
                             {"Op": "replace", "Key": "k2", "Value": "yy", "SyncCount": 0}])
    assert [r["SyncCount"] for r in out["Records"]] == [2, 2]
    assert ds.describe("full")["DataStorage"] == MAX_DATASET_BYTES


def test_dataset_over_one_megabyte(ds):
    ds.update("mb", [{"Op": "replace", "Key": "a", "Value": "a" * 600_000, "SyncCount": 0}])
    before = ds.snapshot("mb")
    assert before["described"][1] == 600_001
    message = expect_error(ds.update, "LimitExceededException", 400, "mb",
                           [{"Op": "replace", "Key": "b", "Value": "b" * 600_000, "SyncCount": 0}])
    assert str(MAX_DATASET_BYTES) in message, message
    assert ds.snapshot("mb") == before
    # Multi-byte characters count in UTF-8 bytes: 300,000 "é" are 600,000 bytes.
    expect_error(ds.update, "LimitExceededException", 400, "mb",
                 [{"Op": "replace", "Key": "b", "Value": "é" * 300_000, "SyncCount": 0}])
    assert ds.snapshot("mb") == before


def test_1025_records(ds):
    patches = [{"Op": "replace", "Key": f"key{i:04d}", "Value": "v", "SyncCount": 0} for i in range(1024)]
    out = ds.update("many", patches)
    assert len(out["Records"]) == 1024 and {r["SyncCount"] for r in out["Records"]} == {1}
    assert ds.describe("many")["NumRecords"] == 1024
    before = ds.snapshot("many")
    message = expect_error(ds.update, "LimitExceededException", 400, "many",
                           [{"Op": "replace", "Key": "key1024", "Value": "v", "SyncCount": 0}])
    assert "1024" in message, message
    assert ds.snapshot("many") == before
    # Replacing one record and removing another keeps the count within the limit.
    out = ds.update("many", [{"Op": "remove", "Key": "key0000", "SyncCount": 1},
                             {"Op": "replace", "Key": "key1024", "Value": "v", "SyncCount": 0}])
    assert [r["SyncCount"] for r in out["Records"]] == [2, 2]
    assert ds.describe("many")["NumRecords"] == 1024


def test_1025_records_in_one_update(ds):
    patches = [{"Op": "replace", "Key": f"k{i}", "Value": "", "SyncCount": 0} for i in range(1025)]
    expect_error(ds.update, "LimitExceededException", 400, "toomany", patches)
    page = ds.list("toomany")
    assert page["DatasetExists"] is False and page["Records"] == [] and page["DatasetSyncCount"] == 0
    expect_error(ds.client.describe_dataset, "ResourceNotFoundException", 404, **ds.ids("toomany"))


def test_key_length(server, ds):
    ds.put("keys", {"x": "1"})
    before = ds.snapshot("keys")
    longest = "k" * 1024
    out = ds.update("keys", [{"Op": "replace", "Key": longest, "Value": "v", "SyncCount": 0}])
    assert out["Records"][0]["Key"] == longest and out["Records"][0]["SyncCount"] == 2
    assert ds.records("keys", after=1) == {longest: ("v", 2)}
    before = ds.snapshot("keys")
    # 1025 characters and the empty key (boto3 checks the minimum itself, so send it raw).
    path = dataset_path(ds.pool, ds.identity, "keys")
    for key in ["k" * 1025, ""]:
        body = {"SyncSessionToken": ds.token("keys"),
                "RecordPatches": [{"Op": "replace", "Key": key, "Value": "v", "SyncCount": 0}]}
        response = server.raw("POST", path, json.dumps(body))
        # The model bounds RecordKey to 1-1024; SyncLedger answers InvalidParameterException.
        expect_raw_error(response, "InvalidParameterException", 400)
    assert ds.snapshot("keys") == before
