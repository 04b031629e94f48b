"""Replication the follower can trust: the long-polled feed and its signature, an idle
follower's request rate, a tampering relay, another ledger (or an older copy) at the leader's
address, and identity credentials on a follower — real processes, boto3, raw signed requests."""

import hashlib
import hmac
import http.client
import os
import shutil
import threading
import time
import unicodedata
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import ADMIN_SECRET, Dataset, expect_error, new_id, start_server
from test_replication import SEGMENT_TYPE, digest, wait_until


def feed_signature(secret, nonce, status, after, ledger_id, last_sequence, body):
    """docs/replication.md's scheme, written independently of the server's code."""
    key = hmac.new(secret.encode(), b"syncledger-replication-v1", hashlib.sha256).digest()
    message = (f"syncledger-feed-v1\n{nonce}\n{status}\n{after}\n{ledger_id}\n{last_sequence}\n"
               + hashlib.sha256(body).hexdigest()).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def metric(server, sample):
    for line in server.metrics().splitlines():
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
    Dataset(admin, new_id(), new_id()).put("wake", {"k": "v"})
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
        # A leader holding the follower's pull still stops at once on SIGTERM (the wait ends).
        start = time.monotonic()
        assert leader.stop() == 0
        assert time.monotonic() - start < 5
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


def test_a_leaders_error_body_is_logged_and_shown_without_control_characters(tmp_root):
    """The body of an error answer comes before anything authenticates it: the follower keeps
    up to 300 bytes of it for its log and its digest, with every control or format character
    (newlines, escapes, a right-to-left override, NUL) made a space, so that it cannot forge
    log lines or restyle a terminal."""
    leader = start_server(tmp_root, "ctl-leader", ["--fast"])
    proxy = Proxy(leader.port)
    follower = start_server(tmp_root, "ctl-follower", ["--fast", "--follow", proxy.url, "--follow-wait", "1"])
    forged = ("\x1b[2J\x1b[31mboom\r\n2026-01-01T00:00:00+0000 critical syncledger: forged=line\u202egnol\x00\x07"
              "\u2028end\x85").encode()
    try:
        proxy.tamper = lambda status, headers, content: (503, {"content-type": "text/plain"}, forged)

        def logged():
            with open(follower.log_path, "rb") as log:
                return b"forged=line" in log.read()

        wait_until(lambda: replication_errors(follower, "leader_error") >= 1 and logged(),
                   what="the leader's error answer to be counted and logged")
        state = digest(follower)
        assert state["LastErrorReason"] == "leader_error", state
        message = state["LastError"]
        assert "503" in message and "boom" in message and "forged=line" in message and "end" in message, message
        assert not [c for c in message if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")], repr(message)
        with open(follower.log_path, "rb") as log:
            text = log.read()
        for bad in (b"\x1b", b"\x00", b"\x07", "\u202e".encode(), "\u2028".encode(), "\x85".encode()):
            assert bad not in text, (bad, text[-2000:])
        assert not [line for line in text.split(b"\n") if line.lstrip(b"\r").startswith(b"2026-01-01T00:00:00+0000 critical")]
    finally:
        follower.stop()
        leader.stop()
        proxy.close()
