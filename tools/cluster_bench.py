"""tools/cluster-bench: durable UpdateRecords on one node against a 3-node cluster, per-write
costs, and failover, all in one run on this machine (everything on 127.0.0.1).

Started by tools/cluster-bench, which builds the release binaries and sets $SYNCLEDGER_BIN and
$SYNCLEDGER_LOAD_BIN. Reuses the wire tests' harness (Tests/wire): conftest.Server for every
syncledger process, nats_env.NatsCluster for the 3 nats-servers, cluster_env.ClusterBed for the
3 cluster nodes and cluster_load.WriteLoad for the failover's recorded write load.

Per round (--rounds), alternately:
  single   one `syncledger serve` (durable default: fsync per group commit), fresh data directory;
  cluster  3 nats-servers (JetStream, sync_interval: always) + 3 `serve --cluster` nodes, fresh,
           shards --shards, lease --lease-seconds, every shard owned and ownership balanced;
in each, syncledger-load runs one identity one request at a time (--serial-seconds, also the
warm-up), then --identities identities at once for --seconds, each looping ListRecords →
UpdateRecords of 10 records; in the cluster the identities are spread round-robin over the 3
nodes' endpoints. CPU (utime+stime from /proc/PID/stat) and bytes written (/proc/PID/io
write_bytes) of every server process, the load tool's own CPU and the machine's busy time are
read just before and just after the concurrent run.

After the last cluster round, on that cluster: --failover-rounds times, a paced recorded write
load (WriteLoad, a pause between writes) runs, the owner of a shard one of its identities writes
to is killed with SIGKILL, and the time from the kill to the acknowledgement of the first write
on that shard sent after the kill is taken; the node is restarted and the cluster waited for
(every shard owned, replicas converged, ownership balanced) before the next round.
"""

import argparse
import contextlib
import json
import math
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "Tests", "wire"))

if not os.environ.get("SYNCLEDGER_BIN") or not os.environ.get("SYNCLEDGER_LOAD_BIN"):
    sys.exit("cluster_bench.py: run it through tools/cluster-bench (it builds the binaries and sets "
             "SYNCLEDGER_BIN and SYNCLEDGER_LOAD_BIN)")

from conftest import ADMIN_KEY, ADMIN_SECRET, Server  # noqa: E402  (reads $SYNCLEDGER_BIN)
from cluster_env import ClusterBed  # noqa: E402
from cluster_load import WriteLoad, shard_of  # noqa: E402
from nats_env import NatsCluster  # noqa: E402

LOAD_BIN = os.environ["SYNCLEDGER_LOAD_BIN"]
TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def progress(message):
    print(f"cluster-bench [{time.strftime('%H:%M:%S')}]: {message}", file=sys.stderr, flush=True)


# -- /proc ---------------------------------------------------------------------------------------

def cpu_seconds(pid):
    """utime + stime of a process so far (its threads included), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def write_bytes(pid):
    """Bytes the process caused to be written to storage so far (/proc/PID/io write_bytes)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def all_processes():
    """CPU seconds so far of every process on the machine: {pid: (seconds, is a kernel thread)}."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        # Kernel threads: kthreadd (2) and its children.
        kernel = entry == "2" or fields[1] == "2"
        found[int(entry)] = ((int(fields[11]) + int(fields[12])) / TICK, kernel)
    return found


def machine_busy_seconds():
    """CPU seconds the machine spent busy so far, all cores (user nice system irq softirq steal)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (values[0] + values[1] + values[2] + values[5] + values[6] + values[7]) / TICK


class Sample:
    """CPU and written bytes of named processes, and the machine's busy time, at one instant."""

    def __init__(self, processes):
        self.at = time.monotonic()
        self.machine = machine_busy_seconds()
        self.children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = {name: cpu_seconds(pid) for name, pid in processes.items()}
        self.io = {name: write_bytes(pid) for name, pid in processes.items()}
        self.pids = set(processes.values())
        self.everything = all_processes()


def delta(before, after):
    wall = after.at - before.at
    io = {}
    for name in before.cpu:
        a, b = before.io.get(name), after.io.get(name)
        io[name] = (b - a) if a is not None and b is not None else None
    client = ((after.children.ru_utime + after.children.ru_stime)
              - (before.children.ru_utime + before.children.ru_stime))
    # Everything else on the machine meanwhile: kernel threads (fsync and journal work among them),
    # and other processes (a disturbance: this tool's own harness is idle during the run).
    kernel = foreign = 0.0
    for pid, (seconds, is_kernel) in after.everything.items():
        if pid in before.pids or pid == os.getpid():
            continue
        used = seconds - before.everything.get(pid, (0.0, is_kernel))[0]
        if is_kernel:
            kernel += used
        else:
            foreign += used
    capacity = wall * CORES
    return {"wall": wall, "cpu": {n: after.cpu[n] - before.cpu[n] for n in before.cpu}, "io": io,
            "client_cpu": client, "machine_busy": (after.machine - before.machine) / capacity,
            "kernel_threads": kernel / capacity, "other_processes": foreign / capacity}


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
    """ClusterBed whose 3 nodes start at the same time (a node that starts alone first takes every
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

    def wait_balanced(self, timeout=300):
        """Until every shard has an owner and no live node owns more than its share
        (shards ÷ live nodes, rounded up): the nodes hand surplus shards back one per lease round."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            with contextlib.suppress(AssertionError, OSError):
                live = self.live()
                statuses = [self.status(n) for n in live]
                owned = [s["OwnedHere"] for s in statuses]
                share = math.ceil(self.shards / len(live))
                owners = {sh["Shard"]: sh.get("Owner") for sh in statuses[0]["Shards"]}
                last = owned
                if sum(owned) == self.shards and max(owned) <= share and all(owners.values()):
                    return owned
            time.sleep(0.5)  # a /cluster/status costs its node 0.1 s of CPU or more
        raise AssertionError(f"ownership did not balance within {timeout}s: owned per node {last}")

    def counters(self):
        """Per node: shards owned, and Appended / Behind / Retried summed over its shards."""
        out = {}
        for i, n in enumerate(self.nodes):
            if n.process.poll() is not None:
                continue
            s = self.status(n)
            out[f"node{i}"] = {"owned": s["OwnedHere"],
                               **{k: sum(sh.get(k, 0) or 0 for sh in s["Shards"]) for k in ("Appended", "Behind", "Retried")}}
        return out


def start_cluster(root, opts):
    nats = NatsCluster(os.path.join(root, "nats"))
    nats.__enter__()
    try:
        bed = BenchBed(root, nats, shards=opts.shards, lease_seconds=opts.lease_seconds)
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


def cluster_phase(root, opts, round_no, then=None):
    progress(f"round {round_no}: cluster (3 nats-servers + 3 nodes, {opts.shards} shards, lease {opts.lease_seconds} s): starting")
    directory = os.path.join(root, f"cluster-{round_no}")
    os.makedirs(directory)
    started = time.monotonic()
    nats, bed = start_cluster(directory, opts)
    try:
        bed.wait_owned(timeout=120)
        owned = bed.wait_balanced()
        ready = time.monotonic() - started
        progress(f"round {round_no}: cluster ready in {ready:.1f} s (shards owned per node {owned}); "
                 f"{opts.identities} identities over 3 endpoints for {opts.seconds:g} s")
        counters_before = bed.counters()
        result = measured_load([n.url for n in bed.nodes], cluster_processes(nats, bed), opts,
                               os.path.join(directory, "load.log"), [n.log_path for n in bed.nodes], f"round {round_no} cluster")
        counters_after = bed.counters()
        result["startup_seconds"] = ready
        result["owned"] = owned
        result["counters"] = {node: {k: counters_after[node][k] - counters_before[node].get(k, 0)
                                     for k in ("Appended", "Behind", "Retried")} for node in counters_after}
        t = time.monotonic()
        bed.wait_converged(timeout=120)
        result["converge_seconds"] = time.monotonic() - t
        if then is not None:
            result["failover"] = then(directory, nats, bed)
    finally:
        progress(f"round {round_no}: stopping the cluster")
        stop_cluster(nats, bed)
    return result


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


# -- the report ---------------------------------------------------------------------------------

def per_write_us(seconds, writes):
    return seconds / writes * 1e6 if writes else float("nan")


def summarize_phase(kind, result):
    cost, writes = result["cost"], result["updates"]
    sl = {n: c for n, c in cost["cpu"].items() if n.startswith("syncledger")}
    ns = {n: c for n, c in cost["cpu"].items() if n.startswith("nats")}
    io = cost["io"]
    sl_io = sum(v for n, v in io.items() if n.startswith("syncledger") and v is not None)
    ns_io = sum(v for n, v in io.items() if n.startswith("nats") and v is not None)
    summary = {
        "kind": kind,
        "writes_per_second": result["loaded"]["rate"], "p50_ms": result["loaded"]["p50"], "p99_ms": result["loaded"]["p99"],
        "serial_p50_ms": result["serial"]["p50"], "serial_writes_per_second": result["serial"]["rate"],
        "writes": writes,
        "syncledger_cpu_us_per_write": per_write_us(sum(sl.values()), writes),
        "syncledger_cpu_us_per_write_by_process": {n: per_write_us(c, writes) for n, c in sl.items()},
        "nats_cpu_us_per_write": per_write_us(sum(ns.values()), writes) if ns else None,
        "nats_cpu_us_per_write_by_process": {n: per_write_us(c, writes) for n, c in ns.items()},
        "client_cpu_us_per_write": per_write_us(cost["client_cpu"], writes),
        "machine_busy": cost["machine_busy"], "kernel_threads": cost["kernel_threads"], "other_processes": cost["other_processes"],
        "syncledger_disk_bytes_per_write": sl_io / writes if writes else None,
        "nats_disk_bytes_per_write": ns_io / writes if (writes and ns) else None,
    }
    summary["failures"] = result["failures"]
    for key in ("startup_seconds", "converge_seconds", "owned", "counters"):
        if key in result:
            summary[key] = result[key]
    return summary


def projection(cluster_phases, single_phases):
    """Three separate 2-core machines, machine i running syncledger node i and nats-server i:
    machine i spends c_i = (CPU of syncledger i + CPU of nats i) ÷ acknowledged writes per write
    of the whole cluster, and the cluster tops out (CPU-bound) when the busiest machine's cores are
    full: writes/s ≈ cores ÷ max_i c_i. The one node on its own 2-core machine: cores ÷ c_single.
    Medians over the rounds."""
    per_machine = []
    for p in cluster_phases:
        c = [(p["syncledger_cpu_us_per_write_by_process"][f"syncledger{i}"] + p["nats_cpu_us_per_write_by_process"][f"nats{i}"])
             for i in range(3)]
        per_machine.append(max(c))
    busiest = statistics.median(per_machine)
    single = statistics.median(p["syncledger_cpu_us_per_write"] for p in single_phases)
    return {"cores_per_machine": 2, "busiest_machine_cpu_us_per_write": busiest,
            "projected_cluster_writes_per_second": 2 / (busiest / 1e6),
            "single_cpu_us_per_write": single, "projected_single_writes_per_second": 2 / (single / 1e6),
            "formula": "writes/s ≈ 2 cores ÷ max over machines i of (CPU s of syncledger i + CPU s of nats-server i) per acknowledged write"}


def fmt(value, digits=0, suffix=""):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def report(opts, rounds, failover, command):
    singles = [s for s, _ in rounds]
    clusters = [c for _, c in rounds]
    ratios = [c["writes_per_second"] / s["writes_per_second"] for s, c in rounds]
    lines = []
    lines.append(f"{opts.identities} concurrent identities, each ListRecords → UpdateRecords of {opts.records} records, "
                 f"{opts.seconds:g} s per phase; cluster: 3 nats-servers (JetStream R3, sync_interval always) + 3 nodes, "
                 f"{opts.shards} shards, lease {opts.lease_seconds:g} s, load spread round-robin over the 3 nodes; "
                 f"all {CORES} cores of one machine, loopback.")
    lines.append("")
    lines.append("| round | setup | UpdateRecords/s | p50 ms | p99 ms | 1 caller p50 ms | CPU µs/write syncledger (busiest) "
                 "| CPU µs/write nats-server (busiest) | CPU µs/write load tool | machine busy (kernel threads, other processes) "
                 "| disk KB/write syncledger / nats |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r, (s, c) in enumerate(rounds, 1):
        for label, p in (("single node, durable", s), ("3-node cluster", c)):
            sl_busiest = max(p["syncledger_cpu_us_per_write_by_process"].values())
            ns = p["nats_cpu_us_per_write_by_process"]
            sl_cell = fmt(p["syncledger_cpu_us_per_write"]) + (f" ({fmt(sl_busiest)})" if len(p["syncledger_cpu_us_per_write_by_process"]) > 1 else "")
            ns_cell = f"{fmt(p['nats_cpu_us_per_write'])} ({fmt(max(ns.values()))})" if ns else "-"
            disk = fmt((p["syncledger_disk_bytes_per_write"] or 0) / 1024, 1)
            if p["nats_disk_bytes_per_write"] is not None:
                disk += " / " + fmt(p["nats_disk_bytes_per_write"] / 1024, 1)
            lines.append(f"| {r} | {label} | {fmt(p['writes_per_second'])} | {fmt(p['p50_ms'], 2)} | {fmt(p['p99_ms'], 2)} "
                         f"| {fmt(p['serial_p50_ms'], 2)} | {sl_cell} | {ns_cell} | {fmt(p['client_cpu_us_per_write'])} "
                         f"| {p['machine_busy'] * 100:.0f}% ({p['kernel_threads'] * 100:.0f}%, {p['other_processes'] * 100:.0f}%) | {disk} |")
        lines.append(f"| {r} | **cluster ÷ single** | **{ratios[r - 1]:.2f}×** | | | | | | | | |")
    median_ratio = statistics.median(ratios)
    lines.append(f"| median | **cluster ÷ single** | **{median_ratio:.2f}×** | | | | | | | | |")
    lines.append("")
    behind = []
    for r, (_, c) in enumerate(rounds, 1):
        appended = sum(n["Appended"] for n in c["counters"].values())
        refused = sum(n["Behind"] for n in c["counters"].values())
        retried = sum(n["Retried"] for n in c["counters"].values())
        behind.append(refused / (appended + refused) if appended + refused else 0.0)
        c["appends_refused_behind_share"] = behind[-1]
        lines.append(f"- Cluster round {r}: {appended:,} appends to the shard logs, {refused:,} more refused as behind "
                     f"({behind[-1] * 100:.0f}% of attempts: another write of the same shard got in first; caught up and "
                     f"prepared again), {retried} publishes retried; ready {c['startup_seconds']:.0f} s after start "
                     f"(every shard owned and ownership balanced, {c['owned']}); replicas converged "
                     f"{c['converge_seconds']:.1f} s after the load.")
    lines.append("")
    for r, pair in enumerate(rounds, 1):
        for p in pair:
            for f in p["failures"]:
                lines.append(f"- **Error, round {r} {p['kind']}:** the load stopped at `{f['error'][:300]}`; the run was made "
                             f"again with new identities (the row is that run)." + "".join(f" Server log: `{l[:400]}`" for l in f["server_log"]))
    if any(p["failures"] for pair in rounds for p in pair):
        lines.append("")
    disturbed = [f"round {r} {p['kind']} ({p['other_processes'] * 100:.0f}%)" for r, pair in enumerate(rounds, 1) for p in pair
                 if p["other_processes"] > 0.05]
    if disturbed:
        lines.append(f"**Disturbed:** processes other than the benchmark's used more than 5% of the machine during "
                     f"{', '.join(disturbed)}; those figures are not clean.")
        lines.append("")
    lines.append("CPU µs/write: CPU time (utime+stime) of the processes over the concurrent run ÷ acknowledged "
                 "UpdateRecords (each with its ListRecords); cluster cells are the sum over the 3 processes, the busiest "
                 "one in brackets. Disk: /proc/PID/io write_bytes ÷ writes, summed over the processes. "
                 "Machine busy: all cores over the run (steal included); in brackets the kernel threads' share (fsync and "
                 "journal work among it) and that of processes other than the servers and the load tool.")
    proj = projection(clusters, singles)
    lines.append("")
    lines.append(f"Projection (not a measurement) for 3 separate 2-core machines, each running one node and one nats-server, "
                 f"clients elsewhere: {proj['formula']} = 2 ÷ {proj['busiest_machine_cpu_us_per_write']:.0f} µs "
                 f"≈ **{proj['projected_cluster_writes_per_second']:,.0f} writes/s** (CPU-bound; the same formula gives the one "
                 f"node on its own 2-core machine 2 ÷ {proj['single_cpu_us_per_write']:.0f} µs ≈ "
                 f"{proj['projected_single_writes_per_second']:,.0f} writes/s). It leaves out the network (loopback here) "
                 f"and each machine's disk (fsyncs per second), and the per-write CPU was measured with every core full.")
    fo = None
    if failover:
        seconds = [f["seconds"] for f in failover]
        fo = {"lease_seconds": opts.lease_seconds, "median_seconds": statistics.median(seconds), "rounds": failover}
        lines.append("")
        lines.append(f"Failover (lease {opts.lease_seconds:g} s): kill -9 of a shard's owner under a paced write load → first "
                     f"acknowledged write on that shard sent after the kill: median **{fo['median_seconds']:.2f} s** "
                     f"(rounds: {', '.join(f'{s:.2f}' for s in seconds)} s).")
        for f in failover:
            seen = ", ".join(f"{k} ×{v}" for k, v in sorted(f["client_failures"].items())) or "none"
            lines.append(f"- failover round {f['round']}: kill -9 of {f['killed']} (owner of shard {f['shard']}): {f['seconds']:.2f} s; "
                         f"meanwhile {f['other_shards_acked_meanwhile']} writes on other shards were acknowledged; errors the "
                         f"load's clients saw in the round: {seen}; converged and balanced again {f['rebalance_seconds']:.0f} s "
                         f"after the restart.")
    revision = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    summary = {
        "command": command,
        "revision": revision or "unknown",
        "cores": CORES,
        "options": {k: getattr(opts, k) for k in ("seconds", "identities", "rounds", "shards", "lease_seconds", "failover_rounds", "records")},
        "single_writes_per_second": [round(s["writes_per_second"]) for s in singles],
        "cluster_writes_per_second": [round(c["writes_per_second"]) for c in clusters],
        "ratio_per_round": [round(x, 3) for x in ratios],
        "median_ratio": round(median_ratio, 3),
        "single_p50_p99_ms": [[s["p50_ms"], s["p99_ms"]] for s in singles],
        "cluster_p50_p99_ms": [[c["p50_ms"], c["p99_ms"]] for c in clusters],
        "cpu_us_per_write": {
            "single_syncledger": round(statistics.median(s["syncledger_cpu_us_per_write"] for s in singles), 1),
            "cluster_syncledger_total": round(statistics.median(c["syncledger_cpu_us_per_write"] for c in clusters), 1),
            "cluster_nats_total": round(statistics.median(c["nats_cpu_us_per_write"] for c in clusters), 1),
        },
        "disk_bytes_per_write": {
            "single_syncledger": round(statistics.median(s["syncledger_disk_bytes_per_write"] for s in singles)),
            "cluster_syncledger_total": round(statistics.median(c["syncledger_disk_bytes_per_write"] for c in clusters)),
            "cluster_nats_total": round(statistics.median(c["nats_disk_bytes_per_write"] for c in clusters)),
        },
        "projection_3x2core": {k: (round(v) if isinstance(v, float) else v) for k, v in proj.items()},
        "cluster_appends_refused_behind_share": [round(b, 3) for b in behind],
        "cluster_ready_seconds": [round(c["startup_seconds"]) for c in clusters],
        "load_errors": [{"round": r, "kind": p["kind"], **f} for r, pair in enumerate(rounds, 1) for p in pair for f in p["failures"]],
        "other_processes_max_share": round(max(p["other_processes"] for pair in rounds for p in pair), 3),
        "failover": None if fo is None else {"lease_seconds": fo["lease_seconds"], "median_seconds": fo["median_seconds"],
                                             "seconds": [f["seconds"] for f in failover]},
    }
    return "\n".join(lines), summary


def main():
    parser = argparse.ArgumentParser(prog="tools/cluster-bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="length of each concurrent phase (default 10)")
    parser.add_argument("--identities", type=int, default=64, help="concurrent identities (default 64)")
    parser.add_argument("--rounds", type=int, default=2, help="single/cluster phase pairs (default 2)")
    parser.add_argument("--shards", type=int, default=64, help="cluster shards (default 64)")
    parser.add_argument("--lease-seconds", type=float, default=6, help="cluster lease time (default 6)")
    parser.add_argument("--failover-rounds", type=int, default=3, help="kill -9 rounds (default 3; 0: none)")
    parser.add_argument("--records", type=int, default=10, help="records per UpdateRecords (default 10)")
    parser.add_argument("--serial-seconds", type=float, default=2, help="one-caller run before each phase, also the warm-up (default 2)")
    parser.add_argument("--failover-writers", type=int, default=8, help="writers of the failover load (default 8)")
    parser.add_argument("--failover-pause-ms", type=int, default=20, help="pause before each write of a failover writer (default 20)")
    parser.add_argument("--attempts", type=int, default=2,
                        help="runs of a concurrent phase when the load stops at an error answer (default 2; each error is reported)")
    parser.add_argument("--json-out", help="also write the JSON summary (and every phase's figures) to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (data, logs); it is always kept on failure")
    opts = parser.parse_args()
    if opts.lease_seconds != int(opts.lease_seconds):
        parser.error("--lease-seconds takes whole seconds (serve --lease-seconds)")
    opts.lease_seconds = int(opts.lease_seconds)
    command = "tools/cluster-bench " + " ".join(sys.argv[1:])

    busy = machine_busy_seconds()
    time.sleep(1)
    busy = (machine_busy_seconds() - busy) / CORES
    if busy > 0.15:
        progress(f"warning: the machine is already {busy * 100:.0f}% busy before anything started; "
                 "the figures will be disturbed (the table shows other processes' share per phase)")
    root = tempfile.mkdtemp(prefix="syncledger-cluster-bench.")
    progress(f"work directory {root}; syncledger {os.environ['SYNCLEDGER_BIN']}")
    ok = False
    try:
        rounds = []
        failover = None
        for r in range(1, opts.rounds + 1):
            single = summarize_phase("single", single_phase(root, opts, r))
            last = r == opts.rounds and opts.failover_rounds > 0
            raw = cluster_phase(root, opts, r, then=failover_rounds(opts) if last else None)
            if last:
                failover = raw.pop("failover")
            cluster = summarize_phase("cluster", raw)
            rounds.append((single, cluster))
            progress(f"round {r}: single {single['writes_per_second']:,.0f}/s, cluster {cluster['writes_per_second']:,.0f}/s "
                     f"({cluster['writes_per_second'] / single['writes_per_second']:.2f}×)")
        table, summary = report(opts, rounds, failover, command)
        print(table)
        print()
        print("```json")
        # One key a line, each value on one line.
        print("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in summary.items()) + "\n}")
        print("```")
        if opts.json_out:
            with open(opts.json_out, "w") as f:
                json.dump({"summary": summary, "rounds": [{"single": s, "cluster": c} for s, c in rounds], "failover": failover},
                          f, indent=1, ensure_ascii=False)
        ok = True
    finally:
        if ok and not opts.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            progress(f"the work directory (data, server and nats logs) is kept: {root}")


if __name__ == "__main__":
    # SIGTERM (e.g. from the bash wrapper's trap) unwinds through the finally blocks above.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
