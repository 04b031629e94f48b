"""Kill -9 under load (crash_rounds.py): a durable server killed with SIGKILL while writers are
mid-request loses no acknowledged write, moves no sync count backwards, and `syncledger verify`
passes after every kill and at the end. Two more tests keep the checker honest: it must report a
record deleted behind its back, and a data directory rolled back one round (what a server whose
acknowledgements were not durable would leave after a power cut).

SYNCLEDGER_CRASH_SEED replays a run's kill times and operation choices (the seed is printed).
`bash tools/crash-rounds` runs 20 rounds with 8 writers."""

import os
import random

import conftest
import crash_rounds


def _seed():
    return int(os.environ.get("SYNCLEDGER_CRASH_SEED") or random.SystemRandom().randrange(10**9))


def _details(summary):
    lines = [f"seed {summary['seed']}: {crash_rounds.summary_line(summary)}"]
    for title in ("lost_details", "backwards_details", "anomalies"):
        lines += [f"{title}: {x}" for x in summary[title][:20]]
    lines += [f"verify after {v['after']}: exit {v['exit']}: {v['output'][:500]}" for v in summary["verify"] if not v["ok"]]
    return "\n".join(lines)


def test_kill_9_rounds_lose_no_acknowledged_write(tmp_root, capsys):
    seed = _seed()
    print(f"crash seed {seed} (SYNCLEDGER_CRASH_SEED={seed} replays it)")
    summary = crash_rounds.run(conftest.BINARY, rounds=3, writers=4, seconds_per_round=7.0,
                               data_root=os.path.join(tmp_root, "crash-rounds"), seed=seed, progress=print)
    with capsys.disabled():   # the figures show even when the output is captured
        print(f"\n{crash_rounds.summary_line(summary)} ({summary['in_flight_committed']} of those in flight "
              f"committed; seed {seed}, {summary['seconds']} s)")
    details = _details(summary)
    assert summary["rounds"] == 3, details
    assert summary["lost"] == 0 and not summary["lost_details"], details
    assert summary["backwards"] == 0, details
    assert not summary["anomalies"], details
    assert len(summary["verify"]) == 4 and summary["verify_ok"], details
    assert all(v["output"].startswith("ok:") for v in summary["verify"]), details
    assert summary["final_stop_exit"] == 0, details
    # The load did what it claims: every kind of write was acknowledged, and kills met writes
    # that were on the wire (otherwise the rounds prove nothing about the commit/ack boundary).
    by_operation = summary["acknowledged_by_operation"]
    for operation in ("update_records", "delete_dataset", "register_device", "subscribe_to_dataset",
                      "unsubscribe_from_dataset"):
        assert by_operation.get(operation, 0) > 0, (operation, details)
    assert summary["acknowledged_writes"] >= 3 * 4 * 10, details
    assert all(n >= 1 for n in summary["outstanding_at_kill"]), details
    assert summary["in_flight_at_kill"] >= 1, details


def test_checker_reports_a_record_deleted_behind_its_back(tmp_root):
    seed = _seed()
    summary = crash_rounds.run(conftest.BINARY, rounds=1, writers=2, seconds_per_round=1.5,
                               data_root=os.path.join(tmp_root, "crash-self-check-delete"), seed=seed,
                               self_check="delete")
    details = _details(summary)
    target = summary["self_check"]["target"]
    assert target is not None, details
    assert summary["lost"] == 1, details
    assert f"writer {target['writer']} " in summary["lost_details"][0], details
    assert f": {target['key']} acknowledged as ('{target['acknowledged'][0]}', {target['acknowledged'][1]})" \
        in summary["lost_details"][0], details
    assert summary["self_check"]["detected"], details
    assert summary["backwards"] == 0 and not summary["anomalies"] and summary["verify_ok"], details


def test_checker_reports_a_ledger_rolled_back_one_round(tmp_root):
    seed = _seed()
    summary = crash_rounds.run(conftest.BINARY, rounds=2, writers=2, seconds_per_round=1.5,
                               data_root=os.path.join(tmp_root, "crash-self-check-rollback"), seed=seed,
                               self_check="rollback")
    details = _details(summary)
    # Round 2's acknowledged writes are gone: records (and devices) reported lost, and the
    # datasets' sync counts gone backwards. The rolled-back ledger is itself consistent.
    assert summary["lost"] >= 2, details
    assert any("(round 2)" in x for x in summary["lost_details"]), details
    assert summary["backwards"] >= 2, details
    assert any("dataset sync count" in x for x in summary["backwards_details"]), details
    assert summary["self_check"]["detected"], details
    assert summary["verify_ok"], details
