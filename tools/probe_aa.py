#!/usr/bin/env python3
"""Why does an A/A comparison move? Two processes time the same problem's reference, as the lane
(reference) and a worker (the same model as the solution) do. Modes:

  separate     the lane's way before interleaving: process A times all its calls, then process B
  interleaved  rounds alternate: A times a block, then B, R times (the harness's timing.rounds)

each with the machine quiet, and with CPU load beside it (busy processes on every core but one, as
builds and spares make). Prints per mode the ratio A/B of the medians, the spread of the per-round
ratios, and the GPU's SM clock before and after.

    python tools/probe_aa.py --problem 35 --rounds 10 --calls 100
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def _timer_proc(problem_path: str, conn, seed: int, cpus: list[int] | None = None, workload: str = "model") -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    import torch

    from harness.core.problems import construct, load_module, make_inputs
    from harness.verdict.timing import CudaEventTimer
    module = load_module(Path(problem_path))
    torch.cuda.set_device(0)
    model = construct(module.Model, list(module.get_init_inputs()), seed, "cuda")
    inputs = make_inputs(module, seed, "cuda")
    timer = CudaEventTimer("cuda", True)
    with torch.no_grad():
        fn = lambda: model(*inputs)  # noqa: E731
        if workload == "launches":  # as many tiny launches as the LSTM's forward makes
            t = torch.zeros(1, device="cuda")

            def fn():
                for _ in range(6000):
                    t.add_(1)
        elif workload == "cpu":  # host work only, no CUDA: does the process's CPU speed move too?
            def fn():
                x = 0
                for i in range(400000):
                    x += i
        elif workload == "graph":  # the forward captured once, replayed: no launch overhead
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(*inputs)
            fn = graph.replay
        for _ in range(3):
            timer(fn)
        conn.send("ready")
        while True:
            n = conn.recv()
            if n is None:
                break
            conn.send([timer(fn) for _ in range(n)])


def _cpu_list(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _clock() -> float | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001
        return None


def measure(problem_path: str, rounds: int, calls: int, interleaved: bool, load: bool,
            cpus: list[int] | None = None, workload: str = "model") -> dict:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    burners = [ctx.Process(target=_burn, args=(stop,)) for _ in range(max(0, (os.cpu_count() or 2) - 1) if load else 0)]
    for b in burners:
        b.start()
    procs = []
    for _ in range(2):
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=_timer_proc, args=(problem_path, theirs, 0, cpus, workload))
        p.start()
        procs.append((p, mine))
    for _, conn in procs:
        assert conn.recv() == "ready"
    clock0 = _clock()
    per = max(1, calls // rounds)
    a_rounds, b_rounds = [], []
    if interleaved:
        for _ in range(rounds):
            for conn, out in ((procs[0][1], a_rounds), (procs[1][1], b_rounds)):
                conn.send(per)
                out.append(conn.recv())
    else:
        for conn, out in ((procs[0][1], a_rounds), (procs[1][1], b_rounds)):
            for _ in range(rounds):
                conn.send(per)
                out.append(conn.recv())
    clock1 = _clock()
    for p, conn in procs:
        conn.send(None)
        p.join()
    stop.set()
    for b in burners:
        b.join()
    a = [x for r in a_rounds for x in r]
    b = [x for r in b_rounds for x in r]
    per_round = [statistics.median(x) / statistics.median(y) for x, y in zip(a_rounds, b_rounds)]
    return {"ratio": statistics.median(a) / statistics.median(b), "a_ms": statistics.median(a),
            "b_ms": statistics.median(b), "round_ratio_min": min(per_round), "round_ratio_max": max(per_round),
            "a_round_medians": [round(statistics.median(r), 3) for r in a_rounds],
            "b_round_medians": [round(statistics.median(r), 3) for r in b_rounds], "sm_clock": [clock0, clock1]}


def main() -> None:
    from harness.core import problems
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="35")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--workload", action="append", default=[], choices=["model", "launches", "graph", "cpu"],
                        help="what each process times (repeatable): the model's forward (default), 6000 tiny "
                             "launches, the forward as one CUDA graph replay, or a Python loop with no CUDA; "
                             "then only interleaved, quiet")
    parser.add_argument("--cpus", action="append", default=[],
                        help="CPU sets to pin both processes to, e.g. 0-3 (repeatable; 'all': unpinned); "
                             "then only the separate mode, quiet")
    args = parser.parse_args()
    path = str(problems.select(args.problem)[0].path)
    rows = []
    sets = [(spec, None if spec == "all" else _cpu_list(spec)) for spec in args.cpus]
    for rep in range(args.repeat):
        plan = [(False, False, None, "all"), (False, True, None, "all"), (True, False, None, "all"), (True, True, None, "all")]
        if sets:
            plan = [(False, False, cpus, spec) for spec, cpus in sets]
        for workload in args.workload or ["model"]:
            for load, interleaved, cpus, spec in (plan if not args.workload else [(False, True, None, "all")]):
                m = measure(path, args.rounds, args.calls, interleaved, load, cpus, workload)
                m.update(mode=("interleaved" if interleaved else "separate") + f" cpus={spec} {workload}", load=load,
                         repeat=rep)
                rows.append(m)
                print(f"{m['mode']:<11} load={str(load):<5} A/B {m['ratio']:.3f}  A {m['a_ms']:.3f} ms  "
                      f"B {m['b_ms']:.3f} ms  per-round A/B {m['round_ratio_min']:.3f}-{m['round_ratio_max']:.3f}  "
                      f"SM clock {m['sm_clock']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
