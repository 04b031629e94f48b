"""tools/cluster-bench: progress lines, and what the processes and the machine spent, from /proc."""

import os
import resource
import sys
import time

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
