"""Signed digests, inclusion and consistency proofs (issue 14), made by the real `syncledger`
binary and checked by tools/verify-proof — an independent verifier that shares no code with
SyncLedger (only Python and `cryptography`). Tampering with one byte of the data file, of a
digest or of a proof must be detected by that verifier."""

import base64
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from conftest import BINARY, REPO, new_id, start_server

VERIFY = os.path.join(REPO, "tools", "verify-proof")
ENTRIES = 1100
MARKER = "tamper-target-3f9d1c"


def _load_verifier():
    loader = importlib.machinery.SourceFileLoader("verify_proof", VERIFY)
    spec = importlib.util.spec_from_loader("verify_proof", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


verifier = _load_verifier()


def syncledger(*args, ok=True):
    out = subprocess.run([BINARY, *args], capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    if ok:
        assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out


def verify(key, *args):
    """tools/verify-proof as a separate process: (exit code, stdout + stderr)."""
    out = subprocess.run([sys.executable, VERIFY, "--key", key, *args], capture_output=True, timeout=300)
    return out.returncode, (out.stdout + out.stderr).decode(errors="replace")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.fixture(scope="module")
def ledger(tmp_root):
    """A ledger of ENTRIES entries over 8 streams, written through the server, which is then
    stopped: (data directory, public key file)."""
    server = start_server(tmp_root, "proofs", ["--fast"])
    try:
        admin = server.client()
        pool = new_id()
        streams = [(new_id(), f"ds{d}") for _ in range(4) for d in range(2)]
        tokens = {}
        for i in range(ENTRIES):
            identity, dataset = streams[i % len(streams)]
            ids = dict(IdentityPoolId=pool, IdentityId=identity, DatasetName=dataset)
            if (identity, dataset) not in tokens:
                tokens[(identity, dataset)] = admin.list_records(**ids)["SyncSessionToken"]
            value = MARKER if i == 500 else f"value-{i}"
            admin.update_records(**ids, SyncSessionToken=tokens[(identity, dataset)],
                                 RecordPatches=[{"Op": "replace", "Key": f"k{i}", "Value": value, "SyncCount": 0}])
    finally:
        assert server.stop() == 0
    data = server.data_dir
    key = write(os.path.join(tmp_root, "proofs-key.pem"), syncledger("digest", "--data", data, "--public-key").stdout.decode())
    return data, key


def digest_file(data, path, *args):
    return write(path, syncledger("digest", "--data", data, "--json", *args).stdout.decode())


def test_digest_and_inclusion_proofs_verify_without_syncledger(ledger, tmp_path):
    data, key = ledger
    d = json.loads(open(digest_file(data, tmp_path / "d.json")).read())
    assert d["treeSize"] == ENTRIES and d["algorithm"] == "Ed25519" and d["format"] == "syncledger-digest-v1"
    code, out = verify(key, "digest", str(tmp_path / "d.json"))
    assert code == 0 and f"tree size {ENTRIES}" in out, out
    # The raw base64 form of the key verifies too.
    raw = json.loads(syncledger("digest", "--data", data, "--public-key", "--json").stdout)
    assert raw["keyId"] == d["keyId"]
    raw_key = write(tmp_path / "key.b64", raw["publicKey"] + "\n")
    assert verify(str(raw_key), "digest", str(tmp_path / "d.json"))[0] == 0
    for sequence in [1, 2, 16, 17, 501, 1024, ENTRIES]:
        proof = syncledger("proof", "inclusion", "--data", data, "--sequence", str(sequence), "--digest", str(tmp_path / "d.json")).stdout
        path = write(tmp_path / f"p{sequence}.json", proof.decode())
        code, out = verify(key, "inclusion", str(path), "--digest", str(tmp_path / "d.json"))
        assert code == 0, out
        p = json.loads(proof)
        # Logarithmic: at most ceil(log2(1100)) = 11 hashes.
        assert len(p["path"]) <= 11 and p["leafIndex"] == sequence - 1
    # Without the body: still verified, up to the entry hash, which is taken as given.
    bare = syncledger("proof", "inclusion", "--data", data, "--sequence", "501", "--digest", str(tmp_path / "d.json"), "--no-body").stdout
    assert "body" not in json.loads(bare)["entry"] and len(bare) < len(open(tmp_path / "p501.json").read())
    code, out = verify(key, "inclusion", str(write(tmp_path / "bare.json", bare.decode())))
    assert code == 0 and "taken as given" in out, out
    # By stream and offset: the same entry.
    e = json.loads(open(tmp_path / "p501.json").read())["entry"]
    by_stream = syncledger("proof", "inclusion", "--data", data, "--pool", e["pool"], "--identity", e["identity"],
                           "--dataset", e["dataset"], "--offset", str(e["offset"])).stdout
    assert json.loads(by_stream)["entry"] == e
    # A proof against a digest the verifier does not trust as given is refused.
    smaller = digest_file(data, tmp_path / "small.json", "--at", "600")
    code, out = verify(key, "inclusion", str(tmp_path / "p501.json"), "--digest", str(smaller))
    assert code == 1 and "trusted digest" in out, out
    # Another key does not verify it.
    stranger = write(tmp_path / "stranger.b64", base64.b64encode(bytes(range(32))).decode() + "\n")
    code, out = verify(str(stranger), "digest", str(tmp_path / "d.json"))
    assert code == 1 and "names key" in out, out


def _flips(text):
    """Every one-byte change of `text` (each byte XOR 1)."""
    raw = text.encode()
    for i in range(len(raw)):
        yield i, (raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1:])


def _meaning(raw):
    """What a document says, with base64 decoded (two base64 spellings of the same bytes say
    the same); None when it does not parse."""
    def walk(v, key=None):
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if key in ("signature", "body") and isinstance(v, str):
            try:
                return ("b64", base64.b64decode(v, validate=True))
            except ValueError:
                return v
        return v
    try:
        return walk(json.loads(raw))
    except ValueError:
        return None


def _undetected(kind, original, key_path, extra=()):
    """The one-byte changes of `original` that the verifier accepts although they change what
    the document says."""
    key = verifier.load_key(key_path)
    meaning = _meaning(original.encode())
    missed = []
    for i, changed in _flips(original):
        try:
            doc = json.loads(changed)
        except ValueError:
            continue  # not JSON any more: the verifier refuses it (exit 2), checked below once
        try:
            if kind == "digest":
                verifier.check_digest(doc, key)
            elif kind == "inclusion":
                verifier.check_inclusion(doc, key, *extra)
            else:
                verifier.check_consistency(doc, key, *extra)
        except (verifier.Failed, verifier.Malformed):
            continue
        if _meaning(changed) != meaning:
            missed.append((i, changed[max(0, i - 20):i + 20]))
    return missed


def test_one_changed_byte_of_a_digest_or_a_proof_is_detected(ledger, tmp_path):
    data, key = ledger
    d = digest_file(data, tmp_path / "d.json")
    early = digest_file(data, tmp_path / "early.json", "--at", "700")
    digest_text = open(d).read().strip()
    assert _undetected("digest", digest_text, key) == []
    inclusion = syncledger("proof", "inclusion", "--data", data, "--sequence", "333", "--digest", d).stdout.decode().strip()
    assert _undetected("inclusion", inclusion, key) == []
    consistency = syncledger("proof", "consistency", "--data", data, "--from", early, "--to", d).stdout.decode().strip()
    assert _undetected("consistency", consistency, key) == []
    # And through the command line: a flipped byte exits 1 (or 2 when it no longer parses).
    for name, text, command in [("digest", digest_text, "digest"), ("inclusion", inclusion, "inclusion"),
                                ("consistency", consistency, "consistency")]:
        middle = len(text) // 2
        flipped = write(tmp_path / f"flipped-{name}.json", text[:middle] + chr(ord(text[middle]) ^ 1) + text[middle + 1:])
        assert verify(key, command, str(flipped))[0] in (1, 2)
        assert verify(key, command, str(write(tmp_path / f"ok-{name}.json", text)))[0] == 0


def _flip_everywhere(path, needle):
    """Flips the last bit of the first byte of every occurrence of `needle` in the file (old
    copies of a page included); returns how many there were."""
    with open(path, "r+b") as f:
        raw = bytearray(f.read())
        count, at = 0, raw.find(needle)
        while at >= 0:
            raw[at + len(needle) // 2] ^= 1
            count += 1
            at = raw.find(needle, at + 1)
        f.seek(0)
        f.write(raw)
    return count


def test_one_changed_byte_of_the_data_file_is_detected(ledger, tmp_path):
    data, key = ledger
    d = digest_file(data, tmp_path / "d.json")
    good = json.loads(syncledger("proof", "inclusion", "--data", data, "--sequence", "501", "--digest", d).stdout)
    assert base64.b64decode(good["entry"]["body"]).find(MARKER.encode()) >= 0
    assert verify(key, "inclusion", str(write(tmp_path / "good.json", json.dumps(good))))[0] == 0

    # A byte of the entry's body: the stored hash no longer follows from it.
    body_copy = str(tmp_path / "body-copy")
    shutil.copytree(data, body_copy)
    assert _flip_everywhere(os.path.join(body_copy, "data.mdb"), MARKER.encode()) >= 1
    out = syncledger("proof", "inclusion", "--data", body_copy, "--sequence", "501", "--digest", d, ok=False)
    assert out.returncode == 1 and b"does not verify" in out.stderr, out.stderr  # it says so, and prints the proof
    code, text = verify(key, "inclusion", str(write(tmp_path / "body.json", out.stdout.decode())), "--digest", d)
    assert code == 1 and "body or a hash was changed" in text, text

    # A byte of the entry hash in its log row: the leaf no longer leads to the signed root.
    hash_copy = str(tmp_path / "hash-copy")
    shutil.copytree(data, hash_copy)
    assert _flip_everywhere(os.path.join(hash_copy, "data.mdb"), bytes.fromhex(good["entry"]["entryHash"])) >= 1
    out = syncledger("proof", "inclusion", "--data", hash_copy, "--sequence", "501", "--digest", d, ok=False)
    assert out.returncode == 1, out.stderr
    code, text = verify(key, "inclusion", str(write(tmp_path / "hash.json", out.stdout.decode())), "--digest", d)
    assert code == 1, text
    # The next entry of the stream chains to the changed hash: its proof fails too.
    next_seq = None
    for s in range(502, ENTRIES + 1):
        p = json.loads(syncledger("proof", "inclusion", "--data", data, "--sequence", str(s), "--digest", d).stdout)
        if (p["entry"]["pool"], p["entry"]["identity"], p["entry"]["dataset"]) == (good["entry"]["pool"], good["entry"]["identity"], good["entry"]["dataset"]):
            next_seq = s
            break
    assert next_seq is not None
    out = syncledger("proof", "inclusion", "--data", hash_copy, "--sequence", str(next_seq), "--digest", d, ok=False)
    # Its own leaf is intact and leads to the root; what breaks is the link the verifier can
    # check: its previous hash is now the changed one.
    code, text = verify(key, "inclusion", str(write(tmp_path / "next.json", out.stdout.decode())), "--digest", d)
    assert code == 1 and "body or a hash was changed" in text, text


def test_consistency_across_a_thousand_digests(ledger, tmp_path):
    data, key = ledger
    sizes = sorted(set([1] + [1 + (i * (ENTRIES - 1)) // 999 for i in range(1000)]))
    assert len(sizes) == 1000 and sizes[-1] == ENTRIES
    started = time.monotonic()
    args = []
    for s in sizes:
        args += ["--at", str(s)]
    digests = write(tmp_path / "digests.jsonl", syncledger("digest", "--data", data, "--json", *args).stdout.decode())
    lines = open(digests).read().splitlines()
    assert [json.loads(line)["treeSize"] for line in lines] == sizes
    proofs = write(tmp_path / "proofs.jsonl", syncledger("proof", "consistency", "--data", data, "--chain", digests).stdout.decode())
    assert len(open(proofs).read().splitlines()) == 999
    code, out = verify(key, "chain", str(proofs))
    assert code == 0 and "999 consistency proofs" in out, out
    # Every proof is logarithmic in size.
    assert max(len(json.loads(line)["path"]) for line in open(proofs)) <= 2 * 11
    # A chain with one proof swapped for another pair's breaks the links.
    lines = open(proofs).read().splitlines()
    lines[500], lines[501] = lines[501], lines[500]
    code, out = verify(key, "chain", str(write(tmp_path / "swapped.jsonl", "\n".join(lines) + "\n")))
    assert code == 1 and "line 501" in out, out
    # A digest of a history that changed does not extend: a consistency proof from a digest
    # whose root differs fails.
    first = json.loads(open(proofs).readline())
    first["from"]["rootHash"] = first["to"]["rootHash"]
    code, out = verify(key, "consistency", str(write(tmp_path / "forged.json", json.dumps(first))))
    assert code == 1, out
    assert time.monotonic() - started < 120


# --- followers ------------------------------------------------------------------------------


def _status(server):
    response = server.raw("GET", "/segments/digest")
    assert response.status_code == 200, response.text
    return response.json()


def _wait_until(predicate, what, timeout=60):
    """Polls an observable state (the follower's digest answer) until it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _write(server, pool, identity, count, tag):
    admin = server.client()
    ids = dict(IdentityPoolId=pool, IdentityId=identity, DatasetName="audit")
    token = admin.list_records(**ids)["SyncSessionToken"]
    for i in range(count):
        admin.update_records(**ids, SyncSessionToken=token,
                             RecordPatches=[{"Op": "replace", "Key": f"{tag}{i}", "Value": "v", "SyncCount": 0}])


def _metric(server, name):
    for line in server.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def test_signed_digest_endpoint_is_admin_only_and_verifies(tmp_root, tmp_path):
    leader = start_server(tmp_root, "digest-endpoint", ["--fast"])
    try:
        _write(leader, new_id(), new_id(), 20, "a")
        cred = leader.mint(new_id(), new_id())
        refused = leader.raw("GET", "/segments/signed-digest", key=cred["AccessKeyId"], secret=cred["SecretAccessKey"])
        assert refused.status_code == 403, refused.text
        assert leader.raw("GET", "/segments/signed-digest", sign=False).status_code in (400, 403)
        answer = leader.raw("GET", "/segments/signed-digest")
        assert answer.status_code == 200 and answer.json()["treeSize"] == 20, answer.text
        key = write(tmp_path / "key.pem", syncledger("digest", "--data", leader.data_dir, "--public-key").stdout.decode())
        code, out = verify(str(key), "digest", str(write(tmp_path / "d.json", answer.text)))
        assert code == 0, out
    finally:
        leader.stop()


def test_follower_proves_it_holds_the_leaders_signed_history(tmp_root, tmp_path):
    leader = start_server(tmp_root, "audit-leader", ["--fast"])
    follower = None
    try:
        key = write(tmp_path / "leader.pem", syncledger("digest", "--data", leader.data_dir, "--public-key").stdout.decode())
        follower = start_server(tmp_root, "audit-follower", ["--follow", leader.url, "--follow-wait", "1",
                                                              "--follow-digest-key", str(key), "--follow-digest-interval", "0"])
        pool = new_id()
        _write(leader, pool, new_id(), 40, "a")
        last = _status(leader)["Sequence"]
        _wait_until(lambda: _status(follower).get("LeaderDigestVerifiedSize", 0) >= last, "the first verified digest")
        _write(leader, pool, new_id(), 25, "b")
        last = _status(leader)["Sequence"]
        _wait_until(lambda: _status(follower).get("LeaderDigestVerifiedSize", 0) >= last, "a later verified digest")
        assert "LeaderDigestProblem" not in _status(follower)
        assert _metric(follower, "syncledger_replication_digest_mismatch") == 0
        assert _metric(follower, 'syncledger_replication_digest_checks_total{result="match"}') >= 2
        assert _metric(follower, "syncledger_replication_digest_verified_size") >= last
    finally:
        if follower:
            follower.stop()
        leader.stop()


def test_follower_says_loudly_when_the_digest_is_not_the_leaders_or_not_its_history(tmp_root, tmp_path):
    # A replica that is not a copy of the leader's log in order: it held an entry of its own.
    diverged_dir = os.path.join(tmp_root, "audit-diverged")
    syncledger("put", "--data", diverged_dir, "--pool", new_id(), "--identity", new_id(), "k", "v")
    stranger = write(tmp_path / "stranger.b64", base64.b64encode(bytes(range(32))).decode() + "\n")
    servers = []
    try:
        leader = start_server(tmp_root, "audit-leader-2", ["--fast"])
        servers.append(leader)
        key = write(tmp_path / "leader.pem", syncledger("digest", "--data", leader.data_dir, "--public-key").stdout.decode())
        wrong_key = start_server(tmp_root, "audit-wrong-key", ["--follow", leader.url, "--follow-wait", "1",
                                                                "--follow-digest-key", str(stranger), "--follow-digest-interval", "0"])
        servers.append(wrong_key)
        diverged = start_server(tmp_root, "audit-diverged", ["--follow", leader.url, "--follow-wait", "1",
                                                             "--follow-digest-key", str(key), "--follow-digest-interval", "0"])
        servers.append(diverged)
        _write(leader, new_id(), new_id(), 30, "a")
        _wait_until(lambda: "LeaderDigestProblem" in _status(wrong_key), "the bad signature to show")
        assert "not signed by the configured key" in _status(wrong_key)["LeaderDigestProblem"]
        assert _metric(wrong_key, 'syncledger_replication_digest_checks_total{result="bad_signature"}') >= 1
        assert _metric(wrong_key, "syncledger_replication_digest_mismatch") == 1
        _wait_until(lambda: "LeaderDigestProblem" in _status(diverged), "the mismatch to show")
        assert "does not hold the leader's signed history" in _status(diverged)["LeaderDigestProblem"]
        assert _metric(diverged, 'syncledger_replication_digest_checks_total{result="mismatch"}') >= 1
    finally:
        for s in reversed(servers):
            s.stop()
    for s in (wrong_key, diverged):
        assert "LEADER DIGEST CHECK FAILED" in open(s.log_path, errors="replace").read()


def test_server_and_command_line_extend_the_tree_together(tmp_root, tmp_path):
    """The server (GET /segments/signed-digest) and `syncledger digest` beside it both extend
    the stored tree while writes go on; every digest either made is consistent with every
    later one, and two of the same size have the same root."""
    server = start_server(tmp_root, "audit-together", ["--fast"])
    try:
        key = write(tmp_path / "key.pem", syncledger("digest", "--data", server.data_dir, "--public-key").stdout.decode())
        writing = threading.Thread(target=_write, args=(server, new_id(), new_id(), 400, "w"))
        writing.start()
        digests = []
        while writing.is_alive() or len(digests) < 6:
            answer = server.raw("GET", "/segments/signed-digest")
            assert answer.status_code == 200, answer.text
            digests.append(answer.json())
            digests.append(json.loads(syncledger("digest", "--data", server.data_dir, "--json").stdout))
        writing.join()
        digests.append(server.raw("GET", "/segments/signed-digest").json())
        digests.append(json.loads(syncledger("digest", "--data", server.data_dir, "--json").stdout))
        by_size = {}
        for d in digests:
            assert by_size.setdefault(d["treeSize"], d["rootHash"]) == d["rootHash"], d
        chain = sorted({d["treeSize"]: d for d in digests}.values(), key=lambda d: d["treeSize"])
        assert len(chain) >= 3 and chain[-1]["treeSize"] == 400
        lines = write(tmp_path / "chain.jsonl", "".join(json.dumps(d) + "\n" for d in chain))
        proofs = write(tmp_path / "proofs.jsonl", syncledger("proof", "consistency", "--data", server.data_dir, "--chain", str(lines)).stdout.decode())
        code, out = verify(str(key), "chain", str(proofs))
        assert code == 0, out
    finally:
        server.stop()
