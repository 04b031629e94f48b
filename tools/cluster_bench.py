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

The code: cluster_bench_proc.py (/proc), cluster_bench_phases.py (the phases and the failover
rounds), cluster_bench_report.py (the table and the JSON summary).
"""

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time

if not os.environ.get("SYNCLEDGER_BIN") or not os.environ.get("SYNCLEDGER_LOAD_BIN"):
    sys.exit("cluster_bench.py: run it through tools/cluster-bench (it builds the binaries and sets "
             "SYNCLEDGER_BIN and SYNCLEDGER_LOAD_BIN)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench_proc import CORES, machine_busy_seconds, progress  # noqa: E402
from cluster_bench_phases import cluster_phase, failover_rounds, single_phase  # noqa: E402
from cluster_bench_report import report, summarize_phase  # noqa: E402


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
    parser.add_argument("--sizes", default="3,5",
                        help="cluster sizes to measure, comma-separated (default 3,5: nats-servers and nodes each)")
    parser.add_argument("--no-balancer", action="store_true",
                        help="measure each cluster with the load spread round-robin only, not also through HAProxy")
    parser.add_argument("--json-out", help="also write the JSON summary (and every phase's figures) to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (data, logs); it is always kept on failure")
    opts = parser.parse_args()
    if opts.lease_seconds != int(opts.lease_seconds):
        parser.error("--lease-seconds takes whole seconds (serve --lease-seconds)")
    opts.lease_seconds = int(opts.lease_seconds)
    try:
        opts.sizes = [int(x) for x in opts.sizes.split(",")]
    except ValueError:
        parser.error("--sizes takes cluster sizes separated by commas, such as 3,5")
    if not opts.sizes or opts.sizes[0] != 3 or any(n < 3 or n > 9 for n in opts.sizes):
        parser.error("--sizes starts with 3 (the failover rounds and the summary's 3-machine figures use it); each 3 to 9")
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
            clusters = []
            for size in opts.sizes:
                last = r == opts.rounds and opts.failover_rounds > 0 and size == 3
                raws = cluster_phase(root, opts, r, size, then=failover_rounds(opts) if last else None)
                if last:
                    failover = raws[0].pop("failover")
                for raw in raws:
                    cluster = summarize_phase("cluster", raw)
                    clusters.append(cluster)
                    progress(f"round {r}: single {single['writes_per_second']:,.0f}/s, {cluster['setup']} "
                             f"{cluster['writes_per_second']:,.0f}/s ({cluster['writes_per_second'] / single['writes_per_second']:.2f}×)")
            rounds.append((single, clusters))
        table, summary = report(opts, rounds, failover, command)
        print(table)
        print()
        print("```json")
        # One key a line, each value on one line.
        print("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in summary.items()) + "\n}")
        print("```")
        if opts.json_out:
            with open(opts.json_out, "w") as f:
                json.dump({"summary": summary, "rounds": [{"single": s, "clusters": c} for s, c in rounds], "failover": failover},
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
