"""42 and 44 (the fused family's exact algebra) timed three ways on their benchmark inputs: the
problem's reference, the fast solution with the algebra as PyTorch operators in place of its kernels
(ct2d_means.channel_means: a dozen operators) and the fast solution as it is
(ct2d_means.channel_means_fused, means.cu: two kernels); outputs compared; CUDA events, L2 flushed
before each call, median of --calls calls in --rounds alternating rounds. Needs a GPU. The reference
runs under PyTorch's defaults (cuDNN's TF32 on); the harness times 42's and 44's with TF32 off, so
their speedups there are larger.

    PYTHONPATH=. python tools/bench_means.py [--calls 50] [--rounds 5]

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
    import torch

    import ct2d_means
    from harness.core import problems, solutions
    from harness.core.problems import construct, load_module, make_inputs

    args = bench_arguments(__doc__, 50, 5).parse_args(argv)
    timed = FlushedTimer(args.calls)

    print("| problem | reference ms | channel_means ms | channel_means_fused ms | max abs difference |")
    print("|---|---|---|---|---|")
    for problem in problems.select("conv_transpose2d_fused"):
        if problem.id.split("_")[0] not in ("42", "44"):
            continue
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        torch.manual_seed(0)
        ref = mod.Model(*init).cuda()
        sol = next(s for s in solutions.for_problem(problem) if s.name == "fast")
        smod = load_module(sol.path, prefix="kb_solution")
        model = construct(smod.ModelNew, init, 0, "cuda")
        [x] = make_inputs(mod, 1, "cuda")
        fused_way = smod.channel_means_fused

        def torch_way(x_, conv, alpha=1.0):
            return ct2d_means.channel_means(x_, conv) * alpha

        with torch.no_grad():
            a = model(x).clone()
            smod.channel_means_fused = torch_way
            diff = (model(x) - a).abs().max().item()
            ms = {"reference": [], "torch": [], "fused": []}
            for _ in range(args.rounds):
                ms["reference"].append(timed(ref, x))
                smod.channel_means_fused = torch_way
                ms["torch"].append(timed(model, x))
                smod.channel_means_fused = fused_way
                ms["fused"].append(timed(model, x))
        med = {k: statistics.median(v) for k, v in ms.items()}
        print(f"| {problem.id.split('_')[0]} | {med['reference']:.3f} | {med['torch']:.3f} | {med['fused']:.3f} | "
              f"{diff:.2e} |", flush=True)
        del model, ref, x
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
