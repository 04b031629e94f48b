"""Many clients at once (bounded, loopback only): one winner per conflicting write, a count of
exactly +1 per successful update, limits that hold under a race, exact session counts."""

import threading
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import ClientError

from conftest import Dataset, new_id

WORKERS = 8


def run_all(calls):
    """Runs the callables at once (released together); returns ("ok", result) or ("error", code)."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait(timeout=30)
        try:
            return ("ok", call())
        except ClientError as e:
            return ("error", e.response["Error"]["Code"])

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls, timeout=120))


def test_racing_writers_on_one_key_have_one_winner(server, pool, identity):
    d = Dataset(server.client(), pool, identity)
    d.put("race", {"k": "start", "other": "x"})
    token = d.token("race")
    clients = [server.client() for _ in range(WORKERS)]

    def writer(i):
        return lambda: clients[i].update_records(
            **d.ids("race"), SyncSessionToken=token,
            RecordPatches=[{"Op": "replace", "Key": "k", "Value": f"writer-{i}", "SyncCount": 1},
                           {"Op": "replace", "Key": f"mine-{i}", "Value": "v", "SyncCount": 0}])

    results = run_all([writer(i) for i in range(WORKERS)])
    winners = [r for kind, r in results if kind == "ok"]
    losers = [r for kind, r in results if kind == "error"]
    assert len(winners) == 1, results
    assert losers == ["ResourceConflictException"] * (WORKERS - 1)
    won = winners[0]["Records"]
    assert {r["SyncCount"] for r in won} == {2}
    winner_value = next(r["Value"] for r in won if r["Key"] == "k")
    i = int(winner_value.split("-")[1])
    # Only the winner's whole update is there.
    assert d.records("race") == {"k": (winner_value, 2), "other": ("x", 1), f"mine-{i}": ("v", 2)}
    assert d.list("race")["DatasetSyncCount"] == 2


def test_concurrent_writers_on_distinct_keys_each_get_their_own_count(server, pool, identity):
    d = Dataset(server.client(), pool, identity)
    d.put("busy", {"seed": "0"})
    token = d.token("busy")
    clients = [server.client() for _ in range(WORKERS)]

    def writer(i):
        return lambda: clients[i].update_records(
            **d.ids("busy"), SyncSessionToken=token,
            RecordPatches=[{"Op": "replace", "Key": f"k{i}", "Value": str(i), "SyncCount": 0}])

    results = run_all([writer(i) for i in range(WORKERS)])
    assert all(kind == "ok" for kind, _ in results), results
    counts = sorted(r["Records"][0]["SyncCount"] for _, r in results)
    assert counts == list(range(2, 2 + WORKERS))
    assert d.list("busy")["DatasetSyncCount"] == 1 + WORKERS
    records = d.records("busy")
    assert len(records) == WORKERS + 1
    assert sorted(c for _, c in records.values()) == [1] + counts


def test_dataset_limit_holds_under_a_race(server, pool, identity):
    d = Dataset(server.client(), pool, identity)
    for n in range(17):
        d.put(f"base{n:02d}", {"k": "v"})
    clients = [server.client() for _ in range(WORKERS)]
    tokens = [d.token(f"new{i}") for i in range(WORKERS)]

    def creator(i):
        return lambda: clients[i].update_records(
            IdentityPoolId=pool, IdentityId=identity, DatasetName=f"new{i}", SyncSessionToken=tokens[i],
            RecordPatches=[{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])

    results = run_all([creator(i) for i in range(WORKERS)])
    assert sum(kind == "ok" for kind, _ in results) == 3, results
    assert sorted(r for kind, r in results if kind == "error") == ["LimitExceededException"] * (WORKERS - 3)
    listed = d.client.list_datasets(IdentityPoolId=pool, IdentityId=identity, MaxResults=60)
    assert listed["Count"] == 20


def test_sync_sessions_are_counted_exactly(server):
    admin = server.client()
    pool = new_id()
    d = Dataset(admin, pool, new_id())
    d.put("s", {"k": "v"})                    # 1 session
    clients = [server.client() for _ in range(WORKERS)]
    per_worker = 20

    def lister(i):
        def run():
            for _ in range(per_worker):
                clients[i].list_records(IdentityPoolId=pool, IdentityId=d.identity, DatasetName="s")
            return True
        return run

    results = run_all([lister(i) for i in range(WORKERS)])
    assert all(kind == "ok" for kind, _ in results), results
    expected = 1 + WORKERS * per_worker        # 161: crosses the flush every 64 sessions
    assert admin.describe_identity_pool_usage(IdentityPoolId=pool)["IdentityPoolUsage"]["SyncSessionsCount"] == expected
    found = [u for u in admin.list_identity_pool_usage(MaxResults=1000)["IdentityPoolUsages"] if u["IdentityPoolId"] == pool]
    assert [u["SyncSessionsCount"] for u in found] == [expected]
    # Echoing a live token is not a new session.
    token = d.token("s")
    for _ in range(3):
        d.list("s", SyncSessionToken=token)
    assert admin.describe_identity_pool_usage(IdentityPoolId=pool)["IdentityPoolUsage"]["SyncSessionsCount"] == expected + 1
