"""Where a launch-bound solution's time per call goes on the host (issue 77: 902, whose kernels take
less time than issuing them). For each solution of a problem and PyTorch's own model, in one
process, the microseconds per call of:

- `issue`: forward called back to back with no sync, the clock read before the queue drains: the
  host's cost of one call wherever the device finishes a call sooner than the next is issued;
- `drained`: the same calls until the device is done with them (the time a caller sees per call);
- `device`: the calls captured once in a CUDA graph and replayed (CUDA events): the device's own
  time, no host cost in it ("-" where the model cannot be captured, and on the CPU);
- for a model with `_args(*inputs)` and `plan(*inputs)` (the fast solutions, ct2d_fast.py): `args`,
  the Python part alone (where the model has `_bound()`, the bound call's check that nothing it was
  made from changed; else `_args`: the packed weights' and the bias's checks, the argument tuple),
  and `plan`, the call through the binding and the C++ rule with nothing launched. So `issue` =
  `args` + (`plan` - `args`: the binding and the rule) + (`issue` - `plan`: the output's
  allocation, the launch and what else the call does).

Each figure is the median of --repeats blocks of --calls calls, after a warm-up.

    PYTHONPATH=. python tools/host_cost.py 902 [--solution fast_bf16] [--dtype bfloat16]
        [--device cuda|cpu] [--calls 2000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from harness.core import problems, solutions
from harness.core.precision import TORCH_DTYPE
from harness.core.problems import construct, load_module, make_inputs


def per_call_us(fn: Callable[[], object], calls: int, repeats: int, sync: Callable[[], None]) -> tuple[float, float]:
    """(issue, drained): microseconds a call, the medians over `repeats` blocks of `calls` calls."""
    for _ in range(min(calls, 50)):
        fn()
    sync()
    issue, drained = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter()
        sync()
        done = time.perf_counter()
        issue.append((issued - start) / calls * 1e6)
        drained.append((done - start) / calls * 1e6)
    return statistics.median(issue), statistics.median(drained)


def graph_us(fn: Callable[[], object], calls: int, repeats: int) -> float | None:
    """The device's own microseconds a call: `calls` calls captured in one CUDA graph, replayed and
    timed by CUDA events; None where capture fails (a call that syncs, or allocates outside it)."""
    stream = torch.cuda.Stream()
    try:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return None
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(times)


def costs(model, inputs: list, device: str, calls: int, repeats: int) -> dict[str, float | None]:
    """The figures of the docstring for one model on its inputs."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    row: dict[str, float | None] = {}
    with torch.no_grad():
        row["issue"], row["drained"] = per_call_us(lambda: model(*inputs), calls, repeats, sync)
        row["device"] = graph_us(lambda: model(*inputs), calls, repeats) if device == "cuda" else None
        if callable(getattr(model, "_args", None)) and callable(getattr(model, "plan", None)):
            # the Python part of a call: the bound call's check where the model has one (ct2d_fast)
            python_part = model._bound if callable(getattr(model, "_bound", None)) else (lambda: model._args(*inputs))
            row["args"] = per_call_us(python_part, calls, repeats, lambda: None)[0]
            row["plan"] = per_call_us(lambda: model.plan(*inputs), calls, repeats, lambda: None)[0]
    return row


def table(rows: list[tuple[str, dict[str, float | None]]]) -> str:
    """One line per model: its figures in microseconds a call ("-" where not measured)."""
    cols = ["issue", "drained", "device", "args", "plan"]
    width = max(len("us per call"), *(len(name) for name, _ in rows))
    lines = [f"{'us per call':<{width}}  " + "  ".join(f"{c:>8}" for c in cols)]
    for name, row in rows:
        cells = [f"{row[c]:8.1f}" if row.get(c) is not None else f"{'-':>8}" for c in cols]
        lines.append(f"{name:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", help="a problem as --problem takes it (one problem)")
    ap.add_argument("--solution", action="append", default=[], help="a solution of the problem, by name or path (again "
                                                                   "for more; default: all of them)")
    ap.add_argument("--dtype", default="", help="cast the models and the floating-point inputs (e.g. bfloat16)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    [problem] = problems.select(args.problem)
    dtype = TORCH_DTYPE.get(args.dtype, args.dtype) or None  # a torch dtype's name (bf16, fp16: the precisions')
    mod = load_module(problem.path)
    init = list(mod.get_init_inputs())
    inputs = make_inputs(mod, 1, args.device, dtype)
    rows = [("PyTorch", costs(construct(mod.Model, init, 0, args.device, dtype=dtype), inputs, args.device,
                              args.calls, args.repeats))]
    known = {sol.name: sol for sol in solutions.for_problem(problem)}
    chosen = [known[s] if s in known else solutions.solution_from_path(Path(s)) for s in args.solution] \
        if args.solution else list(known.values())
    for sol in chosen:
        smod = load_module(sol.path, prefix="kb_solution")
        model = construct(smod.ModelNew, init, 0, args.device, dtype=dtype)
        rows.append((sol.name, costs(model, inputs, args.device, args.calls, args.repeats)))
    print(f"{problem.id} on {args.device}" + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else "")
          + (f", {args.dtype}" if args.dtype else "") + f": {args.calls} calls a block, median of {args.repeats}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
