"""Issue 8's rules over HTTP: one rule set for every path into a user's stream, segments judged
by their header before they cost anything, numbers at their limits, paths as sent, and what the
real Cognito SDKs' sync loops need. Segments are built byte for byte here (fuzz_http's builder),
so that a test can send what a hostile client would."""

import json
import os
import subprocess
import time

import fuzz_http as fz
from conftest import (BINARY, Dataset, api_path, dataset_path, expect_error, expect_raw_error, new_id, start_server)

U64_MAX = "18446744073709551615"


def stream_path(pool, identity, dataset):
    return "/segments/streams/" + "/".join(api_path(pool, identity, dataset).split("/")[2:])


def offline_segment(pool, identity, dataset, entries, previous=None, frame=None, **overrides):
    """The bytes of a stream segment of `entries` (EntrySpec) for that dataset."""
    header, _ = fz.build_segment(entries, 1, key=fz.stream_key(pool, identity, dataset), previous=previous, frame=frame,
                                 header_overrides=overrides)
    return header.encode()


def session(admin, pool, identity, dataset):
    """`syncSessionToken=…` for that dataset, from ListRecords (offline merges need one)."""
    return "syncSessionToken=" + admin.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)["SyncSessionToken"]


def identity_credential(server, pool, identity):
    cred = server.mint(pool, identity)
    return dict(key=cred["AccessKeyId"], secret=cred["SecretAccessKey"])


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# -- crashes from arithmetic --------------------------------------------------------------------

def test_numbers_at_their_limits_do_not_crash(server, admin, pool, identity):
    Dataset(admin, pool, identity).put("d", {"a": "1"})
    feed = server.raw("GET", "/segments/feed", query=f"after={U64_MAX}")
    assert feed.status_code == 204, feed.text
    stream = server.raw("GET", stream_path(pool, identity, "d"), query=f"after={U64_MAX}&maxBytes={U64_MAX}")
    assert stream.status_code == 204, stream.text
    as_identity = identity_credential(server, pool, identity)
    assert server.raw("GET", stream_path(pool, identity, "d"), query=f"after={U64_MAX}", **as_identity).status_code == 204
    for bad in ["18446744073709551616", "-1", "1e3", ""]:
        expect_raw_error(server.raw("GET", "/segments/feed", query=f"after={bad}"), "InvalidParameterException", 400)
    assert server.get("/health").status_code == 200


# -- every way into a user's stream obeys the same rules -----------------------------------------

def test_a_plain_merge_is_for_admins_and_refused_before_decoding(server, pool, identity):
    as_identity = identity_credential(server, pool, identity)
    # Not even a segment: the scope is checked first, so the answer is 403, not "bad segment".
    refused = server.raw("POST", "/segments", body=b"not a segment at all", **as_identity)
    expect_raw_error(refused, "NotAuthorizedException", 403)
    entries = [fz.EntrySpec(offset=1, time=int(time.time() * 1000), events=[("put", "k", "v")])]
    body = offline_segment(pool, identity, "d", entries)
    expect_raw_error(server.raw("POST", "/segments", body=body, **as_identity), "NotAuthorizedException", 403)
    # Another identity's stream, even in offline mode: refused from the header alone.
    other = offline_segment(pool, new_id(), "d", entries)
    expect_raw_error(server.raw("POST", "/segments", body=other, query="mode=offline", **as_identity),
                     "NotAuthorizedException", 403)


def test_an_offline_merge_takes_changes_not_entries(server, admin, pool, identity):
    """The fast-forward branch used to append the device's entries as sent: any author, any
    time, any size. Now the server writes its own entries through UpdateRecords' rules."""
    as_identity = identity_credential(server, pool, identity)
    forged = [fz.EntrySpec(offset=1, time=1, author="someone-else", device="not-me",
                           events=[("put", "k", "v")])]
    merged = server.raw("POST", "/segments", body=offline_segment(pool, identity, "d", forged),
                        query="mode=offline&deviceId=phone&" + session(admin, pool, identity, "d"), **as_identity)
    assert merged.status_code == 200, merged.text
    assert merged.json()["FastForward"] is True
    record = Dataset(admin, pool, identity).list("d")["Records"][0]
    assert record["LastModifiedBy"] == "phone"                      # the caller's device, not the entry's
    assert record["LastModifiedDate"].timestamp() > time.time() - 600   # the server's time, not 1970
    # Over a limit: 1,025 records in one device entry (the fast-forward branch).
    many = [fz.EntrySpec(offset=2, time=1, events=[("put", f"k{i}", "v") for i in range(1025)])]
    head = server.raw("GET", stream_path(pool, identity, "d"), **as_identity)
    previous = fz.Header.parse(head.content).last
    over = server.raw("POST", "/segments", body=offline_segment(pool, identity, "d", many, previous=previous),
                      query="mode=offline&" + session(admin, pool, identity, "d"), **as_identity)
    expect_raw_error(over, "LimitExceededException", 400)
    # A key over 1,024 characters, an empty key: the same refusals as UpdateRecords.
    for key, error in [("k" * 1025, "InvalidParameterException"), ("", "InvalidParameterException")]:
        bad = [fz.EntrySpec(offset=2, time=1, events=[("put", key, "v")])]
        expect_raw_error(server.raw("POST", "/segments", body=offline_segment(pool, identity, "d", bad, previous=previous),
                                    query="mode=offline&" + session(admin, pool, identity, "d"), **as_identity), error, 400)
    assert Dataset(admin, pool, identity).list("d")["DatasetSyncCount"] == 1


def test_a_decompression_bomb_is_refused_from_its_header(server, pool, identity):
    as_identity = identity_credential(server, pool, identity)
    pid = server.process.pid
    before = rss_kib(pid)
    # A ~8 KB request whose entries would unpack to 256 MiB.
    bomb = offline_segment(pool, identity, "d", [fz.EntrySpec(offset=1, time=1)],
                           frame=lambda plain: fz.zstd_rle_frame(256 << 20), plain_size=256 << 20, count=1)
    assert len(bomb) < 16 << 10
    for _ in range(5):
        expect_raw_error(server.raw("POST", "/segments", body=bomb, query="mode=offline", **as_identity),
                         "InvalidParameterException", 400)
    assert rss_kib(pid) - before < 64 << 10, "the server unpacked the bomb"


def test_an_unknown_segment_format_is_a_400(server):
    good, _ = fz.build_segment([fz.EntrySpec(offset=1, time=1, events=[("put", "k", "v")])], 1,
                               key=fz.stream_key(new_id(), new_id(), "d"))
    for version in (0, 3, 255, 65535):
        good.version = version
        response = server.raw("POST", "/segments", body=good.encode())
        assert "format version" in expect_raw_error(response, "InvalidParameterException", 400)


def test_dot_names_and_paths_not_as_signed_are_refused(server, admin, pool, identity):
    for name in (".", ".."):
        response = server.raw("GET", dataset_path(pool, identity, name, "records"))
        assert response.status_code in (400, 404), response.text
    good = dataset_path(pool, identity, "data", "records")
    for path in (good.replace("/datasets/", "/datasets/./"), good.replace("/datasets/", "//datasets/"),
                 good.replace("/records", "/records/../records")):
        response = server.raw("GET", path)
        assert "segment" in expect_raw_error(response, "InvalidParameterException", 400)


# -- secrets ---------------------------------------------------------------------------------

def test_requests_without_host_or_for_another_region_are_refused(server, pool, identity):
    path = dataset_path(pool, identity, "d", "records")
    expect_raw_error(server.raw("GET", path, region="eu-west-1"), "NotAuthorizedException", 403)
    # http.client always sends a Host header; drop it by hand.
    import socket
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


def test_errors_carry_a_request_id(server, pool, identity):
    response = server.raw("GET", dataset_path(pool, identity, "d", "records"), key="AKIDNOBODYKNOWSTHIS", secret="x")
    assert response.status_code == 403 and response.headers.get("x-amzn-RequestId")


def test_the_data_directory_is_private(server):
    assert os.stat(server.data_dir).st_mode & 0o777 == 0o700
    for root, dirs, files in os.walk(server.data_dir):
        for d in dirs:
            assert os.stat(os.path.join(root, d)).st_mode & 0o777 == 0o700, d
        for f in files:
            assert os.stat(os.path.join(root, f)).st_mode & 0o777 == 0o600, f


# -- the real clients' sync loops ------------------------------------------------------------

def test_a_device_that_never_synced_can_sync_a_deleted_and_rewritten_dataset(ds):
    """The JavaScript SDK cancels its sync when DatasetDeletedAfterRequestedSyncCount is true,
    and Android wipes the local copy; a device with LastSyncCount 0 has nothing to wipe."""
    ds.put("game", {"level": "1"})
    ds.client.delete_dataset(**ds.ids("game"))
    ds.put("game", {"level": "2"})
    page = ds.list("game", LastSyncCount=0)
    assert page["DatasetDeletedAfterRequestedSyncCount"] is False
    assert [(r["Key"], r["Value"]) for r in page["Records"]] == [("level", "2")]
    assert ds.list("game", LastSyncCount=1)["DatasetDeletedAfterRequestedSyncCount"] is True


def test_a_remove_with_an_empty_value_is_accepted(ds):
    """The JavaScript SDK sends a removal as Op=remove with Value ""."""
    ds.put("prefs", {"theme": "dark"})
    out = ds.update("prefs", [{"Op": "remove", "Key": "theme", "Value": "", "SyncCount": 1}])
    assert out["Records"][0]["SyncCount"] == 2 and "Value" not in out["Records"][0]
    assert ds.records("prefs") == {"theme": (None, 2)}


def test_secrets_can_live_outside_the_data_directory(tmp_root):
    """`--secrets DIR` (or $SYNCLEDGER_SECRETS): a backup of the data directory then carries none."""
    secrets = os.path.join(tmp_root, "elsewhere-secrets")
    server = start_server(tmp_root, "secrets-apart", ["--fast", "--secrets", secrets])
    try:
        pool, identity = new_id(), new_id()
        out = subprocess.run([BINARY, "credentials", "create", "--data", server.data_dir, "--secrets", secrets,
                              "--identity-pool-id", pool, "--identity-id", identity], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        cred = json.loads(out.stdout)
        client = server.client(cred["AccessKeyId"], cred["SecretAccessKey"])
        assert client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d")["Records"] == []
        assert not os.path.exists(os.path.join(server.data_dir, "secrets"))
        assert os.stat(secrets).st_mode & 0o777 == 0o700
        for folder, _, names in os.walk(server.data_dir):  # the push outbox's folder too
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    assert cred["SecretAccessKey"].encode() not in f.read(), os.path.join(folder, name)
    finally:
        server.stop()



def test_an_identity_pulls_at_most_a_mebibyte_at_a_time(server, admin, pool, identity):
    d = Dataset(admin, pool, identity)
    for i in range(5):
        d.put("big", {"v": str(i) * 300_000})                 # five entries of ~300 KB
    path = stream_path(pool, identity, "big")
    as_identity = identity_credential(server, pool, identity)
    mine = fz.Header.parse(server.raw("GET", path, query="after=0&maxBytes=67108864", **as_identity).content)
    everything = fz.Header.parse(server.raw("GET", path, query="after=0&maxBytes=67108864").content)
    assert everything.count == 5
    assert mine.count < 5 and mine.plain_size < (1 << 20) + 310_000, (mine.count, mine.plain_size)
