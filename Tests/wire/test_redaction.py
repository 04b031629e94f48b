"""Redaction end to end, with the real server, a real follower, the CLI and the independent proof
verifier: values erased by key, dataset and identity are gone from the current state, the history,
the follower and exports, and — after `syncledger compact` — from every file of both data
directories; `verify`, digests and proofs made before and after still check; only the admin
credential may redact; a ledger written by format 2 is migrated in place."""

import json
import os
import shutil
import subprocess
import tarfile
import time
import urllib.parse
import uuid

import pytest

from conftest import BINARY, Dataset, Server, expect_raw_error, new_id

HERE = os.path.dirname(__file__)
VERIFY = os.path.join(HERE, "..", "..", "tools", "verify-proof")


def syncledger(*args, ok=True):
    out = subprocess.run([BINARY, *args], capture_output=True, timeout=120)
    if ok:
        assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out


def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def files_holding(folder, needle):
    """Every file under `folder` whose bytes contain `needle`."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(path)
    return found


def export_plain(data, folder):
    """`syncledger export` of the whole feed, each segment's zstd frame decompressed by the zstd
    tool (not by SyncLedger): the bytes an export carries."""
    syncledger("export", "--data", data, "--out", folder)
    plain = b""
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            raw = f.read()
        frame = raw[raw.index(b"\x28\xb5\x2f\xfd"):-32]
        plain += subprocess.run(["zstd", "-dc"], input=frame, capture_output=True, check=True).stdout
    return plain


def redact(server, body, **kw):
    return server.raw("POST", "/admin/redactions", body=json.dumps(body), headers={"Content-Type": "application/json"}, **kw)


def test_redaction_erases_everywhere_and_every_proof_still_checks(tmp_root):
    leader = Server(os.path.join(tmp_root, "redact-leader"), ["--fast"])
    follower = Server(os.path.join(tmp_root, "redact-follower"), ["--fast", "--follow", leader.url])
    try:
        admin, pool = leader.client(), new_id()
        alice, bob = new_id(), new_id()
        secret = f"SSN-{uuid.uuid4().hex}".encode()           # erased by key
        diary = f"DIARY-{uuid.uuid4().hex}".encode()          # erased with alice's whole identity
        kept = f"KEPT-{uuid.uuid4().hex}".encode()            # bob's: must survive (the search works)
        a, b = Dataset(admin, pool, alice), Dataset(admin, pool, bob)
        a.put("profile", {"ssn": secret.decode() + "-1", "name": "Alice"})
        a.put("profile", {"ssn": secret.decode() + "-2"})
        a.put("diary", {"day1": diary.decode()})
        b.put("profile", {"ssn": kept.decode()})
        data = leader.data_dir
        key = os.path.join(tmp_root, "redact-key.pem")
        with open(key, "wb") as f:
            f.write(syncledger("digest", "--data", data, "--public-key").stdout)
        before = os.path.join(tmp_root, "redact-digest-before.json")
        with open(before, "wb") as f:
            f.write(syncledger("digest", "--data", data, "--json").stdout)
        first_entry = json.loads(syncledger("log", "--data", data, "--json", "--limit", "1").stdout)["sequence"]

        # Only the admin credential may redact; unsigned and identity-signed requests are refused.
        body = {"IdentityPoolId": pool, "IdentityId": alice, "DatasetName": "profile", "Key": "ssn", "Reason": "GDPR request 17"}
        cred = leader.mint(pool, alice)
        expect_raw_error(redact(leader, body, key=cred["AccessKeyId"], secret=cred["SecretAccessKey"], token=cred.get("SessionToken")),
                         "NotAuthorizedException", 403)
        assert redact(leader, body, sign=False).status_code in (401, 403)
        expect_raw_error(redact(leader, {**body, "Reason": " "}), "InvalidParameterException", 400)
        expect_raw_error(redact(leader, {**body, "IdentityId": new_id()}), "ResourceNotFoundException", 404)
        # A follower takes no redaction: it erases when it replicates the leader's.
        expect_raw_error(redact(follower, body), "NotAuthorizedException", 403)

        answer = redact(leader, body)
        assert answer.status_code == 200, answer.content
        report = answer.json()
        assert report["ErasedValues"] == 2 and len(report["Removals"]) == 1
        assert a.records("profile") == {"ssn": (None, 3), "name": ("Alice", 1)}   # removed now, for devices
        listed = leader.raw("GET", "/admin/redactions", query="IdentityPoolId=" + urllib.parse.quote(pool, safe="")).json()["Redactions"]
        assert [(r["IdentityId"], r["DatasetName"], r["Key"], r["Reason"]) for r in listed] == [(alice, "profile", "ssn", "GDPR request 17")]
        # The whole identity, by the CLI beside the running server.
        out = json.loads(syncledger("redact", "--data", data, "--pool", pool, "--identity", alice, "--reason", "account closed",
                                    "--author", "dpo", "--json").stdout)
        assert out["erasedValues"] == 2     # name and day1 (ssn's were erased already)

        # The history keeps its shape and its hashes: verify, and digests before/after are consistent.
        assert syncledger("verify", "--data", data).returncode == 0
        after = os.path.join(tmp_root, "redact-digest-after.json")
        with open(after, "wb") as f:
            f.write(syncledger("digest", "--data", data, "--json").stdout)
        consistency = os.path.join(tmp_root, "redact-consistency.json")
        with open(consistency, "wb") as f:
            f.write(syncledger("proof", "consistency", "--data", data, "--from", before, "--to", after).stdout)
        assert subprocess.run([VERIFY, "--key", key, "consistency", consistency], capture_output=True).returncode == 0
        # An entry whose values were erased still proves its inclusion, body and all, in both digests.
        for digest in (before, after):
            proof = os.path.join(tmp_root, "redact-inclusion.json")
            with open(proof, "wb") as f:
                f.write(syncledger("proof", "inclusion", "--data", data, "--sequence", str(first_entry), "--digest", digest).stdout)
            checked = subprocess.run([VERIFY, "--key", key, "inclusion", proof], capture_output=True, text=True)
            assert checked.returncode == 0, checked.stderr
            with open(proof, "rb") as f:
                assert secret not in f.read()
        log = syncledger("log", "--data", data, "--json", "--limit", "100000").stdout
        assert secret not in log and diary not in log and kept in log
        assert b'"erased":true' in log

        # An export made now carries no erased value.
        plain = export_plain(data, os.path.join(tmp_root, "redact-export"))
        assert secret not in plain and diary not in plain and kept in plain

        # The follower erased its copy when it replicated the redactions.
        def digest(server):
            return server.raw("GET", "/segments/digest").json()["Digest"]
        wait_until(lambda: digest(follower) == digest(leader), what="the follower to replicate the redactions")
        fa = Dataset(follower.client(), pool, alice)
        assert fa.records("profile") == a.records("profile") and fa.records("diary") == a.records("diary") == {}
        follower_log = syncledger("log", "--data", follower.data_dir, "--json", "--limit", "100000").stdout
        assert secret not in follower_log and diary not in follower_log and kept in follower_log
        assert syncledger("verify", "--data", follower.data_dir).returncode == 0

        # Compaction needs the server stopped; then no file of either directory holds the bytes.
        refused = syncledger("compact", "--data", data, ok=False)
        assert refused.returncode != 0 and b"stop it" in refused.stderr
        assert files_holding(data, secret), "the freed pages still hold the value before compaction (the search can find it)"
        leader.stop()
        follower.stop()
        for folder in (data, follower.data_dir):
            syncledger("compact", "--data", folder)
            assert files_holding(folder, secret) == [] and files_holding(folder, diary) == [], folder
            assert files_holding(folder, kept), "bob's value is still there"
            assert syncledger("verify", "--data", folder).returncode == 0
        # The digest made before still checks against the compacted ledger's proofs.
        proof = os.path.join(tmp_root, "redact-inclusion-compacted.json")
        with open(proof, "wb") as f:
            f.write(syncledger("proof", "inclusion", "--data", data, "--sequence", str(first_entry), "--digest", before).stdout)
        assert subprocess.run([VERIFY, "--key", key, "inclusion", proof], capture_output=True).returncode == 0
    finally:
        leader.stop()
        follower.stop()


def test_a_format2_ledger_is_migrated_in_place_and_then_redactable(tmp_root):
    data = os.path.join(tmp_root, "format2")
    os.makedirs(data, mode=0o700)
    with tarfile.open(os.path.join(HERE, "fixtures", "format2-ledger.tar.gz")) as archive:
        archive.extractall(data)
    with open(os.path.join(HERE, "fixtures", "format2-log.jsonl")) as f:
        written = [json.loads(line) for line in f]
    # A reading command leaves an older directory alone and says what to do.
    refused = syncledger("log", "--data", data, ok=False)
    assert refused.returncode != 0 and b"format 2" in refused.stderr
    # A writing command migrates it: the same entries, every one verifiable.
    pool, alice = written[0]["stream"]["pool"], written[0]["stream"]["identity"]
    syncledger("put", "--data", data, "--pool", pool, "--identity", alice, "--dataset", "later", "k", "v")
    log = [json.loads(line) for line in syncledger("log", "--data", data, "--json").stdout.splitlines()]
    assert log[:len(written)] == written
    assert syncledger("verify", "--data", data).returncode == 0
    # And its old entries can now be erased.
    syncledger("redact", "--data", data, "--pool", pool, "--identity", alice, "--dataset", "profile", "--reason", "test")
    assert b"Tiberius" not in syncledger("log", "--data", data, "--json").stdout
    assert syncledger("verify", "--data", data).returncode == 0
    syncledger("compact", "--data", data)
    assert files_holding(data, b"Tiberius") == []



def test_redacting_a_merged_identity_erases_the_copies_merges_made_of_its_data(server):
    """Issue 22, item 6d: merges copy a merged identity's datasets into `D.<id>` streams of the
    survivor (and on, when the survivor is merged in turn); redacting the merged identity, a
    dataset or a key of it erases those copies too, across their history."""
    from test_identity import identity_client, sync_client
    from test_identity_merge import PROVIDER, developer_credentials, put, values

    admin, anonymous = identity_client(server), identity_client(server, signed=False)
    pid = admin.create_identity_pool(IdentityPoolName="Redact merges", AllowUnauthenticatedIdentities=True,
                                     DeveloperProviderName=PROVIDER)["IdentityPoolId"]
    old, old_creds = developer_credentials(admin, anonymous, pid, "old-user")
    mid, mid_creds = developer_credentials(admin, anonymous, pid, "mid-user")
    new, new_creds = developer_credentials(admin, anonymous, pid, "new-user")
    email, diary, kept = (f"{what}-{uuid.uuid4().hex}" for what in ("EMAIL", "DIARY", "KEPT"))
    put(sync_client(server, old_creds), pid, old, "profile", {"email": email, "theme": "dark"})
    put(sync_client(server, old_creds), pid, old, "diary", {"day1": diary})
    put(sync_client(server, new_creds), pid, new, "profile", {"email": kept})
    # old → mid, then mid → new: new holds profile.<old>.<mid>, diary.<old>.<mid>.
    admin.merge_developer_identities(SourceUserIdentifier="old-user", DestinationUserIdentifier="mid-user",
                                     DeveloperProviderName=PROVIDER, IdentityPoolId=pid)
    admin.merge_developer_identities(SourceUserIdentifier="mid-user", DestinationUserIdentifier="new-user",
                                     DeveloperProviderName=PROVIDER, IdentityPoolId=pid)
    new_sync = sync_client(server, developer_credentials(admin, anonymous, pid, "new-user")[1])
    first, second = f"profile.{old}", f"profile.{old}.{mid}"
    assert values(new_sync, pid, new, second) == {"email": email, "theme": "dark"}
    assert email.encode() in syncledger("log", "--data", server.data_dir, "--json", "--limit", "1000000").stdout

    # A key of the merged identity: its copies lose that key, the rest stays.
    answer = redact(server, {"IdentityPoolId": pid, "IdentityId": old, "DatasetName": "profile", "Key": "email", "Reason": "erase my email"})
    assert answer.status_code == 200, answer.content
    log = syncledger("log", "--data", server.data_dir, "--json", "--limit", "1000000").stdout
    assert email.encode() not in log and diary.encode() in log and kept.encode() in log
    assert values(new_sync, pid, new, second) == {"theme": "dark"}
    copies = answer.json()["Copies"]
    assert [(c["IdentityId"], c["DatasetName"]) for c in copies] == [(mid, first), (new, second)], copies
    assert answer.json()["Remaining"] == []  # one server writes every stream

    # The whole identity: every copy of every dataset goes; the survivor's own data stays.
    out = json.loads(syncledger("redact", "--data", server.data_dir, "--pool", pid, "--identity", old, "--reason", "account closed",
                                "--json").stdout)
    assert sorted((c["identity"], c["dataset"]) for c in out["copies"]) == sorted(
        [(mid, first), (mid, f"diary.{old}"), (new, second), (new, f"diary.{old}.{mid}")]), out
    log = syncledger("log", "--data", server.data_dir, "--json", "--limit", "1000000").stdout
    assert email.encode() not in log and diary.encode() not in log and kept.encode() in log
    assert values(new_sync, pid, new, f"diary.{old}.{mid}") == {} and values(new_sync, pid, new, "profile") == {"email": kept}
    listed = server.raw("GET", "/admin/redactions", query="IdentityPoolId=" + urllib.parse.quote(pid, safe="")).json()["Redactions"]
    assert sorted((r["IdentityId"], r.get("MergedFrom")) for r in listed) == sorted(
        [(old, None), (mid, old), (new, old), (old, None), (mid, old), (mid, old), (new, old), (new, old)]), listed
    assert syncledger("verify", "--data", server.data_dir).returncode == 0
