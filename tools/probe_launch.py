#!/usr/bin/env python3
"""Is the per-process launch-speed offset a property of the process, or of the CPU it runs on?

Each trial starts two fresh processes, A and B, that time the same work in alternating rounds (as
the harness's reference worker and solution worker do): a block of tiny CUDA launches timed by
events (what a launch-bound problem measures), then a block of pure-Python work timed by the wall
clock (no CUDA). Trials repeat under placements:

  free       no pinning (the harness today)
  same:C     both processes pinned to the CPU set C, taking turns on it
  apart:C|D  A pinned to C, B to D (a control: two CPUs' own speeds)

A placement may end in +noaslr: both processes then start without address-space randomization
(personality ADDR_NO_RANDOMIZE, inherited through fork and exec), to tell an offset that comes
with where a process's memory lands from one of the CPU's.

Prints per placement the A/B ratio of each trial (fresh processes each) for both workloads and the
CPUs each process was seen on. If `same` holds A/B at 1.00 where `free` scatters, the offset is the
CPU's (a vCPU's host placement, a busy sibling) and pinning both sides to one set cancels it.

    python tools/probe_launch.py --trials 6 --place free --place same:3 --place apart:3|9
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path


def _cpu_now() -> int:
    fields = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])  # field 39 of stat: the CPU last run on


def _pin_all(cpus: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def _proc(conn, cpus, launches: int, spin: int) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    import torch
    t = torch.zeros(1, device="cuda")
    if cpus:
        _pin_all(cpus)  # the driver's threads, started by the first CUDA call
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def launch_ms() -> float:
        torch.cuda.synchronize()
        start.record()
        for _ in range(launches):
            t.add_(1)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def cpu_ms() -> float:
        t0 = time.perf_counter()
        x = 0
        for i in range(spin):
            x += i
        return (time.perf_counter() - t0) * 1e3

    for _ in range(3):
        launch_ms(), cpu_ms()
    conn.send("ready")
    while True:
        n = conn.recv()
        if n is None:
            break
        seen = {_cpu_now()}
        lm = [launch_ms() for _ in range(n)]
        seen.add(_cpu_now())
        cm = [cpu_ms() for _ in range(n)]
        seen.add(_cpu_now())
        conn.send((statistics.median(lm), statistics.median(cm), sorted(seen)))


def _cpus(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def _personality(flags: int) -> int:
    import ctypes
    return ctypes.CDLL(None, use_errno=True).personality(ctypes.c_ulong(flags))


def trial(place: str, rounds: int, calls: int, launches: int, spin: int) -> dict:
    noaslr = place.endswith("+noaslr")
    kind, _, spec = place.removesuffix("+noaslr").partition(":")
    if kind == "free":
        sets = [None, None]
    elif kind == "same":
        sets = [_cpus(spec)] * 2
    else:
        c, d = spec.split("|")
        sets = [_cpus(c), _cpus(d)]
    ctx = mp.get_context("spawn")
    procs = []
    before = _personality(0xFFFFFFFF)   # the query form: the current persona, unchanged
    if noaslr:
        _personality(before | 0x0040000)  # ADDR_NO_RANDOMIZE
    try:
        for cpus in sets:
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_proc, args=(theirs, cpus, launches, spin))
            p.start()
            procs.append((p, mine))
    finally:
        _personality(before)
    for _, conn in procs:
        assert conn.recv() == "ready"
    got = [[], []]
    for _ in range(rounds):
        for i, (_, conn) in enumerate(procs):
            conn.send(calls)
            got[i].append(conn.recv())
    for p, conn in procs:
        conn.send(None)
        p.join()

    def med(i, k):
        return statistics.median(r[k] for r in got[i])

    return {"place": place, "launch_ratio": med(0, 0) / med(1, 0), "cpu_ratio": med(0, 1) / med(1, 1),
            "a_launch_ms": med(0, 0), "b_launch_ms": med(1, 0),
            "a_rounds": [round(r[0], 3) for r in got[0]], "b_rounds": [round(r[0], 3) for r in got[1]],
            "a_cpus": sorted({c for r in got[0] for c in r[2]}), "b_cpus": sorted({c for r in got[1] for c in r[2]})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--place", action="append", default=[])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--launches", type=int, default=1000)
    parser.add_argument("--spin", type=int, default=200000)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for rep in range(args.trials):
        for place in args.place or ["free"]:
            r = trial(place, args.rounds, args.calls, args.launches, args.spin)
            r["trial"] = rep
            rows.append(r)
            print(f"{place:<14} trial {rep}: launches A/B {r['launch_ratio']:.3f} ({r['a_launch_ms']:.2f}/"
                  f"{r['b_launch_ms']:.2f} ms)  cpu A/B {r['cpu_ratio']:.3f}  A on {r['a_cpus']} B on {r['b_cpus']}",
                  flush=True)
    for place in args.place or ["free"]:
        lr = [r["launch_ratio"] for r in rows if r["place"] == place]
        cr = [r["cpu_ratio"] for r in rows if r["place"] == place]
        print(f"{place:<14} launches A/B {min(lr):.3f}-{max(lr):.3f}  cpu A/B {min(cr):.3f}-{max(cr):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
