"""19's tail (GELU, then GroupNorm) two ways on the convolution's output at 19's benchmark shape
(a random y of that shape, [128, 64, 258, 258]): tails.cu's one kernel (y read from DRAM once;
the solution's path) and its two passes (statistics, then the normalization); CUDA events, L2
flushed before each call, median of --calls calls in --rounds alternating rounds; the outputs
compared. Needs a GPU.

    PYTHONPATH=. python tools/bench_tails.py [--calls 20] [--rounds 3]

A decision aid for issue 48 (docs/perf-notes.md, "The fused family"); a solution's speed is the
harness's number.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "solutions" / "conv_transpose2d_fused" / "_shared"))

from flushed_timing import FlushedTimer, bench_arguments  # noqa: E402


def main(argv=None) -> int:
    args = bench_arguments(__doc__, 20, 3).parse_args(argv)
    import torch

    from ct2d_tails import tails   # built on import
    timed = FlushedTimer(args.calls)
    torch.manual_seed(0)
    y = torch.randn(128, 64, 258, 258, device="cuda")
    weight, bias = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    ways = {"one kernel": tails.gelu_group_norm, "two passes": tails.gelu_group_norm_two_pass}
    with torch.no_grad():
        outs = {name: fn(y.clone(), 8, weight, bias, 1e-5) for name, fn in ways.items()}
        diff = (outs["one kernel"] - outs["two passes"]).abs().max().item()
        del outs
        work = y.clone()
        ms = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, fn in ways.items():   # in place on a scratch copy: the time is the same whatever it holds
                ms[name].append(timed(fn, work, 8, weight, bias, 1e-5))
    gb = 2 * y.numel() * 4 / 1e9
    print(f"y {tuple(y.shape)} ({y.numel() * 4 / 1e9:.2f} GB); max abs difference between the ways: {diff:.2e}")
    print("| way | ms | GB/s for one read and one write |")
    print("|---|---|---|")
    for name in ways:
        t = statistics.median(ms[name])
        print(f"| {name} | {t:.3f} | {gb / t * 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
