"""The fused family's strided problems, each fast solution's model with its convolution run up to
six ways: the library's phase kernel (ct2d_fused.FastConv), stride-1 phase convolutions interleaved
(SplitConv), one implicit GEMM per phase (StridedConv, sphase.cu) with x staged by 4-byte and by
16-byte copies, and on persistent blocks with a two-stage ring (ct2d_spp), and one stride-1
convolution of every phase's channels interleaved (SubpixelConv: z's width rounded up to a
multiple of 4; subpixel2: of 2; subpixel1: not rounded; subpixel16: z in fp16, only where the
epilogue saturates, else '-'), on the benchmark input, the
outputs compared with the first way's, each timed by CUDA events (median of --calls calls, L2
flushed before each), alternating in rounds. Needs a GPU.

    PYTHONPATH=. python tools/bench_strided.py [--calls 30] [--rounds 5] [--problems 2 5 16 36 91 93]
        [--ways phase split strided strided16 persistent16 subpixel subpixel2 subpixel1 subpixel16] [--kernels]

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


from flushed_timing import FlushedTimer  # noqa: E402


def kernel_times(model, x, label, calls=5):
    """Each kernel's CUDA time per call of model(x) (the profiler over `calls` calls), printed."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                model(x)
            torch.cuda.synchronize()
    events = sorted((e for e in prof.key_averages() if e.device_time_total > 0), key=lambda e: -e.device_time_total)
    total = sum(e.device_time_total for e in events) / calls / 1000
    print(f"  {label}: {total:.3f} ms of kernels per call")
    for e in events:
        name = e.key.replace("(anonymous namespace)::", "").split("(")[0]
        print(f"    {e.device_time_total / calls / 1000:8.3f} ms  x{e.count // calls}  {name[:100]}")


def main(argv=None) -> int:
    import torch

    from harness.core import problems, solutions
    from harness.core.problems import construct, load_module, make_inputs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--problems", nargs="*", default=["2", "5", "16", "36", "91", "93"])
    keys = ["phase", "split", "strided", "strided16", "persistent16", "subpixel", "subpixel2", "subpixel1", "subpixel16"]
    p.add_argument("--ways", nargs="*", default=keys, choices=keys)
    p.add_argument("--kernels", action="store_true",
                   help="after each problem's row, each way's kernels: CUDA time per call (profiler, 5 calls)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "solutions" / "conv_transpose2d_fused" / "_shared"))
    from ct2d_fused import FastConv, SplitConv, StridedConv, SubpixelConv, channel_block_min

    timed = FlushedTimer(args.calls)

    def way(base, **attrs):
        """base with StridedConv's attributes set, and channel_min (36) by a pass of its own where
        base writes the convolution."""
        def call(self, x, extra_bias=None, channel_min=False):
            if base in (StridedConv, SubpixelConv):
                return base.__call__(self, x, extra_bias, channel_min)
            y = base.__call__(self, x, extra_bias)
            return channel_block_min(y) if channel_min else y
        return type(base.__name__, (base,), dict(attrs, __call__=call))

    class Subpixel16(way(SubpixelConv)):
        def __init__(self, *args):  # ValueError where the epilogue does not saturate: the way is skipped
            super().__init__(*args, z_fp16=True)

    every = {"phase": ("phase kernel", way(FastConv)), "split": ("split", way(SplitConv)),
             "strided": ("strided", way(StridedConv, staging=4, persistent=False)),
             "strided16": ("strided 16-byte staging", way(StridedConv, staging=16, persistent=False)),
             "persistent16": ("strided persistent 16-byte", way(StridedConv, staging=16, persistent=True)),
             "subpixel": ("subpixel", way(SubpixelConv)),
             "subpixel2": ("subpixel, z width even", way(SubpixelConv, z_align=2)),
             "subpixel1": ("subpixel, z unpadded", way(SubpixelConv, z_align=1)),
             "subpixel16": ("subpixel, z fp16", Subpixel16)}
    ways = dict(every[k] for k in args.ways)
    first = next(iter(ways))
    print("| problem | " + " | ".join(f"{w} ms" for w in ways) + f" | max abs difference from {first} | plans |")
    print("|---|" + "---|" * (len(ways) + 2))
    for problem in problems.select("conv_transpose2d_fused"):
        pid = problem.id.split("_")[0]
        if pid not in args.problems:
            continue
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        sol = next(s for s in solutions.for_problem(problem) if s.name == "fast")
        model = construct(load_module(sol.path, prefix="kb_solution").ModelNew, init, 0, "cuda")
        [x] = make_inputs(mod, 1, "cuda")
        f = model.fast
        convs = {}
        for w, cls in ways.items():
            try:
                convs[w] = cls(f.conv_transpose2d, f.epilogue, f.epilogue_args, f.sign)
            except ValueError:  # z in fp16 with an epilogue that does not saturate
                pass
        extra = getattr(model, "bias", None) if "extra_bias" in Path(sol.path).read_text() else None
        with torch.no_grad():
            plans = "; ".join(f"{w}: {conv.plan(x, extra_bias=extra).config}" for w, conv in convs.items() if w != "phase kernel")
            outs, times = {}, {w: [] for w in ways}
            for w, conv in convs.items():
                model.fast = conv
                outs[w] = model(x).clone()
            diffs = [(outs[w] - outs[first]).abs().max().item() if w in outs else None for w in ways if w != first]
            del outs
            for _ in range(args.rounds):
                for w, conv in convs.items():
                    model.fast = conv
                    times[w].append(timed(model, x))
        ms = " | ".join(f"{statistics.median(times[w]):.3f}" if times[w] else "-" for w in ways)
        print(f"| {pid} | {ms} | {', '.join(f'{d:.2e}' if d is not None else '-' for d in diffs)} | {plans} |",
              flush=True)
        if args.kernels:
            for w, conv in convs.items():
                model.fast = conv
                kernel_times(model, x, f"{pid} {w}")
        del model, x
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
