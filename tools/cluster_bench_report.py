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
    for key in ("startup_seconds", "converge_seconds", "owned", "counters", "nodes", "routing"):
        if key in result:
            summary[key] = result[key]
    if "nodes" in result:
        summary["setup"] = f"{result['nodes']}-node cluster, {result['routing']}"
    summary["haproxy_cpu_us_per_write"] = per_write_us(cost["cpu"]["haproxy"], writes) if "haproxy" in cost["cpu"] else None
    return summary


def projection(cluster_phases, single_phases):
    """n separate 2-core machines (n = the phases' cluster size), machine i running syncledger node
    i and nats-server i: machine i spends c_i = (CPU of syncledger i + CPU of nats i) ÷ acknowledged
    writes per write of the whole cluster, and the cluster tops out (CPU-bound) when the busiest
    machine's cores are full: writes/s ≈ cores ÷ max_i c_i. The one node on its own 2-core
    machine: cores ÷ c_single. The balancer (haproxy) is counted apart, as the clients are: on
    machines of its own. Medians over the rounds."""
    per_machine = []
    for p in cluster_phases:
        c = [(p["syncledger_cpu_us_per_write_by_process"][f"syncledger{i}"] + p["nats_cpu_us_per_write_by_process"][f"nats{i}"])
             for i in range(p["nodes"])]
        per_machine.append(max(c))
    busiest = statistics.median(per_machine)
    single = statistics.median(p["syncledger_cpu_us_per_write"] for p in single_phases)
    return {"cores_per_machine": 2, "machines": cluster_phases[0]["nodes"], "busiest_machine_cpu_us_per_write": busiest,
            "projected_cluster_writes_per_second": 2 / (busiest / 1e6),
            "single_cpu_us_per_write": single, "projected_single_writes_per_second": 2 / (single / 1e6),
            "projected_ratio": single / busiest,
            "formula": "writes/s ≈ 2 cores ÷ max over machines i of (CPU s of syncledger i + CPU s of nats-server i) per acknowledged write"}


def fmt(value, digits=0, suffix=""):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def setups(rounds):
    """The cluster setups measured, in order: their labels."""
    seen = []
    for _, clusters in rounds:
        for c in clusters:
            if c["setup"] not in seen:
                seen.append(c["setup"])
    return seen


def report(opts, rounds, failover, command):
    singles = [s for s, _ in rounds]
    labels = setups(rounds)
    by_setup = {label: [c for _, clusters in rounds for c in clusters if c["setup"] == label] for label in labels}
    ratios = {label: [c["writes_per_second"] / s["writes_per_second"] for s, clusters in rounds for c in clusters if c["setup"] == label]
              for label in labels}
    lines = []
    lines.append(f"{opts.identities} concurrent identities, each ListRecords → UpdateRecords of {opts.records} records, "
                 f"{opts.seconds:g} s per phase; clusters of {', '.join(map(str, opts.sizes))} nats-servers (JetStream R3, "
                 f"sync_interval always) and as many nodes, {opts.shards} shards, lease {opts.lease_seconds:g} s; each cluster "
                 f"measured with the load spread round-robin over its nodes"
                 f"{'' if opts.no_balancer else ', then through HAProxy with the shipped routing (deploy/haproxy)'}; "
                 f"all {CORES} cores of one machine, loopback.")
    lines.append("")
    lines.append("| round | setup | UpdateRecords/s | p50 ms | p99 ms | 1 caller p50 ms | CPU µs/write syncledger (busiest) "
                 "| CPU µs/write nats-server (busiest) | CPU µs/write load tool | machine busy (kernel threads, other processes) "
                 "| disk KB/write syncledger / nats |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r, (s, clusters) in enumerate(rounds, 1):
        for label, p in [("single node, durable", s)] + [(c["setup"], c) for c in clusters]:
            sl_busiest = max(p["syncledger_cpu_us_per_write_by_process"].values())
            ns = p["nats_cpu_us_per_write_by_process"]
            sl_cell = fmt(p["syncledger_cpu_us_per_write"]) + (f" ({fmt(sl_busiest)})" if len(p["syncledger_cpu_us_per_write_by_process"]) > 1 else "")
            ns_cell = f"{fmt(p['nats_cpu_us_per_write'])} ({fmt(max(ns.values()))})" if ns else "-"
            disk = fmt((p["syncledger_disk_bytes_per_write"] or 0) / 1024, 1)
            if p["nats_disk_bytes_per_write"] is not None:
                disk += " / " + fmt(p["nats_disk_bytes_per_write"] / 1024, 1)
            ratio = "" if p is s else f" (**{p['writes_per_second'] / s['writes_per_second']:.2f}×**)"
            lines.append(f"| {r} | {label} | {fmt(p['writes_per_second'])}{ratio} | {fmt(p['p50_ms'], 2)} | {fmt(p['p99_ms'], 2)} "
                         f"| {fmt(p['serial_p50_ms'], 2)} | {sl_cell} | {ns_cell} | {fmt(p['client_cpu_us_per_write'])} "
                         f"| {p['machine_busy'] * 100:.0f}% ({p['kernel_threads'] * 100:.0f}%, {p['other_processes'] * 100:.0f}%) | {disk} |")
    for label in labels:
        lines.append(f"| median | **{label} ÷ single** | **{statistics.median(ratios[label]):.2f}×** | | | | | | | | |")
    lines.append("")
    lines.append("(Ratios in brackets: the setup's UpdateRecords/s ÷ the single node's of the same round, all on this one machine: "
                 "they measure overhead, not scaling; the projection below is about separate machines.)")
    lines.append("")
    behind = []
    for r, (_, clusters) in enumerate(rounds, 1):
        for c in clusters:
            appended = sum(n["Appended"] for n in c["counters"].values())
            refused = sum(n["Behind"] for n in c["counters"].values())
            retried = sum(n["Retried"] for n in c["counters"].values())
            forwarded = sum(n.get("Forwarded", 0) for n in c["counters"].values())
            c["appends_refused_behind_share"] = refused / (appended + refused) if appended + refused else 0.0
            if c["setup"] == labels[0]:
                behind.append(c["appends_refused_behind_share"])
            haproxy = f"; HAProxy spent {fmt(c['haproxy_cpu_us_per_write'])} µs of CPU per write" if c.get("haproxy_cpu_us_per_write") else ""
            lines.append(f"- Round {r}, {c['setup']}: {c['writes']:,} writes in {appended:,} appends to the shard logs "
                         f"({c['writes'] / appended if appended else 0:.1f} writes a message), {refused:,} more refused as behind "
                         f"({c['appends_refused_behind_share'] * 100:.0f}% of attempts), {retried} publishes retried, "
                         f"{forwarded:,} requests forwarded between nodes{haproxy}; cluster ready {c['startup_seconds']:.0f} s after "
                         f"start (shards owned per node {c['owned']}); replicas converged {c['converge_seconds']:.1f} s after the load.")
    lines.append("")
    for r, (s, clusters) in enumerate(rounds, 1):
        for p in [s] + clusters:
            for f in p["failures"]:
                lines.append(f"- **Error, round {r} {p.get('setup', p['kind'])}:** the load stopped at `{f['error'][:300]}`; the run was made "
                             f"again with new identities (the row is that run)." + "".join(f" Server log: `{l[:400]}`" for l in f["server_log"]))
    every = [p for s, clusters in rounds for p in [s] + clusters]
    if any(p["failures"] for p in every):
        lines.append("")
    disturbed = [f"round {r} {p.get('setup', p['kind'])} ({p['other_processes'] * 100:.0f}%)" for r, (s, clusters) in enumerate(rounds, 1)
                 for p in [s] + clusters if p["other_processes"] > 0.05]
    if disturbed:
        lines.append(f"**Disturbed:** processes other than the benchmark's used more than 5% of the machine during "
                     f"{', '.join(disturbed)}; those figures are not clean.")
        lines.append("")
    lines.append("CPU µs/write: CPU time (utime+stime) of the processes over the concurrent run ÷ acknowledged "
                 "UpdateRecords (each with its ListRecords); cluster cells are the sum over the cluster's processes of that "
                 "kind, the busiest one in brackets. Disk: /proc/PID/io write_bytes ÷ writes, summed over the processes. "
                 "Machine busy: all cores over the run (steal included); in brackets the kernel threads' share (fsync and "
                 "journal work among it) and that of processes other than the servers, the balancer and the load tool.")
    projections = {label: projection(by_setup[label], singles) for label in labels}
    lines.append("")
    lines.append("Projection (not a measurement) for separate 2-core machines, each running one node and one nats-server, "
                 f"clients (and the balancer) elsewhere: {projections[labels[0]]['formula']}; the one node on its own 2-core "
                 f"machine by the same formula: 2 ÷ {projections[labels[0]]['single_cpu_us_per_write']:.0f} µs ≈ "
                 f"{projections[labels[0]]['projected_single_writes_per_second']:,.0f} writes/s.")
    lines.append("")
    lines.append("| setup | machines | busiest machine CPU µs/write | projected writes/s | ÷ single node |")
    lines.append("|---|---:|---:|---:|---:|")
    for label in labels:
        proj = projections[label]
        lines.append(f"| {label} | {proj['machines']} | {proj['busiest_machine_cpu_us_per_write']:,.0f} | "
                     f"{proj['projected_cluster_writes_per_second']:,.0f} | **{proj['projected_ratio']:.2f}×** |")
    lines.append("")
    lines.append("It leaves out the network (loopback here) and each machine's disk (fsyncs per second), and the per-write CPU "
                 "was measured with every core of this one machine full.")
    fo = None
    if failover:
        seconds = [f["seconds"] for f in failover]
        fo = {"lease_seconds": opts.lease_seconds, "median_seconds": statistics.median(seconds), "rounds": failover}
        lines.append("")
        lines.append(f"Failover (3-node cluster, lease {opts.lease_seconds:g} s): kill -9 of a shard's owner under a paced write load → first "
                     f"acknowledged write on that shard sent after the kill: median **{fo['median_seconds']:.2f} s** "
                     f"(rounds: {', '.join(f'{s:.2f}' for s in seconds)} s).")
        for f in failover:
            seen = ", ".join(f"{k} ×{v}" for k, v in sorted(f["client_failures"].items())) or "none"
            lines.append(f"- failover round {f['round']}: kill -9 of {f['killed']} (owner of shard {f['shard']}): {f['seconds']:.2f} s; "
                         f"meanwhile {f['other_shards_acked_meanwhile']} writes on other shards were acknowledged; errors the "
                         f"load's clients saw in the round: {seen}; converged and balanced again {f['rebalance_seconds']:.0f} s "
                         f"after the restart.")
    revision = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    first = by_setup[labels[0]]

    def rounded(proj):
        return {k: (round(v, 3) if k == "projected_ratio" else round(v) if isinstance(v, float) else v) for k, v in proj.items()}
    summary = {
        "command": command,
        "revision": revision or "unknown",
        "cores": CORES,
        "options": {k: getattr(opts, k) for k in ("seconds", "identities", "rounds", "shards", "lease_seconds", "failover_rounds", "records", "sizes")},
        "single_writes_per_second": [round(s["writes_per_second"]) for s in singles],
        "cluster_writes_per_second": [round(c["writes_per_second"]) for c in first],
        "ratio_per_round": [round(x, 3) for x in ratios[labels[0]]],
        "median_ratio": round(statistics.median(ratios[labels[0]]), 3),
        "single_p50_p99_ms": [[s["p50_ms"], s["p99_ms"]] for s in singles],
        "cluster_p50_p99_ms": [[c["p50_ms"], c["p99_ms"]] for c in first],
        "single_one_caller_p50_ms": [s["serial_p50_ms"] for s in singles],
        "cluster_one_caller_p50_ms": [c["serial_p50_ms"] for c in first],
        "cpu_us_per_write": {
            "single_syncledger": round(statistics.median(s["syncledger_cpu_us_per_write"] for s in singles), 1),
            "cluster_syncledger_total": round(statistics.median(c["syncledger_cpu_us_per_write"] for c in first), 1),
            "cluster_nats_total": round(statistics.median(c["nats_cpu_us_per_write"] for c in first), 1),
        },
        "disk_bytes_per_write": {
            "single_syncledger": round(statistics.median(s["syncledger_disk_bytes_per_write"] for s in singles)),
            "cluster_syncledger_total": round(statistics.median(c["syncledger_disk_bytes_per_write"] for c in first)),
            "cluster_nats_total": round(statistics.median(c["nats_disk_bytes_per_write"] for c in first)),
        },
        "projection_3x2core": rounded(projections[labels[0]]),
        "setups": {label: {"median_ratio": round(statistics.median(ratios[label]), 3),
                           "writes_per_second": [round(c["writes_per_second"]) for c in by_setup[label]],
                           "writes_per_message": [round(c["writes"] / max(1, sum(n["Appended"] for n in c["counters"].values())), 2) for c in by_setup[label]],
                           "forwarded": [sum(n.get("Forwarded", 0) for n in c["counters"].values()) for c in by_setup[label]],
                           "projection": rounded(projections[label])} for label in labels},
        "cluster_appends_refused_behind_share": [round(b, 3) for b in behind],
        "cluster_ready_seconds": [round(c["startup_seconds"]) for c in first],
        "load_errors": [{"round": r, "kind": p.get("setup", p["kind"]), **f} for r, (s, clusters) in enumerate(rounds, 1)
                        for p in [s] + clusters for f in p["failures"]],
        "other_processes_max_share": round(max(p["other_processes"] for p in every), 3),
        "failover": None if fo is None else {"lease_seconds": fo["lease_seconds"], "median_seconds": fo["median_seconds"],
                                             "seconds": [f["seconds"] for f in failover]},
    }
    for n in opts.sizes:
        for routing in ("round-robin", "balancer"):
            label = f"{n}-node cluster, {routing}"
            if label in projections:
                key = f"projection_{n}x2core" + ("_balancer" if routing == "balancer" else "")
                summary.setdefault(key, rounded(projections[label]))
    return "\n".join(lines), summary
