"""A/B of the fused family's strided problems: each fast solution as it is (the phase kernel) and
with its convolution run as stride-1 phase convolutions (ct2d_fused.SplitConv), on the benchmark
input, the outputs compared with each other, each timed by CUDA events (median of --calls calls,
L2 flushed before each), alternating in rounds. Needs a GPU.

    PYTHONPATH=. python tools/bench_split.py [--calls 30] [--rounds 5] [--problems 2 5 16 36 91 93]

A decision aid for the next step of issue 48 (docs/perf-notes.md, "The fused family"), not the
harness's timing: a solution's speed is what `python run_eval.py --problem conv_transpose2d_fused`
says once it takes the path.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    import torch

    from harness.core import problems, solutions
    from harness.core.problems import construct, load_module, make_inputs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--problems", nargs="*", default=["2", "5", "16", "36", "91", "93"])
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "solutions" / "conv_transpose2d_fused" / "_shared"))
    from ct2d_fused import SplitConv

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def timed(model, x) -> float:
        times = []
        for _ in range(args.calls):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    print("| problem | phase kernel ms | split ms | phase / split | max abs difference | split plan |")
    print("|---|---|---|---|---|---|")
    for problem in problems.select("conv_transpose2d_fused"):
        pid = problem.id.split("_")[0]
        if pid not in args.problems:
            continue
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        sol = next(s for s in solutions.for_problem(problem) if s.name == "fast")
        model = construct(load_module(sol.path, prefix="kb_solution").ModelNew, init, 0, "cuda")
        [x] = make_inputs(mod, 1, "cuda")
        fast = model.fast
        split = SplitConv(fast.conv_transpose2d, fast.epilogue, fast.epilogue_args, fast.sign)
        extra = getattr(model, "bias", None) if "extra_bias" in Path(sol.path).read_text() else None
        with torch.no_grad():
            plan = split.plan(x, extra_bias=extra)
            a = model(x).clone()
            model.fast = split
            b = model(x)
            diff = (a - b).abs().max().item()
            phase_ms, split_ms = [], []
            for _ in range(args.rounds):
                model.fast = fast
                phase_ms.append(timed(model, x))
                model.fast = split
                split_ms.append(timed(model, x))
        ph, sp = statistics.median(phase_ms), statistics.median(split_ms)
        print(f"| {pid} | {ph:.3f} | {sp:.3f} | {ph / sp:.2f}x | {diff:.2e} | {plan.config} |", flush=True)
        del model, x, a, b
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
