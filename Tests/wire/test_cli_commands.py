"""The `syncledger` command line, run as a subprocess: version and did-you-mean, read commands
that refuse a directory without a ledger, one-line errors, --json, the log's positions and
system streams, put/remove as a device does them, replay by sync count and by a time copied from
`log`, and verify's progress on a terminal."""

import datetime
import json
import os
import pty
import random
import subprocess

import pytest

from conftest import BINARY, Dataset, new_id, start_server

MAX_U64 = str(2**64 - 1)


def syncledger(*args, cwd=None, env=None, timeout=120):
    """Runs the binary; returns (exit code, stdout, stderr) as text."""
    out = subprocess.run([BINARY, *map(str, args)], capture_output=True, cwd=cwd, env=env, timeout=timeout)
    return out.returncode, out.stdout.decode(), out.stderr.decode(errors="replace")


def ok(*args, **kw):
    code, out, err = syncledger(*args, **kw)
    assert code == 0, (args, code, out, err)
    return out


def one_line_error(result, code=1):
    """Asserts a failure said in exactly one line `syncledger: …`; returns it."""
    status, out, err = result
    assert status == code, (status, out, err)
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith("syncledger: "), err
    for dump in ("NSCocoaErrorDomain", "Error Domain", "Code=", "NSError", "(cause:"):
        assert dump not in err, err
    return lines[0]


def parse_time(text):
    """An ISO 8601 time as `log --json` prints it: UTC with milliseconds."""
    assert len(text) == len("2026-11-22T10:00:00.123Z") and text.endswith("Z"), text
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


@pytest.fixture
def ledger(tmp_path):
    """A ledger with a few entries in dataset local:0/local:1/default, made with `put`."""
    data = str(tmp_path / "data")
    ok("put", "--data", data, "--fast", "a", "1", "b", "2")
    ok("put", "--data", data, "--fast", "a", "3")
    ok("put", "--data", data, "--fast", "--dataset", "other", "x", "y")
    return data


def values(state):
    """{key: value} of a dataset as get --json and replay --json print it."""
    return {r["key"]: r["value"] for r in state["records"]}


def json_lines(text):
    return [json.loads(line) for line in text.splitlines()]


# -- version, help and mistyped commands -----------------------------------------------------

def test_version():
    assert ok("--version").strip() == "0.9.0"


@pytest.mark.parametrize("typed, meant", [
    (["lgo"], "'log'"), (["exprot"], "'export'"), (["verfy"], "'verify'"),
    (["credentials", "lst"], "'credentials list'"), (["dict", "trian"], "'dict train'"),
])
def test_a_mistyped_command_gets_a_suggestion(typed, meant):
    line = one_line_error(syncledger(*typed, "--data", "nowhere"), code=64)
    assert f"unknown command '{' '.join(typed)}'; did you mean {meant}?" in line, line


def test_a_command_far_from_any_lists_them():
    line = one_line_error(syncledger("frobnicate"), code=64)
    assert "unknown command 'frobnicate'" in line and "log" in line and "export" in line, line


def test_help_says_which_commands_make_a_ledger():
    text = " ".join(ok("--help").split())
    assert "Only serve, put, import and credentials create make a ledger" in text, text
    assert "--json" in text


# -- read commands refuse a directory that holds no ledger -----------------------------------

READ_COMMANDS = [
    ["log"], ["log", "--stream"], ["history", "k"], ["replay", "--sync-count", "0"], ["get"], ["verify"],
    ["verify", "--json"], ["export", "--out", "{out}"], ["dict", "train", "--pool", "us-east-1:1"], ["remove", "k"],
    ["rebuild-views"], ["credentials", "list"], ["credentials", "revoke", "AKIAAAAAAAAAAAAAAAAA"],
    ["credentials", "rotate", "AKIAAAAAAAAAAAAAAAAA"],
]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c))
@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_read_commands_refuse_a_directory_without_a_ledger(tmp_path, command, kind):
    data = tmp_path / "typo"
    if kind == "empty":
        data.mkdir()
    out = tmp_path / "out"
    args = [a.replace("{out}", str(out)) for a in command]
    line = one_line_error(syncledger(*args, "--data", data))
    assert "no ledger" in line and str(data) in line and "check --data" in line, line
    # Nothing was made: no ledger, no output directory.
    assert not (data / "data.mdb").exists()
    assert (not data.exists()) if kind == "missing" else (sorted(os.listdir(data)) == [])
    assert not out.exists()


def test_commands_that_make_a_ledger_say_so(tmp_path):
    data = str(tmp_path / "fresh")
    code, out, err = syncledger("put", "--data", data, "k", "v")
    assert code == 0 and f"made a new ledger in {data}" in err, (out, err)
    code, out, err = syncledger("put", "--data", data, "k", "w")
    assert code == 0 and "made a new ledger" not in err, err


# -- one line per error -----------------------------------------------------------------------

def test_file_errors_are_one_line_naming_the_path_and_the_reason(tmp_path, ledger):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    line = one_line_error(syncledger("put", "--data", blocker / "data", "k", "v"))
    assert f"cannot create the data directory {blocker}/data" in line and "not a directory" in line, line
    line = one_line_error(syncledger("export", "--data", ledger, "--out", blocker / "backup"))
    assert f"cannot create the output directory {blocker}/backup" in line and "not a directory" in line, line
    line = one_line_error(syncledger("export", "--data", ledger, "--out", blocker))
    assert f"the output directory {blocker} is a file" in line, line
    line = one_line_error(syncledger("import", "--data", tmp_path / "restored", tmp_path / "missing.slseg"))
    assert f"cannot read {tmp_path}/missing.slseg" in line, line
    # Nothing was imported into (or made at) --data for a file that is not there.
    assert not (tmp_path / "restored").exists()
    line = one_line_error(syncledger("import", "--data", tmp_path / "restored", tmp_path))
    assert "is a directory" in line, line


# -- export's options --------------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--target-bytes=0", "--target-bytes=-1", "--target-bytes=134217729",
                                    "--level=0", "--level=20", "--level=100", "--level=-1"])
def test_export_refuses_sizes_and_levels_out_of_range(tmp_path, ledger, option):
    code, out, err = syncledger("export", "--data", ledger, "--out", tmp_path / "out", option)
    assert code == 64, (out, err)
    assert option.split("=")[0] in err, err
    assert not (tmp_path / "out").exists()


def test_export_at_the_bounds(tmp_path, ledger):
    out = tmp_path / "out"
    text = ok("export", "--data", ledger, "--out", out, "--target-bytes=1", "--level=19")
    assert "exported 3 entries in 3 segment files" in text, text
    assert sorted(os.listdir(out)) == [f"feed-{n:016d}-{n:016d}.slseg" for n in (1, 2, 3)]
    assert all(os.stat(out / f).st_mode & 0o077 == 0 for f in os.listdir(out))
    restored = tmp_path / "restored"
    assert "imported 3 entries" in ok("import", "--data", restored, *sorted(str(out / f) for f in os.listdir(out)))
    assert json.loads(ok("verify", "--json", "--data", restored))["digest"] == json.loads(ok("verify", "--json", "--data", ledger))["digest"]


# -- log ---------------------------------------------------------------------------------------

def test_log_limit_at_least_one_and_says_where_to_continue(ledger):
    code, out, err = syncledger("log", "--data", ledger, "--limit", "0")
    assert code == 64 and out == "" and "--limit" in err, (out, err)
    code, out, err = syncledger("log", "--data", ledger, "--limit", "1", "--json")
    assert code == 0 and [e["sequence"] for e in json_lines(out)] == [1], out
    assert "stopped after 1 entries; continue with --after 1" in err, err
    code, out, err = syncledger("log", "--data", ledger, "--after", "1", "--json")
    assert code == 0 and [e["sequence"] for e in json_lines(out)] == [2, 3] and err == "", (out, err)


def test_log_positions_from_and_after_in_the_feed_and_a_stream(ledger):
    assert [e["sequence"] for e in json_lines(ok("log", "--data", ledger, "--json", "--from", "2"))] == [2, 3]
    assert [e["sequence"] for e in json_lines(ok("log", "--data", ledger, "--json", "--after", "2"))] == [3]
    assert [e["offset"] for e in json_lines(ok("log", "--data", ledger, "--json", "--stream", "--from", "2"))] == [2]
    assert [e["offset"] for e in json_lines(ok("log", "--data", ledger, "--json", "--stream", "--after", "1"))] == [2]
    # The ends of UInt64 print nothing and do not trap.
    for args in (["--from", MAX_U64], ["--after", MAX_U64], ["--stream", "--from", MAX_U64], ["--stream", "--after", MAX_U64]):
        code, out, err = syncledger("log", "--data", ledger, *args)
        assert (code, out, err) == (0, "", ""), (args, code, out, err)
    code, out, err = syncledger("log", "--data", ledger, "--from", str(2**64))
    assert code == 64, (out, err)
    code, out, err = syncledger("log", "--data", ledger, "--from", "1", "--after", "1")
    assert code == 64 and "not both" in err, err


def test_log_json_lines(ledger):
    entries = json_lines(ok("log", "--data", ledger, "--json"))
    assert [list(e) for e in entries] == [["sequence", "stream", "offset", "time", "author", "device", "events"]] * 3
    first = entries[0]
    assert first["stream"] == {"pool": "local:0", "identity": "local:1", "dataset": "default"}
    assert (first["sequence"], first["offset"], first["author"], first["device"]) == (1, 1, "cli", None)
    assert first["events"] == [{"op": "put", "key": "a", "value": "1"}, {"op": "put", "key": "b", "value": "2"}]
    assert entries[2]["stream"]["dataset"] == "other" and entries[2]["offset"] == 1
    times = [parse_time(e["time"]) for e in entries]
    assert times == sorted(times)
    # The text form prints the same times.
    text = ok("log", "--data", ledger).splitlines()
    assert [e["time"] in line for e, line in zip(entries, text)] == [True] * 3, text


def test_log_hides_system_streams_unless_asked(tmp_root):
    server = start_server(tmp_root, "cli-system-streams", ["--fast"])
    try:
        pool, identity = new_id(), new_id()
        admin = server.client()
        Dataset(admin, pool, identity).put("settings", {"k": "v"})
        admin.register_device(IdentityPoolId=pool, IdentityId=identity, Platform="GCM", Token="push-token-7f3a9c")
        admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={"StreamName": "s", "StreamingStatus": "ENABLED"})
    finally:
        server.stop()
    data = server.data_dir
    shown = json_lines(ok("log", "--data", data, "--json"))
    assert [e["stream"]["dataset"] for e in shown] == ["settings"], shown
    for args in ([], ["--json"]):
        assert "push-token-7f3a9c" not in ok("log", "--data", data, *args)
        assert "_syncledger:0" not in ok("log", "--data", data, *args)
    everything = json_lines(ok("log", "--data", data, "--json", "--system"))
    assert {e["stream"]["identity"] for e in everything} == {identity, "_syncledger:0"}
    assert "push-token-7f3a9c" in ok("log", "--data", data, "--system")
    # The limit counts what is printed, not what is hidden.
    assert len(json_lines(ok("log", "--data", data, "--json", "--limit", "1"))) == 1


# -- put, remove, get, history -----------------------------------------------------------------

def test_put_device_is_recorded(tmp_path):
    data = tmp_path / "data"
    ok("put", "--data", data, "--device", "phone-7", "color", "blue")
    # Cognito's LastModifiedBy is the device when the change names one.
    assert "(sync count 1, by phone-7)" in ok("get", "--data", data), ok("get", "--data", data)
    entry = json_lines(ok("log", "--data", data, "--json"))[0]
    assert (entry["author"], entry["device"]) == ("cli", "phone-7")
    record = json.loads(ok("get", "--data", data, "--json"))["records"][0]
    assert (record["key"], record["value"], record["lastModifiedBy"]) == ("color", "blue", "phone-7")
    change = json_lines(ok("history", "--data", data, "--json", "color"))[0]
    assert (change["author"], change["device"], change["op"], change["value"]) == ("cli", "phone-7", "put", "blue")
    assert "by cli on phone-7" in ok("log", "--data", data)


def test_remove_of_a_missing_key_appends_nothing(ledger):
    before = ok("log", "--data", ledger)
    code, out, err = syncledger("remove", "--data", ledger, "nope")
    assert ok("log", "--data", ledger) == before
    assert code == 0 and "nothing removed" in out and "'nope'" in out, (out, err)
    # One key there, one not: only the one there is removed, in one entry.
    out = ok("remove", "--data", ledger, "b", "nope")
    assert "sync count 3" in out and "no record 'nope'" in out, out
    last = json_lines(ok("log", "--data", ledger, "--json"))[-1]
    assert last["events"] == [{"op": "remove", "key": "b"}]
    # Removing it again (a tombstone now) appends nothing either.
    after = ok("log", "--data", ledger, "--json")
    assert "nothing removed" in ok("remove", "--data", ledger, "b")
    assert ok("log", "--data", ledger, "--json") == after


def test_put_of_an_unchanged_value_appends_nothing(ledger):
    before = ok("log", "--data", ledger)
    out = ok("put", "--data", ledger, "a", "3")
    assert ok("log", "--data", ledger) == before
    assert "nothing written" in out and "sync count 2" in out, out
    out = ok("put", "--data", ledger, "a", "3", "b", "new")
    assert "sync count 3" in out and "unchanged: 'a'" in out, out
    assert json_lines(ok("log", "--data", ledger, "--json"))[-1]["events"] == [{"op": "put", "key": "b", "value": "new"}]


def test_get_json_and_a_missing_key(ledger):
    got = json.loads(ok("get", "--data", ledger, "--json"))
    assert list(got) == ["stream", "exists", "deleted", "syncCount", "recordCount", "bytes", "records"]
    assert got["stream"]["dataset"] == "default" and got["exists"] is True and got["syncCount"] == 2
    assert (got["recordCount"], got["bytes"]) == (2, len("a3b2"))
    assert [(r["key"], r["value"], r["syncCount"]) for r in got["records"]] == [("a", "3", 2), ("b", "2", 1)]
    assert ok("get", "--data", ledger, "a").startswith("a\t3\t")
    line = one_line_error(syncledger("get", "--data", ledger, "zz"))
    assert "no record 'zz'" in line, line
    assert json.loads(ok("get", "--data", ledger, "--json", "--dataset", "never"))["exists"] is False


# -- replay ------------------------------------------------------------------------------------

def test_replay_past_the_head_says_so(ledger):
    line = one_line_error(syncledger("replay", "--data", ledger, "--sync-count", "3"))
    assert "dataset local:0/local:1/default has sync count 2" in line, line
    line = one_line_error(syncledger("replay", "--data", ledger, "--sync-count", MAX_U64, "--dataset", "never"))
    assert "has sync count 0" in line, line
    state = json.loads(ok("replay", "--data", ledger, "--sync-count", "2", "--json"))
    assert (state["syncCount"], values(state)) == (2, {"a": "3", "b": "2"})
    # The same shape as get --json (the dataset now).
    assert state == json.loads(ok("get", "--data", ledger, "--json"))
    state = json.loads(ok("replay", "--data", ledger, "--sync-count", "1", "--json"))
    assert (state["syncCount"], values(state)) == (1, {"a": "1", "b": "2"})
    assert [(r["key"], r["syncCount"]) for r in state["records"]] == [("a", 1), ("b", 1)]


def test_replay_at_a_time_copied_from_the_log_is_exact(tmp_path):
    data = tmp_path / "data"
    for value in ("1", "2", "3", "4"):
        ok("put", "--data", data, "--fast", "k", value)
    entries = json_lines(ok("log", "--data", data, "--json"))
    for entry in entries:
        at = entry["time"]
        assert "." in at  # milliseconds
        # Every entry at or before that millisecond, and none after.
        expected = max(e["offset"] for e in entries if parse_time(e["time"]) <= parse_time(at))
        value = next(e for e in entries if e["offset"] == expected)["events"][0]["value"]
        for spelled in (at, at.replace("Z", "+00:00"), at[:-1] + "999Z", shift(at, hours=2)):
            state = json.loads(ok("replay", "--data", data, "--time", spelled, "--json"))
            assert (state["syncCount"], values(state)) == (expected, {"k": value}), (spelled, state)
        # A millisecond earlier: before this entry, unless another shares that millisecond.
        earlier = (parse_time(at) - datetime.timedelta(milliseconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        state = json.loads(ok("replay", "--data", data, "--time", earlier, "--json"))
        assert state["syncCount"] == max([e["offset"] for e in entries if parse_time(e["time"]) < parse_time(at)], default=0)
    code, out, err = syncledger("replay", "--data", data, "--time", "2026-11-22T10:00:00")
    assert code == 64 and "time zone" in err, err


def shift(text, hours):
    """The same instant written in the zone UTC+hours (extra sub-millisecond digits too)."""
    t = parse_time(text) + datetime.timedelta(hours=hours)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"+{hours:02d}:00"


# -- verify --------------------------------------------------------------------------------------

def test_verify_json(ledger):
    report = json.loads(ok("verify", "--data", ledger, "--json"))
    assert list(report) == ["valid", "streams", "entries", "digest", "problem"]
    assert (report["valid"], report["streams"], report["entries"], report["problem"]) == (True, 2, 3, None)
    assert len(report["digest"]) == 64


def test_verify_shows_progress_on_a_terminal_only(ledger):
    # Piped: nothing but the report.
    code, out, err = syncledger("verify", "--data", ledger, "--progress-after", "0")
    assert code == 0 and err == "" and "verifying" not in out, (out, err)
    # On a terminal: what it does and how long it took.
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen([BINARY, "verify", "--data", ledger, "--progress-after", "0"],
                                   stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        slave = None
        report = process.stdout.read().decode()
        assert process.wait(timeout=60) == 0
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert "3 entries" in report, report
    assert b"verifying 3 entries" in shown and b"done in" in shown, shown


# -- dict train --------------------------------------------------------------------------------

def test_dict_train_reports_the_ratio_without_any_dictionary(tmp_root):
    server = start_server(tmp_root, "cli-dict", ["--fast"])
    pool = new_id()
    rng = random.Random(7)
    try:
        admin = server.client()
        for i in range(240):
            value = json.dumps({"theme": rng.choice(["dark", "light", "solarized"]), "fontSize": rng.randint(10, 24),
                                "locale": rng.choice(["en-US", "de-DE", "fr-FR"]), "lastScreen": f"screen-{rng.randint(1, 40)}",
                                "updatedAt": 1_800_000_000 + i * 37})
            Dataset(admin, pool, f"us-east-1:{i % 40:08x}-0000-0000-0000-000000000000").put("settings", {"prefs": value})
    finally:
        server.stop()

    def train():
        text = ok("dict", "train", "--data", server.data_dir, "--pool", pool)
        line = next(l for l in text.splitlines() if "without a dictionary" in l)
        without = float(line.split("ratio ")[1].split(" without")[0])
        new = float(line.split(", ")[1].split(" with the new")[0])
        return without, new, line

    first_without, first_new, first = train()
    assert first_new > first_without, first
    assert "previous" not in first
    # Trained again: "without" is still without any dictionary (not with the first one).
    again_without, again_new, again = train()
    assert again_without == first_without, (first, again)
    assert "with the previous one" in again, again
