"""Sync semantics through boto3: sync counts, conflicts, delete and re-create, paging, sync
session tokens."""

import time

import pytest

from conftest import Dataset, expect_error, new_id, start_server


def tamper(token):
    """The token with one character of its payload changed."""
    i = len(token) // 3
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]


# -- sync counts -----------------------------------------------------------------------------

def test_sync_count_rises_by_exactly_one_per_update(ds):
    counts = {}
    expected_count = 0
    plan = [
        [("replace", "a", "1"), ("replace", "b", "1"), ("replace", "c", "1")],
        [("replace", "a", "2")],
        [("remove", "b", None), ("replace", "d", "1")],
        [("replace", "a", "3"), ("replace", "c", "2"), ("replace", "b", "back")],
        [("remove", "d", None)],
    ]
    history = []
    for step in plan:
        page = ds.list("counts")
        assert page["DatasetSyncCount"] == expected_count
        patches = []
        for op, key, value in step:
            p = {"Op": op, "Key": key, "SyncCount": counts.get(key, 0)}
            if value is not None:
                p["Value"] = value
            patches.append(p)
        out = ds.update("counts", patches, token=page["SyncSessionToken"])
        expected_count += 1
        assert [r["Key"] for r in out["Records"]] == [k for _, k, _ in step]
        assert all(r["SyncCount"] == expected_count for r in out["Records"]), out["Records"]
        for op, key, value in step:
            counts[key] = expected_count
        history.append((expected_count, {k for _, k, _ in step}))
        assert ds.list("counts")["DatasetSyncCount"] == expected_count

    assert expected_count == 5
    # Every record carries the count of its last change; removed ones have no Value.
    records = ds.records("counts")
    assert records == {"a": ("3", 4), "b": ("back", 4), "c": ("2", 4), "d": (None, 5)}
    # lastSyncCount is exclusive: after k, exactly the keys changed in k+1..5.
    for k in range(0, 6):
        changed_after = {key for count, keys in history if count > k for key in keys}
        assert set(ds.records("counts", after=k)) == changed_after, k
    d = ds.describe("counts")
    assert d["NumRecords"] == 3
    assert d["DataStorage"] == len("a3") + len("bback") + len("c2")


def test_conflict_between_two_clients(server, admin, pool, identity):
    cred_a = server.mint(pool, identity)
    phone = server.client_for(cred_a)
    tablet = server.client_for(server.mint(pool, identity))
    d = Dataset(admin, pool, identity)
    d.put("shared", {"color": "red", "size": "M"})
    d.put("shared", {"color": "green"})
    d.put("shared", {"color": "blue"})              # color is now at sync count 3

    # Both devices sync and see color at 3.
    phone_page = d.list("shared", client=phone)
    tablet_page = d.list("shared", client=tablet)
    assert {r["Key"]: r["SyncCount"] for r in tablet_page["Records"]} == {"color": 3, "size": 1}

    out = d.update("shared", [{"Op": "replace", "Key": "color", "Value": "phone", "SyncCount": 3}],
                   token=phone_page["SyncSessionToken"], client=phone)
    assert out["Records"][0]["SyncCount"] == 4
    before = d.snapshot("shared")

    # The tablet still believes color is at 3: its whole update is refused.
    message = expect_error(d.update, "ResourceConflictException", 409, "shared", [
        {"Op": "replace", "Key": "size", "Value": "L", "SyncCount": 1},
        {"Op": "replace", "Key": "color", "Value": "tablet", "SyncCount": 3},
    ], token=tablet_page["SyncSessionToken"], client=tablet)
    assert "color" in message and "3" in message and "4" in message, message
    assert "size" not in message, message
    assert d.snapshot("shared") == before
    assert d.records("shared") == {"color": ("phone", 4), "size": ("M", 1)}

    # After syncing again it can write on top of the phone's change.
    page = d.list("shared", client=tablet, LastSyncCount=3)
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in page["Records"]] == [("color", "phone", 4)]
    out = d.update("shared", [{"Op": "replace", "Key": "color", "Value": "tablet", "SyncCount": 4}],
                   token=page["SyncSessionToken"], client=tablet)
    assert out["Records"][0]["SyncCount"] == 5


def test_new_record_with_nonzero_sync_count_conflicts(ds):
    ds.put("d", {"a": "1"})
    before = ds.snapshot("d")
    message = expect_error(ds.update, "ResourceConflictException", 409, "d",
                           [{"Op": "replace", "Key": "new", "Value": "x", "SyncCount": 7}])
    assert "new" in message and "7" in message and "0" in message, message
    # A record that exists, sent as new.
    message = expect_error(ds.update, "ResourceConflictException", 409, "d",
                           [{"Op": "remove", "Key": "a", "SyncCount": 0}])
    assert "a" in message and "1" in message, message
    assert ds.snapshot("d") == before


def test_delete_then_recreate_continues_counts(ds):
    ds.put("cycle", {"a": "1", "b": "2"})
    ds.put("cycle", {"a": "11"})
    assert ds.list("cycle")["DatasetSyncCount"] == 2
    created_first = ds.describe("cycle")["CreationDate"]

    ds.client.delete_dataset(**ds.ids("cycle"))
    expect_error(ds.client.describe_dataset, "ResourceNotFoundException", 404, **ds.ids("cycle"))
    after_delete = ds.list("cycle", LastSyncCount=2)
    assert after_delete["DatasetExists"] is False
    assert after_delete["DatasetDeletedAfterRequestedSyncCount"] is True
    assert after_delete["Records"] == []
    deleted_at = after_delete["DatasetSyncCount"]
    assert deleted_at == 3

    time.sleep(0.01)
    # The old records are gone: "a" is new again (SyncCount 0), and gets a count never used.
    out = ds.update("cycle", [{"Op": "replace", "Key": "a", "Value": "reborn", "SyncCount": 0}],
                    token=after_delete["SyncSessionToken"])
    assert out["Records"][0]["SyncCount"] == deleted_at + 1
    page = ds.list("cycle")
    assert page["DatasetExists"] is True
    assert page["DatasetSyncCount"] == deleted_at + 1
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in page["Records"]] == [("a", "reborn", 4)]
    # A device that never synced (LastSyncCount 0) is not told of the delete: the JavaScript and
    # Android SDKs would wipe their copy and cancel the sync on that flag alone, for ever.
    assert page["DatasetDeletedAfterRequestedSyncCount"] is False
    assert ds.list("cycle", LastSyncCount=2)["DatasetDeletedAfterRequestedSyncCount"] is True
    assert ds.list("cycle", LastSyncCount=3)["DatasetDeletedAfterRequestedSyncCount"] is False
    assert ds.list("cycle", LastSyncCount=4)["DatasetDeletedAfterRequestedSyncCount"] is False
    d = ds.describe("cycle")
    assert d["NumRecords"] == 1 and d["DataStorage"] == len("areborn")
    assert d["CreationDate"] > created_first

    # "b" is gone too: writing it as new works, with the next count.
    out = ds.update("cycle", [{"Op": "replace", "Key": "b", "Value": "2", "SyncCount": 0}])
    assert out["Records"][0]["SyncCount"] == 5
    # A stale count from before the delete conflicts.
    expect_error(ds.update, "ResourceConflictException", 409, "cycle",
                 [{"Op": "replace", "Key": "a", "Value": "x", "SyncCount": 2}])


# -- paging -----------------------------------------------------------------------------------

def test_list_records_paging(ds):
    ds.put("paged", {"k3": "v", "k1": "v", "k2": "v"})          # count 1
    ds.put("paged", {"k5": "v", "k4": "v"})                     # count 2
    ds.put("paged", {"k1": "w", "k6": "v", "k7": "v"})           # count 3
    expected_order = ["k2", "k3", "k4", "k5", "k1", "k6", "k7"]  # by sync count, then key

    pages, token = [], None
    while True:
        kw = {"MaxResults": 3}
        if token:
            kw["NextToken"] = token
        page = ds.list("paged", **kw)
        assert page["DatasetSyncCount"] == 3
        pages.append([r["Key"] for r in page["Records"]])
        assert page["Count"] == len(page["Records"])
        token = page.get("NextToken")
        if not token:
            break
    assert pages == [expected_order[0:3], expected_order[3:6], expected_order[6:]]

    # Paging with lastSyncCount.
    first = ds.list("paged", LastSyncCount=1, MaxResults=2)
    assert [r["Key"] for r in first["Records"]] == ["k4", "k5"]
    second = ds.list("paged", LastSyncCount=1, MaxResults=2, NextToken=first["NextToken"])
    assert [r["Key"] for r in second["Records"]] == ["k1", "k6"]
    third = ds.list("paged", LastSyncCount=1, MaxResults=2, NextToken=second["NextToken"])
    assert [r["Key"] for r in third["Records"]] == ["k7"]
    assert third.get("NextToken") is None

    # Tampered token, token for another lastSyncCount, token of another dataset.
    expect_error(ds.list, "InvalidParameterException", 400, "paged", LastSyncCount=1, MaxResults=2,
                 NextToken=tamper(first["NextToken"]))
    expect_error(ds.list, "InvalidParameterException", 400, "paged", LastSyncCount=0, MaxResults=2,
                 NextToken=first["NextToken"])
    ds.put("other", {"a": "1", "b": "2"})
    other = ds.list("other", MaxResults=1)
    assert other.get("NextToken")
    expect_error(ds.list, "InvalidParameterException", 400, "paged", MaxResults=1, NextToken=other["NextToken"])
    expect_error(ds.list, "InvalidParameterException", 400, "paged", NextToken="garbage")


def test_list_datasets_paging(admin, ds):
    names = ["d1", "d2", "d3", "d4", "d5", "d6"]
    for name in names:
        ds.put(name, {"k": name})
    admin.delete_dataset(**ds.ids("d3"))
    live = ["d1", "d2", "d4", "d5", "d6"]

    def page(**kw):
        return admin.list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity, **kw)

    got, token, sizes = [], None, []
    while True:
        kw = {"MaxResults": 2}
        if token:
            kw["NextToken"] = token
        p = page(**kw)
        assert p["Count"] == len(p["Datasets"])
        sizes.append(p["Count"])
        got += [d["DatasetName"] for d in p["Datasets"]]
        token = p.get("NextToken")
        if not token:
            break
    assert got == live
    assert sizes == [2, 2, 1]
    # An exact fit leaves no token for an empty page.
    p = page(MaxResults=5)
    assert [d["DatasetName"] for d in p["Datasets"]] == live and p.get("NextToken") is None

    first = page(MaxResults=2)
    expect_error(page, "InvalidParameterException", 400, MaxResults=2, NextToken=tamper(first["NextToken"]))
    expect_error(page, "InvalidParameterException", 400, MaxResults=2, NextToken="not-a-token")
    # Another identity's token.
    other = Dataset(admin, ds.pool, new_id())
    other.put("x1", {"k": "v"})
    other.put("x2", {"k": "v"})
    other_token = admin.list_datasets(IdentityPoolId=ds.pool, IdentityId=other.identity, MaxResults=1)["NextToken"]
    expect_error(page, "InvalidParameterException", 400, MaxResults=1, NextToken=other_token)


def test_list_identity_pool_usage_paging(admin):
    mine = sorted(new_id() for _ in range(3))
    for p in mine:
        Dataset(admin, p, new_id()).put("d", {"k": "v"})
    seen, token, pages = [], None, 0
    while True:
        kw = {"MaxResults": 2}
        if token:
            kw["NextToken"] = token
        page = admin.list_identity_pool_usage(**kw)
        pages += 1
        assert page["MaxResults"] == 2
        assert page["Count"] == len(page["IdentityPoolUsages"]) <= 2
        seen += [u["IdentityPoolId"] for u in page["IdentityPoolUsages"]]
        token = page.get("NextToken")
        if not token:
            break
    assert len(seen) == len(set(seen)), "a pool came twice"
    assert seen == sorted(seen)
    assert set(mine) <= set(seen)
    assert pages == (len(seen) + 1) // 2
    first = admin.list_identity_pool_usage(MaxResults=1)
    assert first["Count"] == 1 and first.get("NextToken")
    expect_error(admin.list_identity_pool_usage, "InvalidParameterException", 400,
                 MaxResults=1, NextToken=tamper(first["NextToken"]))
    # A records-page token is not a pools-page token.
    d = Dataset(admin, mine[0], new_id())
    d.put("d", {"a": "1", "b": "2"})
    records_token = d.list("d", MaxResults=1)["NextToken"]
    expect_error(admin.list_identity_pool_usage, "InvalidParameterException", 400, MaxResults=1, NextToken=records_token)


# -- sync session tokens ----------------------------------------------------------------------

def test_forged_and_foreign_session_tokens(ds):
    ds.put("mine", {"a": "1"})
    before = ds.snapshot("mine")
    patch = [{"Op": "replace", "Key": "a", "Value": "2", "SyncCount": 1}]
    good = ds.token("mine")

    for forged in ["forged", "abc.def", tamper(good), good + "x"]:
        message = expect_error(ds.update, "InvalidParameterException", 400, "mine", patch, token=forged)
        assert "token" in message.lower(), message
    # Another dataset's token, another identity's token, another pool's token.
    for other in [ds.token("theirs"), Dataset(ds.client, ds.pool, new_id()).token("mine"),
                  Dataset(ds.client, new_id(), ds.identity).token("mine")]:
        message = expect_error(ds.update, "InvalidParameterException", 400, "mine", patch, token=other)
        assert "another" in message, message
    # A paging token is not a session token.
    ds.put("mine", {"b": "1"})
    paging = ds.list("mine", MaxResults=1)["NextToken"]
    expect_error(ds.update, "InvalidParameterException", 400, "mine", patch, token=paging)
    after = ds.snapshot("mine")
    assert after["count"] == before["count"] + 1   # only the put of "b"
    assert ("a", "1", 1) in after["records"]

    # The genuine token still works, and more than once within its lifetime.
    assert ds.update("mine", patch, token=good)["Records"][0]["SyncCount"] == 3
    assert ds.update("mine", [{"Op": "replace", "Key": "a", "Value": "3", "SyncCount": 3}], token=good)["Records"][0]["SyncCount"] == 4


def test_list_records_echoes_a_live_session_token(ds):
    token = ds.token("echo")
    assert ds.list("echo", SyncSessionToken=token)["SyncSessionToken"] == token
    fresh = ds.list("echo", SyncSessionToken="bogus")["SyncSessionToken"]
    assert fresh != "bogus" and fresh != token


@pytest.fixture(scope="module")
def short_session_server(tmp_root):
    s = start_server(tmp_root, "short-session", ["--fast", "--session-lifetime", "1"])
    yield s
    assert s.stop(timeout=10) == 0


def test_expired_session_token(short_session_server):
    admin = short_session_server.client()
    d = Dataset(admin, new_id(), new_id())
    d.put("t", {"a": "1"})
    before = d.snapshot("t")
    token = d.token("t")
    time.sleep(1.3)
    message = expect_error(d.update, "InvalidParameterException", 400, "t",
                           [{"Op": "replace", "Key": "a", "Value": "2", "SyncCount": 1}], token=token)
    assert "expired" in message, message
    assert d.snapshot("t") == before
    # A fresh token works at once.
    out = d.update("t", [{"Op": "replace", "Key": "a", "Value": "2", "SyncCount": 1}])
    assert out["Records"][0]["SyncCount"] == 2
    # An expired token is not echoed by ListRecords.
    assert d.list("t", SyncSessionToken=token)["SyncSessionToken"] != token
