"""Where a run's CPU goes, by the harness's process kinds, read from /proc while the run goes on (the
harness is not changed or asked: the kernel's accounting of every process).

    python tools/cpu_by_process.py record OUT.json [--interval 0.5] -- COMMAND [ARG ...]
    python tools/cpu_by_process.py report OUT.json [--pause 1.0]

`record` runs COMMAND and, every interval until it ends, reads /proc/*/stat: each process (pid and
start time) with its own CPU (utime + stime), its reaped children's (cutime + cstime) and its command
line; a harness process's own CPU is kept over time. Only the command's own process tree is counted.
A SIGTERM or SIGINT is passed on to COMMAND, and what was recorded is written when it ends. Its exit
status is COMMAND's. `report` prints, for each kind, the CPU-s, how many processes and their share
of the machine's busy CPU-s over the same span (/proc/stat), then each kind's CPU until its first
pause (a process's start: its imports, until it waits for work) against what it spent after.

A process's cost is its own CPU plus the larger of its reaped children's and the sum of its seen
children's costs (a child shorter than the interval shows only in its parent's cutime). The kinds, by
command line: `compile_step` (harness.compile.compiler, with its ninja, nvcc and compilers), `pch`
(harness.compile.pch), `lane` (harness.run.lane, its own CPU), `worker` (harness.run.worker under a
lane: the pairs' workers, the spares, the reference workers), `build_step` (harness.run.worker
elsewhere), `main` (run_eval.py, its own CPU), `fork_server` (harness.isolate.forkserver, its own
CPU: the steps it forks are known by the name each gives itself, kb:compiler or kb:worker, and
counted as theirs); a process of no kind under one of those is counted
as `<kind>_children`, and the machine's busy CPU-s that the tree does not hold (the system, other
work) are the rest.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict

HZ = os.sysconf("SC_CLK_TCK")
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine() -> list[int]:
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:9]]


# a step forked by the fork server (harness/isolate/forkserver.py) has the server's command line and
# names itself kb:<module> (its comm): the module it runs, for kind_of
FORK_SERVER = "harness.isolate.forkserver"
FORKED = {"kb:compiler": "harness.compile.compiler", "kb:worker": "harness.run.worker"}


def _forked(p: dict, pid: str) -> None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return
    if comm in FORKED:
        p["forked"] = comm
        p["argv"] = [a for a in p["argv"] if a != FORK_SERVER] + [FORKED[comm]]


def scan(procs: dict, t0: float) -> None:
    """Every process's CPU now, into procs ((pid, start) -> its record)."""
    now = round(time.monotonic() - t0, 2)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        key = f"{name}:{rest[19]}"
        p = procs.get(key)
        if p is None:
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = [a[:200] for a in f.read().decode(errors="replace").split("\0")[:40] if a]
            except OSError:
                argv = []
            p = procs[key] = {"pid": int(name), "start": int(rest[19]), "ppid": int(rest[1]), "argv": argv,
                              "own": 0.0, "kids": 0.0, "series": []}
        if FORK_SERVER in p["argv"] and not p.get("forked"):
            _forked(p, name)
        own = (int(rest[11]) + int(rest[12])) / HZ
        if kind_of(p["argv"], []) and (not p["series"] or own != p["series"][-1][1]):
            p["series"].append((now, own))
        p["own"], p["kids"] = own, (int(rest[13]) + int(rest[14])) / HZ


def record(out: str, command: list[str], interval: float) -> int:
    procs: dict = {}
    t0, m0 = time.monotonic(), machine()
    child = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT):  # passed on: the command ends as it would, and is recorded
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    while child.poll() is None:
        scan(procs, t0)
        time.sleep(interval)
    scan(procs, t0)
    m1 = machine()
    me = os.getpid()
    data = {"command": command, "root": child.pid, "span_s": round(time.monotonic() - t0, 1), "returncode": child.returncode,
            "stat": {k: (b - a) / HZ for k, a, b in zip(FIELDS, m0, m1)},
            "processes": [p for p in procs.values() if p["pid"] != me]}
    with open(out, "w") as f:
        json.dump(data, f)
    return child.returncode


def kind_of(argv: list[str], above: list[str]) -> str | None:
    """A process's kind by its arguments (the module it runs, under the sandbox's jail or not)."""
    if "harness.compile.compiler" in argv:
        return "compile_step"
    if "harness.compile.pch" in argv:
        return "pch"
    if "harness.run.lane" in argv:
        return "lane"
    if FORK_SERVER in argv:
        return "fork_server"
    if "harness.run.worker" in argv:
        return "worker" if "lane" in above else "build_step"
    if any(a.endswith("run_eval.py") for a in argv[:3]):
        return "main"
    return None


def attribute(processes: list[dict], root: int) -> dict[str, dict]:
    """Per kind, in the tree of the recorded command (process `root`): its CPU-s and its processes."""
    latest = {}
    for p in processes:  # the newest process of a pid is the one a later child's ppid names
        if p["pid"] not in latest or p["start"] > latest[p["pid"]]["start"]:
            latest[p["pid"]] = p
    children = defaultdict(list)
    for p in processes:
        parent = latest.get(p["ppid"])
        if parent is not None and parent is not p:
            children[id(parent)].append(p)

    def cost(p: dict) -> float:
        return p["own"] + max(p["kids"], sum(cost(c) for c in children[id(p)]))

    kinds: dict[str, dict] = defaultdict(lambda: {"cpu_s": 0.0, "processes": []})

    def walk(p: dict, above: list[str]) -> None:
        kind = kind_of(p["argv"], above)
        if kind in ("lane", "main", "fork_server"):
            kinds[kind]["cpu_s"] += p["own"]
            kinds[kind]["processes"].append(p)
            for c in children[id(p)]:
                walk(c, above + [kind])
        elif kind is not None:
            kinds[kind]["cpu_s"] += cost(p)
            kinds[kind]["processes"].append(p)
        elif above:
            kinds[f"{above[-1]}_children"]["cpu_s"] += cost(p)
        else:
            for c in children[id(p)]:
                walk(c, above)

    top = [p for p in processes if p["pid"] == root]
    if top:
        walk(min(top, key=lambda p: p["start"]), [])
    return kinds


def first_pause(series: list, pause: float, total: float) -> float:
    """A process's own CPU when it first spent none for `pause` seconds (samples are kept only where
    its CPU moved); all of it where it never paused."""
    for (t0, c0), (t1, _) in zip(series, series[1:]):
        if t1 - t0 >= pause:
            return c0
    return total


def report(path: str, pause: float) -> None:
    with open(path) as f:
        data = json.load(f)
    stat = data["stat"]
    busy = sum(stat.values()) - stat["idle"] - stat["iowait"]
    kinds = attribute(data["processes"], data["root"])
    print(f"{' '.join(data['command'])[:100]}: {data['span_s']} s, busy {busy:.0f} CPU-s "
          f"(user {stat['user']:.0f}, nice {stat['nice']:.0f}, system {stat['system']:.0f})")
    print(f"{'kind':18s} {'CPU-s':>8s} {'share':>6s} {'processes':>9s} {'start, median':>14s} {'start, sum':>11s} {'after, sum':>11s}")
    for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]["cpu_s"]):
        starts = [first_pause(p["series"], pause, p["own"]) for p in k["processes"]]
        after = sum(p["own"] for p in k["processes"]) - sum(starts)
        cols = (f"{statistics.median(starts):14.2f} {sum(starts):11.1f} {after:11.1f}" if starts else "")
        print(f"{kind:18s} {k['cpu_s']:8.1f} {k['cpu_s'] / busy if busy else 0:6.0%} {len(k['processes']) or '':>9} {cols}")
    rest = busy - sum(k["cpu_s"] for k in kinds.values())
    print(f"{'the rest':18s} {rest:8.1f} {rest / busy if busy else 0:6.0%}  (the system and what else ran)")
    print(f"(start: a process's own CPU until it first spent none for {pause} s; after: the rest of its own)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run a command and record every process's CPU")
    r.add_argument("out")
    r.add_argument("--interval", type=float, default=0.5)
    p = sub.add_parser("report", help="the CPU by process kind")
    p.add_argument("path")
    p.add_argument("--pause", type=float, default=1.0)
    args = ap.parse_args(argv)
    if args.cmd == "record":
        if not command:
            ap.error("record needs a command after --")
        rc = record(args.out, command, args.interval)
        if rc < 0:  # ended by a signal, as COMMAND was
            signal.signal(-rc, signal.SIG_DFL)
            os.kill(os.getpid(), -rc)
        return rc
    report(args.path, args.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
