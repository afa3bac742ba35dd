"""Quick GPU iteration for the fast ConvTranspose2d kernels (not the official measurement: that is
`python run_eval.py --problem conv_transpose2d`). For each problem: rel L2 of each solution vs
PyTorch with TF32 off, and CUDA-event medians (L2 flushed) of PyTorch default, PyTorch TF32-off
and the solutions, all in this one process.

    PYTHONPATH=. python tools/bench_fast.py [problem-number ...]
"""
import os
import sys

import torch

from harness.core import problems, solutions
from harness.core.config import load_config
from harness.core.problems import construct, extra_shapes_for, load_module, make_inputs
from harness.verdict.timing import CudaEventTimer, StoppingRule, sample, summarize


# BENCH_CONFIGS=1,2,3 also times each forced tiling of the kernel the problem runs (for the phase
# kernel: its CUDA-core variant); 4, 5, 6 force the mma.sync, one-warpgroup wgmma and
# warp-specialized wgmma kernels on stride 1; 7 the phase kernel's tensor-core variant sized for two
# blocks per SM instead of three; 8 the warp-specialized wgmma kernel with its consumers on pixel
# halves (see fast/dispatch.cu)
CONFIGS = [int(c) for c in os.environ.get("BENCH_CONFIGS", "").split(",") if c]


def timed(fn, rule=StoppingRule(5, 30, 0.2, 3.0)):
    timer = CudaEventTimer("cuda", True)
    return summarize(sample(fn, timer, rule, 3), timer.name).median_ms


def check_extra_shapes(problem, mod):
    """Worst rel L2 / max abs error vs float64 over the config's extra shapes (the harness checks
    these too; this is the quick look)."""
    cfg = load_config("configs/default.yaml")
    originals = {k: getattr(mod, k) for k in dir(mod) if not k.startswith("_")}
    for shape in extra_shapes_for(problem, cfg.correctness.extra_shapes):
        for k, v in shape.items():
            setattr(mod, k, v)
        init = list(mod.get_init_inputs())
        ref = construct(mod.Model, init, 0, "cuda").double()
        inputs = make_inputs(mod, 2, "cuda")
        truth = ref(*[x.double() for x in inputs])
        for sol in solutions.for_problem(problem):
            smod = load_module(sol.path, prefix="kb_solution")
            out = construct(smod.ModelNew, init, 0, "cuda")(*inputs).double()
            rel = float((out - truth).norm() / truth.norm())
            print(f"   extra {shape}: {sol.name} rel_l2 {rel:.2e} max_abs {float((out - truth).abs().max()):.2e}")
        for k, v in originals.items():
            setattr(mod, k, v)


def main(argv):
    wanted = set(argv)
    torch.cuda.set_device(0)
    for problem in problems.select("conv_transpose2d"):
        torch.cuda.synchronize()
        if wanted and problem.id.split("_")[0] not in wanted:
            continue
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        ref = construct(mod.Model, init, 0, "cuda")
        inputs = make_inputs(mod, 1, "cuda")
        with torch.no_grad():
            torch.backends.cudnn.allow_tf32 = False
            truth = ref(*inputs)
            t_fp32 = timed(lambda: ref(*inputs))
            torch.backends.cudnn.allow_tf32 = True
            t_def = timed(lambda: ref(*inputs))
            row = [problem.id.split("_")[0], f"ref {t_def:.3f}", f"ref_fp32 {t_fp32:.3f}"]
            for sol in solutions.for_problem(problem):
                if sol.name == "direct":
                    continue
                smod = load_module(sol.path, prefix="kb_solution")
                model = construct(smod.ModelNew, init, 0, "cuda")
                out = model(*inputs)
                rel = float((out.double() - truth.double()).norm() / truth.double().norm())
                t = timed(lambda: model(*inputs))
                row.append(f"{sol.name} {t:.3f} ms rel_l2 {rel:.2e} x{t_def / t:.2f} (fp32 x{t_fp32 / t:.2f})")
                c = model.conv_transpose2d
                mma = c.stride == (1, 1) and c.groups == 1  # else the phase kernel
                for cfg in CONFIGS if getattr(model, "split", 0) == 1 else ():
                    if mma and cfg in (1, 2) and c.out_channels % 64:
                        continue
                    model.config = cfg  # tiling forced (tuning); 0 = automatic
                    try:
                        out = model(*inputs)
                    except RuntimeError as e:
                        row.append(f"cfg{cfg} {str(e).splitlines()[0]}")
                        continue
                    rel = float((out.double() - truth.double()).norm() / truth.double().norm())
                    t = timed(lambda: model(*inputs))
                    row.append(f"cfg{cfg} {t:.3f} rel {rel:.1e}")
                del model, out
            print(" | ".join(row), flush=True)
            check_extra_shapes(problem, mod)
            del ref, inputs, truth
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
