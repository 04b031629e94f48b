"""tools/cluster-bench: the report — per-phase summaries, the projection for separate machines,
the markdown table and the JSON summary."""

import math
import os
import statistics
import subprocess

from cluster_bench_proc import CORES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
