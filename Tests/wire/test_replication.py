"""Segments over HTTP and follower replication, with real processes and boto3 writes."""

import json
import signal
import time

from conftest import ADMIN_KEY, Dataset, api_path, new_id, start_server, expect_error

SEGMENT_TYPE = "application/vnd.syncledger.segment"


def digest(server):
    response = server.raw("GET", "/segments/digest")
    assert response.status_code == 200, response.text
    return response.json()


def wait_until(predicate, timeout=20, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def write_some(client, pool, identities, rounds, tag):
    for identity in identities:
        d = Dataset(client, pool, identity)
        for r in range(rounds):
            d.put("settings", {f"k{r % 3}": f"{tag}-{r}", "tag": tag})


def test_follower_stays_equal_to_its_leader_through_cuts_and_restarts(tmp_root):
    leader = start_server(tmp_root, "repl-leader", ["--fast"])
    follower = start_server(tmp_root, "repl-follower", ["--follow", leader.url])
    try:
        admin = leader.client()
        pool, identities = new_id(), [new_id() for _ in range(3)]
        write_some(admin, pool, identities, 4, "a")
        admin.register_device(IdentityPoolId=pool, IdentityId=identities[0], Platform="GCM", Token="tok")
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="the first catch-up")
        # The follower serves reads of what it replicated.
        f = Dataset(follower.client(), pool, identities[1])
        assert f.records("settings") == Dataset(admin, pool, identities[1]).records("settings")
        # It is read-only.
        expect_error(follower.client().delete_dataset, "NotAuthorizedException", 403,
                     IdentityPoolId=pool, IdentityId=identities[0], DatasetName="settings")
        # Its metrics show no lag once caught up.
        metrics = follower.metrics()
        assert "syncledger_replication_lag_entries 0" in metrics

        # Cut: kill the follower hard, write more, restart it on the same directory.
        follower.process.send_signal(signal.SIGKILL)
        follower.process.wait(timeout=10)
        follower.exit_code = -9
        write_some(admin, pool, identities, 5, "b")
        admin.delete_dataset(IdentityPoolId=pool, IdentityId=identities[2], DatasetName="settings")
        follower = start_server(tmp_root, "repl-follower", ["--follow", leader.url])
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="catch-up after a restart")
        after = digest(follower)
        assert after["Checkpoint"] == digest(leader)["Sequence"]

        # The leader goes away and comes back: the follower retries and catches up.
        assert leader.stop() == 0
        time.sleep(0.5)
        leader = start_server(tmp_root, "repl-leader", ["--fast"])
        follower.stop()
        follower = start_server(tmp_root, "repl-follower", ["--follow", leader.url])
        write_some(leader.client(), pool, identities[:1], 2, "c")
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="catch-up with a restarted leader")
    finally:
        follower.stop()
        leader.stop()


def test_segments_over_http(tmp_root, server, admin):
    pool, identity = new_id(), new_id()
    d = Dataset(admin, pool, identity)
    d.put("notes", {"a": "1"})
    d.put("notes", {"a": "2", "b": "3"})
    stream_path = "/segments/streams/" + "/".join(api_path(pool, identity, "notes").split("/")[2:])

    # A stream segment after offset 1, fetched by the identity's own credential.
    cred = server.mint(pool, identity)
    response = server.raw("GET", stream_path, query="after=1", key=cred["AccessKeyId"], secret=cred["SecretAccessKey"])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == SEGMENT_TYPE
    assert response.content[:8] == b"SLSEG01\n"
    # Nothing after the head: 204.
    assert server.raw("GET", stream_path, query="after=2").status_code == 204
    # Another identity may not read it; an identity may not read the feed.
    other = server.mint(pool, new_id())
    assert server.raw("GET", stream_path, key=other["AccessKeyId"], secret=other["SecretAccessKey"]).status_code == 403
    assert server.raw("GET", "/segments/feed", key=cred["AccessKeyId"], secret=cred["SecretAccessKey"]).status_code == 403

    # The whole stream moves to another server by POST; posting twice changes nothing.
    full = server.raw("GET", stream_path, query="after=0")
    other_server = start_server(server_root(server), "segments-target", ["--fast"])
    try:
        first = other_server.raw("POST", "/segments", body=full.content, headers={"content-type": SEGMENT_TYPE})
        assert first.status_code == 200, first.text
        assert first.json() == {"Applied": 2, "Skipped": 0}
        again = other_server.raw("POST", "/segments", body=full.content, headers={"content-type": SEGMENT_TYPE})
        assert again.json() == {"Applied": 0, "Skipped": 2}
        assert Dataset(other_server.client(), pool, identity).records("notes") == d.records("notes")
        # A damaged segment is refused whole with a message, and nothing changes.
        damaged = bytearray(full.content)
        damaged[len(damaged) // 2] ^= 0xFF
        refused = other_server.raw("POST", "/segments", body=bytes(damaged))
        assert refused.status_code == 400
        assert refused.headers["x-amzn-ErrorType"] == "InvalidParameterException"
        assert "segment refused" in refused.json()["message"]
        # A segment that starts after a gap is refused too.
        late = server.raw("GET", stream_path, query="after=1")
        fresh = start_server(server_root(server), "segments-gap", ["--fast"])
        try:
            gap = fresh.raw("POST", "/segments", body=late.content)
            assert gap.status_code == 400 and "gap" in gap.json()["message"]
            assert digest(fresh)["Sequence"] == 0
        finally:
            fresh.stop()
    finally:
        other_server.stop()


def server_root(server):
    import os
    return os.path.dirname(server.data_dir)


def test_offline_changes_merge_with_the_cognito_rule(tmp_root, server, admin):
    pool, identity = new_id(), new_id()
    d = Dataset(admin, pool, identity)
    d.put("prefs", {"a": "1", "b": "1"})                                   # server @1
    path = "/segments/streams/" + "/".join(api_path(pool, identity, "prefs").split("/")[2:])
    # The device's own store (another ledger) starts from the server's history.
    device = start_server(tmp_root, "offline-device", ["--fast"])
    try:
        assert device.raw("POST", "/segments", body=server.raw("GET", path).content).status_code == 200
        dev = Dataset(device.client(), pool, identity)
        dev.put("prefs", {"b": "offline"})                                 # device @2
        offline = device.raw("GET", path, query="after=1").content
        cred = server.mint(pool, identity)
        as_identity = dict(key=cred["AccessKeyId"], secret=cred["SecretAccessKey"])
        token = "syncSessionToken=" + d.token("prefs")
        # Without a sync session token it is refused, as UpdateRecords is.
        assert server.raw("POST", "/segments", body=offline, query="mode=offline", **as_identity).status_code == 400
        merged = server.raw("POST", "/segments", body=offline, query="mode=offline&deviceId=phone&" + token, **as_identity)
        assert merged.status_code == 200, merged.text
        body = merged.json()
        assert body["FastForward"] is True and body["DatasetSyncCount"] == 2 and body["Conflicts"] == []
        assert d.records("prefs") == {"a": ("1", 1), "b": ("offline", 2)}

        # Now both move on: the server changes a, the device changes a and b.
        d.put("prefs", {"a": "server"})                                    # server @3
        dev.put("prefs", {"a": "offline", "b": "offline-2"})               # device @3
        offline = device.raw("GET", path, query="after=2").content
        refused = server.raw("POST", "/segments", body=offline, query="mode=offline&" + token, **as_identity)
        assert refused.status_code == 409
        assert refused.headers["x-amzn-ErrorType"] == "ResourceConflictException"
        assert '"a"' in refused.json()["message"]
        assert d.describe("prefs")["NumRecords"] == 2 and d.records("prefs")["a"] == ("server", 3)
        partial = server.raw("POST", "/segments", body=offline, query="mode=offline&partial=true&" + token, **as_identity)
        assert partial.status_code == 200, partial.text
        assert partial.json()["Conflicts"] == [{"Key": "a", "BaseSyncCount": 2, "SyncCount": 3}]
        assert d.records("prefs") == {"a": ("server", 3), "b": ("offline-2", 4)}
        # Another identity may not merge into this stream.
        other = server.mint(pool, new_id())
        assert server.raw("POST", "/segments", body=offline, query="mode=offline&" + token,
                          key=other["AccessKeyId"], secret=other["SecretAccessKey"]).status_code == 403
    finally:
        device.stop()


def test_export_and_import_while_the_server_runs(tmp_root, server, admin):
    import glob
    import os
    import subprocess
    from conftest import BINARY
    pool, identity = new_id(), new_id()
    d = Dataset(admin, pool, identity)
    d.put("live", {"a": "1"})
    d.put("live", {"a": "2"})
    out = os.path.join(tmp_root, "live-export")
    stream = f"{pool}/{identity}/live"
    run = subprocess.run([BINARY, "export", "--data", server.data_dir, "--stream", stream, "--out", out],
                         capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    assert b"exported 2 entries" in run.stdout
    files = sorted(glob.glob(os.path.join(out, "*.slseg")))
    assert len(files) == 1
    # Importing into the running server's own directory: everything is already there.
    run = subprocess.run([BINARY, "import", "--data", server.data_dir, *files], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    assert b"imported 0 entries, skipped 2" in run.stdout
    # Into a fresh ledger, then served by a second server: the same records.
    fresh = os.path.join(tmp_root, "live-import")
    run = subprocess.run([BINARY, "import", "--data", fresh, *files], capture_output=True, timeout=60)
    assert run.returncode == 0 and b"imported 2 entries" in run.stdout, run.stderr.decode()
    other = start_server(tmp_root, "live-import")
    try:
        assert Dataset(other.client(), pool, identity).records("live") == {"a": ("2", 2)}
    finally:
        other.stop()
    # A damaged file: non-zero exit and a message naming the file; nothing imported.
    bad = os.path.join(tmp_root, "damaged.slseg")
    with open(files[0], "rb") as f:
        data = bytearray(f.read())
    data[-5] ^= 1
    with open(bad, "wb") as f:
        f.write(data)
    run = subprocess.run([BINARY, "import", "--data", os.path.join(tmp_root, "live-bad"), bad], capture_output=True, timeout=60)
    assert run.returncode == 1
    assert b"damaged.slseg" in run.stderr and b"checksum" in run.stderr
