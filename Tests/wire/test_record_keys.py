"""Record keys and values are arbitrary Unicode strings, compared as exact strings: JSON
escapes round-trip, and two keys that differ in their code points are two records, even when
Unicode calls them canonically equivalent (é as U+00E9 and as e + U+0301)."""

import subprocess

import pytest

from conftest import BINARY, Dataset, new_id, start_server

NFC = "\u00e9"            # é, one code point
NFD = "e\u0301"           # e + combining acute accent: canonically equivalent, different string


@pytest.fixture(scope="module")
def keys_server(tmp_root):
    # Its own data directory, so `syncledger verify` has little to walk.
    s = start_server(tmp_root, "record-keys", ["--fast"])
    yield s
    assert s.stop(timeout=10) == 0


@pytest.fixture
def kd(keys_server):
    return Dataset(keys_server.client(), new_id(), new_id())


def test_keys_and_values_round_trip_exactly(kd):
    values = {
        "quote": 'he said "hi" \\ and /',
        "controls": "\x00\x01\x1f\x7f\t\n\r",
        "astral": "😀 \U0001F9D1\u200D\U0001F4BB",
        "separators": "\u2028\u2029",
        "nul\x00in key": "v",
        "ключ/с пробелом": "значение",
        "😀": "",
        "x" * 450 + "a": "long key 1",        # long keys that share their first 450 bytes
        "x" * 450 + "b": "long key 2",
    }
    out = kd.put("j", values)
    assert {r["Key"]: r["Value"] for r in out["Records"]} == values
    assert kd.records("j") == {k: (v, 1) for k, v in values.items()}
    d = kd.describe("j")
    assert d["NumRecords"] == len(values)
    assert d["DataStorage"] == sum(len(k.encode()) + len(v.encode()) for k, v in values.items())


def test_canonically_equivalent_keys_are_distinct_records(kd):
    # Written in two updates, they are two records ...
    kd.put("sep", {NFC: "composed"})
    kd.put("sep", {NFD: "decomposed"})
    assert kd.records("sep") == {NFC: ("composed", 1), NFD: ("decomposed", 2)}
    assert kd.describe("sep")["NumRecords"] == 2
    # ... so one update may write both.
    out = kd.put("together", {NFC: "composed", NFD: "decomposed"})
    assert sorted((r["Key"], r["Value"], r["SyncCount"]) for r in out["Records"]) == sorted(
        [(NFC, "composed", 1), (NFD, "decomposed", 1)])
    assert kd.records("together") == {NFC: ("composed", 1), NFD: ("decomposed", 1)}


def test_incremental_list_records_returns_every_changed_key(kd):
    kd.put("inc", {"a": "1"})                 # sync count 1
    kd.put("inc", {NFC: "composed"})          # 2
    kd.put("inc", {NFD: "decomposed"})        # 3
    assert kd.records("inc", after=0) == {"a": ("1", 1), NFC: ("composed", 2), NFD: ("decomposed", 3)}
    assert kd.records("inc", after=2) == {NFD: ("decomposed", 3)}
    # A device that synced at 1 must get both changes.
    assert kd.records("inc", after=1) == {NFC: ("composed", 2), NFD: ("decomposed", 3)}


def test_verify_accepts_a_ledger_written_through_the_api(tmp_root):
    # A ledger of its own, stopped before `syncledger verify` walks it.
    server = start_server(tmp_root, "record-keys-verify", ["--fast"])
    d = Dataset(server.client(), new_id(), new_id())
    d.put("verify", {NFC: "composed"})
    d.put("verify", {NFD: "decomposed"})
    assert server.stop(timeout=10) == 0
    out = subprocess.run([BINARY, "verify", "--data", server.data_dir], capture_output=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stdout.decode(errors="replace")[-2000:],
                                 out.stderr.decode(errors="replace")[:600])
