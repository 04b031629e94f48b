"""`syncledger blame|diff|stats` and `log --follow`, run as subprocesses: blame and diff against a
model of a random workload written with `put` and `remove`, their errors, stats against the
feed, progress on a terminal, and `log --follow` while a second process (a server) writes, ended
with Ctrl-C and resumed from the position it prints."""

import json
import os
import pty
import queue
import random
import signal
import subprocess
import threading
import time

import pytest

from conftest import BINARY, Dataset, new_id, start_server
from test_cli_commands import json_lines, ok, one_line_error, syncledger


def model_blame(history, at, removed=False):
    """Blame lines {key, value, op, syncCount, device} at sync count `at` from the model."""
    state = history[at]
    return [{"key": k, "value": v["value"], "op": "put" if v["value"] is not None else "remove",
             "syncCount": v["syncCount"], "device": v["device"]}
            for k, v in sorted(state.items(), key=lambda kv: kv[0].encode()) if removed or v["value"] is not None]


def model_diff(history, a, b):
    before, after = history[a], history[b]
    lines = []
    for key in sorted(set(before) | set(after), key=str.encode):
        old = before.get(key, {}).get("value")
        new = after.get(key, {}).get("value")
        if old != new:
            change = "added" if old is None else "removed" if new is None else "changed"
            lines.append({"key": key, "change": change, "before": old, "after": new, "syncCount": after[key]["syncCount"]})
    return lines


def trim(lines, fields):
    return [{f: line[f] for f in fields} for line in lines]


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """A random workload on local:0/local:1/default (puts and removes from three devices,
    interleaved with writes to another dataset), and the model: the records after each sync
    count."""
    data = str(tmp_path_factory.mktemp("audit") / "data")
    rng = random.Random(14)
    keys = [f"k{i}" for i in range(8)] + ["é"]
    history = [{}]
    for step in range(40):
        device = rng.choice(["phone", "tablet", "laptop"])
        state = dict(history[-1])
        live = [k for k, v in state.items() if v["value"] is not None]
        if live and rng.random() < 0.25:
            gone = rng.sample(live, min(len(live), rng.randint(1, 2)))
            ok("remove", "--data", data, "--fast", "--device", device, *gone)
            changes = {k: None for k in gone}
        else:
            changes = {k: f"v{rng.randint(0, 4)}" for k in rng.sample(keys, rng.randint(1, 3))}
            # `put` leaves a key that already has the value alone, as a device does.
            changes = {k: v for k, v in changes.items() if state.get(k, {}).get("value") != v}
            if not changes:
                continue
            args = [x for k, v in sorted(changes.items()) for x in (k, v)]
            ok("put", "--data", data, "--fast", "--device", device, *args)
        for k, v in changes.items():
            state[k] = {"value": v, "syncCount": len(history), "device": device}
        history.append(state)
        if rng.random() < 0.3:
            ok("put", "--data", data, "--fast", "--dataset", "other", "x", str(step))
    return data, history


def test_blame_matches_the_model(workload):
    data, history = workload
    head = len(history) - 1
    fields = ["key", "value", "op", "syncCount", "device"]
    now = json_lines(ok("blame", "--data", data, "--json"))
    assert trim(now, fields) == model_blame(history, head)
    assert all(line["author"] == "cli" and line["time"].endswith("Z") and line["sequence"] >= line["syncCount"] for line in now)
    assert trim(json_lines(ok("blame", "--data", data, "--json", "--removed")), fields) == model_blame(history, head, removed=True)
    rng = random.Random(1)
    for at in rng.sample(range(head + 1), 10):
        shown = json_lines(ok("blame", "--data", data, "--json", "--removed", "--sync-count", at))
        assert trim(shown, fields) == model_blame(history, at, removed=True), at
    # Filters: device and sync-count range, key.
    shown = json_lines(ok("blame", "--data", data, "--json", "--device", "phone", "--min-sync-count", head // 2))
    assert trim(shown, fields) == [l for l in model_blame(history, head) if l["device"] == "phone" and l["syncCount"] >= head // 2]
    shown = json_lines(ok("blame", "--data", data, "--json", "--key", "k1", "--removed"))
    assert trim(shown, fields) == [l for l in model_blame(history, head, removed=True) if l["key"] == "k1"]
    assert json_lines(ok("blame", "--data", data, "--json", "--author", "someone-else")) == []
    # Text: key, value, the entry.
    text = ok("blame", "--data", data).splitlines()
    assert len(text) == len(now) and all(f"\t@{l['syncCount']} " in t and " by cli on " in t for l, t in zip(now, text)), text


def test_blame_by_time_matches_replay(workload):
    data, history = workload
    entries = json_lines(ok("log", "--data", data, "--json", "--stream"))
    for entry in entries[::7]:
        at = max(e["offset"] for e in entries if e["time"] <= entry["time"])
        shown = json_lines(ok("blame", "--data", data, "--json", "--time", entry["time"]))
        assert trim(shown, ["key", "value", "syncCount"]) == trim(model_blame(history, at), ["key", "value", "syncCount"])


def test_diff_matches_the_model(workload):
    data, history = workload
    head = len(history) - 1
    rng = random.Random(2)
    fields = ["key", "change", "before", "after", "syncCount"]
    for _ in range(12):
        a, b = sorted(rng.sample(range(head + 1), 2))
        shown = json_lines(ok("diff", "--data", data, "--json", "--from-sync-count", a, "--to-sync-count", b))
        assert trim(shown, fields) == model_diff(history, a, b), (a, b)
    # To now by default; the summary goes to stderr in text mode.
    code, out, err = syncledger("diff", "--data", data, "--from-sync-count", 0)
    assert code == 0 and f"between sync counts 0 and {head}" in err, err
    assert all(line[0] in "+" for line in out.splitlines()), out
    shown = json_lines(ok("diff", "--data", data, "--json", "--from-sync-count", 3, "--key", "k2"))
    assert trim(shown, fields) == [l for l in model_diff(history, 3, head) if l["key"] == "k2"]


@pytest.mark.parametrize("args, message", [
    (["blame", "--dataset", "nope"], "local:0/local:1/nope does not exist"),
    (["diff", "--from-sync-count", "5", "--to-sync-count", "2"], "from sync count 5 is after to sync count 2"),
    (["diff", "--from-sync-count", "999"], "from sync count 999 is past the last entry"),
    (["blame", "--sync-count", "999"], "sync count 999 is past the last entry"),
    (["blame", "--time", "2999-01-01T00:00:00Z"], "is in the future"),
])
def test_bad_points_are_one_line_errors(workload, args, message):
    data, _ = workload
    line = one_line_error(syncledger(*args, "--data", data))
    assert message in line, line


@pytest.mark.parametrize("args, message", [
    (["blame", "--time", "yesterday"], "--time yesterday is not ISO 8601"),
    (["blame", "--time", "2026-01-01T00:00:00Z", "--sync-count", "1"], "give --sync-count or --time, not both"),
    (["diff"], "give the first point"),
    (["stats", "--since", "2026-02-01T00:00:00Z", "--until", "2026-01-01T00:00:00Z"], "the time range is empty"),
    (["stats", "--min-sync-count", "5", "--max-sync-count", "4"], "the range is empty"),
    (["stats", "--by", "planet"], "planet"),
])
def test_bad_options_are_usage_errors(workload, args, message):
    data, _ = workload
    code, out, err = syncledger(*args, "--data", data)
    assert code == 64 and message in err, (code, err)


def test_stats_match_the_feed(workload):
    data, history = workload
    feed = json_lines(ok("log", "--data", data, "--json", "--limit", "100000"))
    by_dataset = {}
    for entry in feed:
        by_dataset[entry["stream"]["dataset"]] = by_dataset.get(entry["stream"]["dataset"], 0) + 1
    rows = json_lines(ok("stats", "--data", data, "--json", "--by", "dataset"))
    assert rows[-1]["total"] is True and rows[-1]["entries"] == len(feed) and rows[-1]["streams"] == 2
    assert {r["dataset"]: r["entries"] for r in rows[:-1]} == by_dataset
    # Each stored entry: stream id and hash (40 bytes), then a body holding at least its keys and
    # values, its author and its device; and not much more (a few bytes of lengths and numbers,
    # and the 17 bytes of the salting byte and seed of the values' commitments, format 3).
    least = {}
    for e in feed:
        content = 40 + len(e["author"]) + len(e["device"] or "") + sum(len(v.get("key", "")) + len(v.get("value", "")) for v in e["events"])
        least[e["stream"]["dataset"]] = least.get(e["stream"]["dataset"], 0) + content
    for r in rows[:-1]:
        assert least[r["dataset"]] < r["bytes"] <= least[r["dataset"]] + (16 + 17) * r["entries"], (r, least)
    counts = json_lines(ok("stats", "--data", data, "--json", "--counts-only", "--by", "pool"))
    assert counts == [{"pool": "local:0", "streams": 2, "entries": len(feed), "bytes": None},
                      {"pool": None, "streams": 2, "entries": len(feed), "bytes": None, "total": True}]
    phone = json_lines(ok("stats", "--data", data, "--json", "--device", "phone"))
    assert phone[-1]["entries"] == sum(1 for e in feed if e["device"] == "phone")
    assert json_lines(ok("stats", "--data", data, "--json", "--pool", "elsewhere:0"))[-1]["entries"] == 0


def test_progress_on_a_terminal_only(workload):
    data, _ = workload
    args = ["diff", "--data", data, "--from-sync-count", "1", "--progress-after", "0"]
    code, out, err = syncledger(*args)
    assert code == 0 and "replaying" not in err, err
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen([BINARY, *args], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        slave = None
        assert process.stdout.read().decode() == out
        assert process.wait(timeout=60) == 0
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert b"replaying [" in shown and b"100%" in shown, shown


class Lines:
    """A process's standard output, line by line, read on a thread: `expect(n)` waits for n more
    lines with a deadline (never a sleep)."""

    def __init__(self, process):
        self.queue = queue.Queue()
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process):
        for line in process.stdout:
            self.queue.put(line.decode())
        self.queue.put(None)

    def expect(self, count, timeout=30):
        deadline = time.monotonic() + timeout
        got = []
        while len(got) < count:
            line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            assert line is not None, f"the output ended after {got}"
            got.append(json.loads(line))
        return got


def test_log_follow_while_a_server_writes(tmp_path):
    server = start_server(str(tmp_path), "follow", ["--fast"])
    try:
        pool, identity = new_id(), new_id()
        ds = Dataset(server.client(), pool, identity)
        ds.put("before", {"k": "0"})
        follower = subprocess.Popen([BINARY, "log", "--data", server.data_dir, "--follow", "--json", "--pool", pool],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        lines = Lines(follower)
        first = lines.expect(1)
        assert first[0]["stream"]["dataset"] == "before"
        # Another process (the server) writes; the follower prints each entry as it comes.
        for i in range(1, 4):
            ds.put("live", {"k": str(i)})
            got = lines.expect(1)
            assert got[0]["stream"]["dataset"] == "live" and got[0]["offset"] == i, got
        # Another pool is filtered out: the next line is this pool's.
        Dataset(server.client(), new_id(), new_id()).put("elsewhere", {"k": "x"})
        ds.put("live", {"k": "4"})
        assert lines.expect(1)[0]["offset"] == 4
        # Ctrl-C: exit 130 and where to resume.
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=30) == 130
        err = follower.stderr.read().decode()
        assert "interrupted after 5 entries; resume with --after " in err, err
        position = int(err.rsplit("--after ", 1)[1].split()[0])
        ds.put("live", {"k": "5"})
        resumed = json_lines(ok("log", "--data", server.data_dir, "--json", "--pool", pool, "--after", position))
        assert [(e["stream"]["dataset"], e["offset"]) for e in resumed] == [("live", 5)], resumed
    finally:
        server.stop()


def test_log_follow_stops_at_its_limit_and_refuses_stream(tmp_path):
    data = str(tmp_path / "data")
    ok("put", "--data", data, "--fast", "a", "1")
    ok("put", "--data", data, "--fast", "a", "2")
    code, out, err = syncledger("log", "--data", data, "--follow", "--json", "--limit", "2", timeout=30)
    assert code == 0 and [e["offset"] for e in json_lines(out)] == [1, 2], (code, out, err)
    assert "continue with --after 2" in err, err
    code, out, err = syncledger("log", "--data", data, "--follow", "--stream")
    assert code == 64 and "--follow follows the feed" in err, err
