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
        metrics = follower.get("/metrics").text
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
        merged = server.raw("POST", "/segments", body=offline, query="mode=offline&deviceId=phone", **as_identity)
        assert merged.status_code == 200, merged.text
        body = merged.json()
        assert body["FastForward"] is True and body["DatasetSyncCount"] == 2 and body["Conflicts"] == []
        assert d.records("prefs") == {"a": ("1", 1), "b": ("offline", 2)}

        # Now both move on: the server changes a, the device changes a and b.
        d.put("prefs", {"a": "server"})                                    # server @3
        dev.put("prefs", {"a": "offline", "b": "offline-2"})               # device @3
        offline = device.raw("GET", path, query="after=2").content
        refused = server.raw("POST", "/segments", body=offline, query="mode=offline", **as_identity)
        assert refused.status_code == 409
        assert refused.headers["x-amzn-ErrorType"] == "ResourceConflictException"
        assert '"a"' in refused.json()["message"]
        assert d.describe("prefs")["NumRecords"] == 2 and d.records("prefs")["a"] == ("server", 3)
        partial = server.raw("POST", "/segments", body=offline, query="mode=offline&partial=true", **as_identity)
        assert partial.status_code == 200, partial.text
        assert partial.json()["Conflicts"] == [{"Key": "a", "BaseSyncCount": 2, "SyncCount": 3}]
        assert d.records("prefs") == {"a": ("server", 3), "b": ("offline-2", 4)}
        # Another identity may not merge into this stream.
        other = server.mint(pool, new_id())
        assert server.raw("POST", "/segments", body=offline, query="mode=offline",
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


# -- long polling, authentication of the feed, the leader's identity -------------------------

import hashlib
import hmac
import http.client
import os
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import ADMIN_SECRET, new_id as _new_id


def feed_signature(secret, nonce, status, after, ledger_id, last_sequence, body):
    """docs/replication.md's scheme, written independently of the server's code."""
    key = hmac.new(secret.encode(), b"syncledger-replication-v1", hashlib.sha256).digest()
    message = (f"syncledger-feed-v1\n{nonce}\n{status}\n{after}\n{ledger_id}\n{last_sequence}\n"
               + hashlib.sha256(body).hexdigest()).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def metric(server, sample):
    for line in server.get("/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0


def feed(server, after, wait=None, nonce=None):
    query = f"after={after}" + (f"&wait={wait}" if wait is not None else "")
    headers = {"x-syncledger-nonce": nonce} if nonce else None
    return server.raw("GET", "/segments/feed", query=query, headers=headers)


def test_the_feed_long_polls_until_a_commit_and_signs_its_answers(server, admin):
    last = digest(server)["Sequence"]
    # Nothing after the head: held for the wait, then 204, signed for the nonce sent.
    nonce = os.urandom(16).hex()
    start = time.monotonic()
    idle = feed(server, last, wait=1, nonce=nonce)
    elapsed = time.monotonic() - start
    assert idle.status_code == 204 and 0.9 <= elapsed < 3, (idle.status_code, elapsed)
    ledger_id = idle.headers["x-syncledger-ledger-id"]
    sequence = int(idle.headers["x-syncledger-last-sequence"])
    assert idle.headers["x-syncledger-signature"] == feed_signature(ADMIN_SECRET, nonce, 204, last, ledger_id, sequence, b"")

    # A commit during the wait answers the held request at once.
    result = {}

    def poll():
        t0 = time.monotonic()
        result["nonce"] = os.urandom(16).hex()
        result["response"] = feed(server, last, wait=20, nonce=result["nonce"])
        result["seconds"] = time.monotonic() - t0

    waiter = threading.Thread(target=poll)
    waiter.start()
    Dataset(admin, _new_id(), _new_id()).put("wake", {"k": "v"})
    waiter.join(timeout=30)
    response = result["response"]
    assert response.status_code == 200 and result["seconds"] < 3, (response.status_code, result["seconds"])
    assert response.content[:8] == b"SLSEG01\n"
    assert response.headers["x-syncledger-signature"] == feed_signature(
        ADMIN_SECRET, result["nonce"], 200, last, ledger_id, int(response.headers["x-syncledger-last-sequence"]), response.content)

    # No nonce, no signature; a malformed nonce is refused.
    assert "x-syncledger-signature" not in feed(server, last).headers
    bad = feed(server, last, nonce="not-hex!")
    assert bad.status_code == 400 and "x-syncledger-nonce" in bad.json()["message"]


def test_an_idle_follower_long_polls_and_a_write_reaches_it_at_once(tmp_root):
    leader = start_server(tmp_root, "idle-leader", ["--fast"])
    follower = start_server(tmp_root, "idle-follower", ["--fast", "--follow", leader.url])
    try:
        d = Dataset(leader.client(), new_id(), new_id())
        d.put("settings", {"a": "1"})
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="the first catch-up")
        polls = 'syncledger_requests_total{operation="GetFeedSegment",status="204"}'
        before = metric(leader, polls) + metric(leader, polls.replace("204", "200"))
        time.sleep(3)                                     # a measurement window, not a wait for anything
        after = metric(leader, polls) + metric(leader, polls.replace("204", "200"))
        # Polling every 200 ms would have sent 15 requests; a long poll sends at most one.
        assert after - before <= 1, after - before
        # The write is replicated as soon as it is committed, not at the next poll.
        start = time.monotonic()
        d.put("settings", {"a": "2"})
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], timeout=10, what="the write")
        assert time.monotonic() - start < 1.5
        # The leader does not log its idle polls at info level.
        with open(leader.log_path, errors="replace") as log:
            assert not [line for line in log if "GetFeedSegment" in line and "status=204" in line]
    finally:
        follower.stop()
        leader.stop()


class Proxy:
    """An HTTP/1.1 relay between a follower and its leader, which can switch upstream and
    tamper with the leader's answers, as a man in the middle would."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.tamper = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length) if length else b""
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in ("connection", "content-length"):
                            upstream.putheader(name, value)
                    upstream.putheader("Content-Length", str(len(body)))
                    upstream.endheaders(body)
                    reply = upstream.getresponse()
                    status, headers, content = reply.status, dict(reply.getheaders()), reply.read()
                except OSError:
                    status, headers, content = 502, {}, b""
                finally:
                    upstream.close()
                if proxy.tamper and self.path.startswith("/segments/feed"):
                    status, headers, content = proxy.tamper(status, {k.lower(): v for k, v in headers.items()}, content)
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in ("connection", "content-length", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                try:
                    self.end_headers()
                    self.wfile.write(content)
                except OSError:
                    self.close_connection = True      # the follower went away

            do_POST = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def replication_errors(server, reason):
    return metric(server, f'syncledger_replication_errors_total{{reason="{reason}"}}')


def test_a_man_in_the_middle_cannot_make_a_follower_merge_invented_history(tmp_root):
    leader = start_server(tmp_root, "mitm-leader", ["--fast"])
    proxy = Proxy(leader.port)
    follower = start_server(tmp_root, "mitm-follower", ["--fast", "--follow", proxy.url, "--follow-wait", "1"])
    forger = start_server(tmp_root, "mitm-forger", ["--fast"])
    try:
        pool = new_id()
        d = Dataset(leader.client(), pool, new_id())
        d.put("settings", {"a": "1"})
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="catch-up through the relay")
        # History the leader never wrote, as a valid segment (from the forger's own ledger).
        victim = new_id()
        Dataset(forger.client(), pool, victim).put("settings", {"balance": "1000000"})
        invented = forger.raw("GET", "/segments/feed", query="after=0").content
        assert invented[:8] == b"SLSEG01\n"

        def substitute(status, headers, content):
            headers["content-type"] = SEGMENT_TYPE
            return 200, headers, invented

        proxy.tamper = substitute
        wait_until(lambda: replication_errors(follower, "bad_signature") >= 2, what="the forged answers to be refused")
        state = digest(follower)
        assert state["Digest"] == digest(leader)["Digest"], state
        assert state["LastErrorReason"] == "bad_signature" and "signature" in state["LastError"], state
        assert Dataset(follower.client(), pool, victim).list("settings")["Records"] == []

        # Stripping the signature does not help either, even for the leader's real answers.
        def strip(status, headers, content):
            headers.pop("x-syncledger-signature", None)
            return status, headers, content

        proxy.tamper = strip
        d.put("settings", {"a": "2"})
        refused = replication_errors(follower, "bad_signature")
        wait_until(lambda: replication_errors(follower, "bad_signature") > refused + 1, what="unsigned answers to be refused")
        assert "not signed" in digest(follower)["LastError"]
        assert digest(follower)["Digest"] != digest(leader)["Digest"]

        # An honest relay again: the follower catches up, and says so.
        proxy.tamper = None
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="catch-up after the attack")
        assert digest(follower).get("LastError") is None
    finally:
        follower.stop()
        forger.stop()
        leader.stop()
        proxy.close()


def test_a_follower_refuses_another_ledger_or_an_older_copy_at_its_leaders_address(tmp_root):
    leader = start_server(tmp_root, "moved-leader", ["--fast"])
    pool = new_id()
    d = Dataset(leader.client(), pool, new_id())
    d.put("settings", {"a": "1"})
    d.put("settings", {"a": "2"})
    # A copy of the leader as it is now (a backup), for later.
    assert leader.stop() == 0
    shutil.copytree(leader.data_dir, os.path.join(tmp_root, "moved-leader-backup"))
    leader = start_server(tmp_root, "moved-leader", ["--fast"])
    d = Dataset(leader.client(), pool, d.identity)
    d.put("settings", {"a": "3", "b": "1"})
    proxy = Proxy(leader.port)
    follower = start_server(tmp_root, "moved-follower", ["--fast", "--follow", proxy.url, "--follow-wait", "1"])
    other = start_server(tmp_root, "moved-other", ["--fast"])
    backup = None
    try:
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="the first catch-up")
        replicated = digest(follower)
        # A different ledger, further ahead, whose feed after the checkpoint holds only new streams.
        for i in range(replicated["Checkpoint"] + 2):
            Dataset(other.client(), new_id(), new_id()).put("other", {"k": str(i)})
        assert digest(other)["Sequence"] > replicated["Checkpoint"]
        proxy.upstream_port = other.port
        wait_until(lambda: replication_errors(follower, "wrong_ledger") >= 1, what="the other ledger to be refused")
        state = digest(follower)
        assert state["Digest"] == replicated["Digest"] and state["Checkpoint"] == replicated["Checkpoint"], state
        other_id = other.raw("GET", "/segments/feed", query="after=0").headers["x-syncledger-ledger-id"]
        assert state["LastErrorReason"] == "wrong_ledger" and other_id in state["LastError"], state
        assert metric(follower, "syncledger_replication_halted") == 1

        # An older copy of the right ledger (same id, behind the checkpoint): refused too.
        backup = start_server(tmp_root, "moved-leader-backup", ["--fast"])
        assert digest(backup)["Sequence"] < replicated["Checkpoint"]
        proxy.upstream_port = backup.port
        wait_until(lambda: replication_errors(follower, "sequence_regressed") >= 1, what="the older copy to be refused")
        state = digest(follower)
        assert state["Digest"] == replicated["Digest"], state
        assert state["LastErrorReason"] == "sequence_regressed" and "below this follower's checkpoint" in state["LastError"], state

        # Back to the real leader: replication resumes.
        proxy.upstream_port = leader.port
        d.put("settings", {"c": "1"})
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], timeout=60, what="resuming with the right leader")
        assert metric(follower, "syncledger_replication_halted") == 0
    finally:
        follower.stop()
        other.stop()
        if backup:
            backup.stop()
        leader.stop()
        proxy.close()


def test_an_identity_reaches_a_follower_with_a_credential_minted_on_the_followers_directory(tmp_root):
    leader = start_server(tmp_root, "cred-leader", ["--fast"])
    follower = start_server(tmp_root, "cred-follower", ["--fast", "--follow", leader.url])
    try:
        pool, identity = new_id(), new_id()
        Dataset(leader.client(), pool, identity).put("settings", {"theme": "dark"})
        wait_until(lambda: digest(follower)["Digest"] == digest(leader)["Digest"], what="catch-up")
        # Minted on the leader: good there, unknown to the follower (secrets are not replicated).
        on_leader = leader.mint(pool, identity)
        assert Dataset(leader.client_for(on_leader), pool, identity).records("settings") == {"theme": ("dark", 1)}
        expect_error(follower.client_for(on_leader).list_records, "NotAuthorizedException", 403,
                     IdentityPoolId=pool, IdentityId=identity, DatasetName="settings")
        # Minted on the follower's own data directory while it runs: reads work there.
        on_follower = follower.mint(pool, identity)
        reader = Dataset(follower.client_for(on_follower), pool, identity)
        assert reader.records("settings") == {"theme": ("dark", 1)}
        # ...and only reads: the follower is read-only for everyone.
        expect_error(reader.update, "NotAuthorizedException", 403, "settings",
                     [{"Op": "replace", "Key": "theme", "Value": "light", "SyncCount": 1}])
    finally:
        follower.stop()
        leader.stop()
