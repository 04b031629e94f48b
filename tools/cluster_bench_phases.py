"""tools/cluster-bench: the measured phases — the load tool, one node, the 3-node cluster — and
the failover rounds. Reuses the wire tests' harness (Tests/wire)."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Tests", "wire"))

from conftest import ADMIN_KEY, ADMIN_SECRET, Server  # noqa: E402  (reads $SYNCLEDGER_BIN)
from cluster_env import ClusterBed, forwarded_requests  # noqa: E402
from cluster_load import WriteLoad, shard_of  # noqa: E402
from nats_env import NatsCluster  # noqa: E402
from haproxy_env import Balancer  # noqa: E402
from cluster_bench_proc import Sample, delta, progress  # noqa: E402

LOAD_BIN = os.environ["SYNCLEDGER_LOAD_BIN"]


# -- the load tool ------------------------------------------------------------------------------

ROW = re.compile(r"^\| (?P<name>[^|]+?) \| (?P<rate>[\d.]+) \| (?P<p50>[\d.]+) \| (?P<p99>[\d.]+) \|")
COUNT = re.compile(r"; (\d+) updates in ([\d.]+) s\)")


def run_load(endpoints, identities, seconds, serial_seconds, records, log_path):
    """Runs syncledger-load; returns {'serial': row, 'loaded': row, 'updates': n, 'seconds': s}.
    The load tool's CPU is read by the caller from RUSAGE_CHILDREN (it is the only child that
    ends meanwhile)."""
    args = [LOAD_BIN]
    for url in endpoints:
        args += ["--endpoint", url]
    args += ["--identities", str(identities), "--seconds", str(seconds), "--serial-seconds", str(serial_seconds),
             "--records", str(records)]
    env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    timeout = seconds + serial_seconds + 120
    with open(log_path, "ab") as log:
        log.write(f"\n$ {' '.join(args)}\n".encode())
        log.flush()
        start = log.tell()
        out = subprocess.run(args, stdout=subprocess.PIPE, stderr=log, env=env, timeout=timeout)
        log.write(out.stdout)
    text = out.stdout.decode(errors="replace")
    if out.returncode != 0:
        with open(log_path, errors="replace") as f:
            f.seek(start)
            said = f.read()
        fatal = [line for line in said.splitlines() if "Fatal error" in line]
        raise RuntimeError("\n".join(fatal + [f"syncledger-load exited {out.returncode} (see {log_path})"]))
    rows = [m.groupdict() for m in map(ROW.match, text.splitlines()) if m]
    count = COUNT.search(text)
    if len(rows) != 2 or not count:
        raise RuntimeError(f"cannot read syncledger-load's output:\n{text}")
    serial, loaded = ({"rate": float(r["rate"]), "p50": float(r["p50"]), "p99": float(r["p99"])} for r in rows)
    return {"serial": serial, "loaded": loaded, "updates": int(count.group(1)), "seconds": float(count.group(2))}


class LoadFailed(Exception):
    pass


def failure_lines(message, server_logs):
    """The load tool's error and the server log lines of the request it names (its request id)."""
    error = next((line for line in message.splitlines() if "Fatal error" in line or "answered" in line), message.splitlines()[0])
    error = error.split("Error raised at top level: ", 1)[-1].strip()
    found = []
    match = re.search(r"request id ([0-9a-f-]{36})", message)
    if match:
        for path in server_logs:
            with contextlib.suppress(OSError), open(path, errors="replace") as f:
                found += [f"{os.path.basename(path)}: {line.strip()}" for line in f if match.group(1) in line]
    return {"error": error, "server_log": found}


def measured_load(endpoints, processes, opts, log_path, server_logs, label):
    """The warm-up / one-caller run, then the concurrent run between two /proc samples. The load
    tool stops at the first error answer; then the error and the server's log lines for it are
    kept, and the concurrent run is made again (--attempts in all)."""
    serial = run_load(endpoints, 1, 0, opts.serial_seconds, opts.records, log_path)["serial"]
    failures = []
    for attempt in range(1, opts.attempts + 1):
        before = Sample(processes)
        try:
            loaded = run_load(endpoints, opts.identities, opts.seconds, 0, opts.records, log_path)
        except RuntimeError as e:
            failures.append(failure_lines(str(e), server_logs))
            progress(f"{label}: the load stopped at an error answer (attempt {attempt} of {opts.attempts}): "
                     f"{failures[-1]['error']}")
            for line in failures[-1]["server_log"]:
                progress(f"  {line[:400]}")
            continue
        after = Sample(processes)
        return {"serial": serial, "loaded": loaded["loaded"], "updates": loaded["updates"], "seconds": loaded["seconds"],
                "cost": delta(before, after), "failures": failures}
    raise LoadFailed(f"{label}: every attempt of the load stopped at an error answer: {failures}")


# -- the single node ----------------------------------------------------------------------------

def single_phase(root, opts, round_no):
    progress(f"round {round_no}: single node (durable), {opts.identities} identities for {opts.seconds:g} s")
    directory = os.path.join(root, f"single-{round_no}")
    os.makedirs(directory)
    server = Server(os.path.join(directory, "data"))
    try:
        result = measured_load([server.url], {"syncledger": server.process.pid}, opts, os.path.join(directory, "load.log"),
                               [server.log_path], f"round {round_no} single")
    finally:
        server.stop(timeout=30)
    return result


# -- the cluster --------------------------------------------------------------------------------

class BenchBed(ClusterBed):
    """ClusterBed whose nodes start at the same time (a node that starts alone first takes every
    shard and then hands them back one per lease round), with the waits a benchmark needs."""

    def __init__(self, root, nats, shards, lease_seconds, nodes=3):
        super().__init__(root, nats, shards=shards, lease_seconds=lease_seconds, nodes=0)
        self.nodes = [None] * nodes
        errors = []

        def start(i):
            try:
                self.nodes[i] = self.start_node(i)
            except Exception as e:  # noqa: BLE001 (raised below)
                errors.append(e)
        threads = [threading.Thread(target=start, args=(i,)) for i in range(nodes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]

    def stop(self):
        for n in self.nodes:
            if n is not None and n.process.poll() is None:
                with contextlib.suppress(Exception):
                    n.stop(timeout=15)

    def counters(self):
        """Per node: shards owned, Appended / Behind / Retried summed over its shards, and the
        requests it forwarded to another node (its /metrics)."""
        out = {}
        for i, n in enumerate(self.nodes):
            if n.process.poll() is not None:
                continue
            s = self.status(n)
            forwarded = forwarded_requests(n)
            out[f"node{i}"] = {"owned": s["OwnedHere"], "Forwarded": forwarded,
                               **{k: sum(sh.get(k, 0) or 0 for sh in s["Shards"]) for k in ("Appended", "Behind", "Retried")}}
        return out


def start_cluster(root, opts, size):
    nats = NatsCluster(os.path.join(root, "nats"), size=size)
    nats.__enter__()
    try:
        bed = BenchBed(root, nats, shards=opts.shards, lease_seconds=opts.lease_seconds, nodes=size)
    except BaseException:
        nats.__exit__(None, None, None)
        raise
    return nats, bed


def stop_cluster(nats, bed):
    try:
        if bed is not None:
            bed.stop()
    finally:
        nats.__exit__(None, None, None)


def cluster_processes(nats, bed):
    procs = {f"syncledger{i}": n.process.pid for i, n in enumerate(bed.nodes)}
    procs.update({f"nats{i}": n.process.pid for i, n in enumerate(nats.nodes)})
    return procs


def cluster_phase(root, opts, round_no, size, then=None):
    """A fresh cluster of `size` nats-servers and `size` nodes, measured twice: the load spread
    round-robin over the nodes, then (unless --no-balancer) through HAProxy with the shipped
    routing (deploy/haproxy). Returns the list of results, each with its "nodes" and "routing"."""
    label = f"round {round_no}: {size}-node cluster"
    progress(f"{label} ({size} nats-servers + {size} nodes, {opts.shards} shards, lease {opts.lease_seconds} s): starting")
    directory = os.path.join(root, f"cluster{size}-{round_no}")
    os.makedirs(directory)
    started = time.monotonic()
    nats, bed = start_cluster(directory, opts, size)
    results = []
    try:
        bed.wait_owned(timeout=120)
        owned = bed.wait_balanced()
        ready = time.monotonic() - started
        progress(f"{label} ready in {ready:.1f} s (shards owned per node {owned})")
        routings = [("round-robin", None)] + ([] if opts.no_balancer else [("balancer", "haproxy")])
        for routing, _ in routings:
            balancer = Balancer([n.port for n in bed.nodes], os.path.join(directory, "haproxy")) if routing == "balancer" else None
            try:
                endpoints = [balancer.url] if balancer else [n.url for n in bed.nodes]
                processes = cluster_processes(nats, bed)
                if balancer:
                    processes["haproxy"] = balancer.process.pid
                    # The balancer learns the owners from answers: a few writes of every shard first.
                    run_load(endpoints, max(opts.identities, 4 * opts.shards), 2, 0, opts.records, os.path.join(directory, "warmup.log"))
                progress(f"{label}: {opts.identities} identities {'through HAProxy' if balancer else f'over {size} endpoints'} "
                         f"for {opts.seconds:g} s")
                counters_before = bed.counters()
                result = measured_load(endpoints, processes, opts, os.path.join(directory, f"load-{routing}.log"),
                                       [n.log_path for n in bed.nodes], f"{label} {routing}")
                counters_after = bed.counters()
            finally:
                if balancer:
                    balancer.stop()
            result["startup_seconds"] = ready
            result["owned"] = owned
            result["nodes"] = size
            result["routing"] = routing
            result["counters"] = {node: {k: counters_after[node][k] - counters_before[node].get(k, 0)
                                         for k in ("Appended", "Behind", "Retried", "Forwarded")} for node in counters_after}
            t = time.monotonic()
            bed.wait_converged(timeout=120)
            result["converge_seconds"] = time.monotonic() - t
            results.append(result)
        if then is not None:
            results[0]["failover"] = then(directory, nats, bed)
    finally:
        progress(f"{label}: stopping the cluster")
        stop_cluster(nats, bed)
    return results


# -- failover -----------------------------------------------------------------------------------

class PacedBed:
    """The bed as WriteLoad sees it, pacing the load: WriteLoad asks `live()` once before each
    ListRecords → UpdateRecords of a writer, so a pause there paces every writer."""

    def __init__(self, bed, pause):
        self._bed, self._pause = bed, pause

    def live(self):
        time.sleep(self._pause)
        return self._bed.live()

    def __getattr__(self, name):
        return getattr(self._bed, name)


def failover_rounds(opts):
    def run(directory, nats, bed):
        results = []
        for r in range(1, opts.failover_rounds + 1):
            victim = (r - 1) % len(bed.nodes)
            progress(f"failover {r}/{opts.failover_rounds}: paced write load ({opts.failover_writers} writers, "
                     f"{opts.failover_pause_ms} ms pause), then kill -9 of node{victim}")
            with WriteLoad(PacedBed(bed, opts.failover_pause_ms / 1000), writers=opts.failover_writers) as load:
                load.wait_for(5 * opts.failover_writers, timeout=60)
                # An identity of the load whose shard node `victim` owns (one exists with enough
                # writers; else any identity, and whichever node owns its shard is killed).
                owners = {}
                for s in bed.status(bed.nodes[0])["Shards"]:
                    owners[s["Shard"]] = s.get("Owner")
                identity = next((i for i in load.identities if owners.get(shard_of(load.pool, i, opts.shards)) == f"node{victim}"),
                                load.identities[0])
                shard = shard_of(load.pool, identity, opts.shards)
                owner = bed.owner_of(shard)
                assert owner is not None, f"shard {shard} has no owner"
                victim = bed.index_of(owner)
                others = [i for i in load.identities if shard_of(load.pool, i, opts.shards) != shard]
                time.sleep(1)
                before = load.count()
                killed_at = time.monotonic()
                bed.kill(victim)
                with open(os.path.join(directory, f"failover-{r}.txt"), "w") as note:
                    note.write(f"kill -9 node{victim} (owner of shard {shard}) at monotonic {killed_at}\n")
                timeout = max(60, 10 * opts.lease_seconds)
                # (A write in flight at the kill may be acknowledged first: it does not count.)
                deadline = time.monotonic() + timeout
                while (first := load.first_ack_after(killed_at, [identity])) is None:
                    assert time.monotonic() < deadline, f"no write on shard {shard} acknowledged {timeout} s after the kill"
                    time.sleep(0.01)
                failover = first - killed_at
                # Writes of identities on other shards acknowledged meanwhile (shards that the killed
                # node did not own go on; those it owned wait like this one).
                with load.lock:
                    meanwhile = sum(1 for i in others for (sent, done, _, _) in load.acked[i] if killed_at < done <= first)
                load.wait_for(5, identities=[identity], timeout=timeout)
                failures = dict(load.failures)
                acked = load.count() - before
            progress(f"failover {r}: {failover:.2f} s (shard {shard}, node{victim}); failures seen by the load: {failures or 'none'}")
            # Keep the killed node's log (the restart rewrites it), restart it, and wait for the cluster.
            log = bed.nodes[victim].log_path
            with contextlib.suppress(OSError):
                shutil.copy(log, f"{log}.killed-{r}")
            t = time.monotonic()
            bed.restart(victim)
            bed.wait_owned(timeout=120)
            bed.wait_converged(timeout=120)
            owned = bed.wait_balanced()
            settled = time.monotonic() - t
            progress(f"failover {r}: node{victim} restarted; converged and balanced again in {settled:.1f} s ({owned})")
            results.append({"round": r, "seconds": round(failover, 3), "shard": shard, "killed": f"node{victim}",
                            "other_shards_acked_meanwhile": meanwhile, "acked_during_round": acked,
                            "client_failures": failures, "rebalance_seconds": round(settled, 1)})
        return results
    return run
