"""Run each named problem's `fast` solution twice (construction + warm-up + one more call), for
Nsight Compute to profile one launch:

    PYTHONPATH=. ncu --kernel-name regex:ct2d --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats python tools/ncu_probe.py 81

FAST_CONFIG=1..3 forces the kernel tiling (the phase kernel's CUDA-core variant), 4..6 and 8 the
stride-1 tensor-core kernel, 7 the phase kernel's tensor-core variant at two blocks per SM, 9 a bf16
call's bf16 MMAs (see fast/dispatch.cu). FAST_SOLUTION names another solution built on ct2d_fast
(e.g. fast_bf16) and FAST_DTYPE casts the model and x as a half-precision run does (bf16 or bfloat16, fp16 or float16):

    FAST_SOLUTION=fast_bf16 FAST_DTYPE=bf16 FAST_CONFIG=9 PYTHONPATH=. ncu ... python tools/ncu_probe.py 57
"""
import os
import sys

import torch
from harness.core import problems, solutions
from harness.core.precision import TORCH_DTYPE
from harness.core.problems import construct, load_module, make_inputs
torch.cuda.set_device(0)
for pid in sys.argv[1:]:
    [problem] = problems.select(pid)
    mod = load_module(problem.path)
    name, dtype = os.environ.get("FAST_SOLUTION", "fast"), os.environ.get("FAST_DTYPE") or None
    dtype = TORCH_DTYPE.get(dtype, dtype)  # a torch dtype's name (bf16, fp16: the precisions')
    sol = [s for s in solutions.for_problem(problem) if s.name == name][0]
    smod = load_module(sol.path, prefix="kb_solution")
    model = construct(smod.ModelNew, list(mod.get_init_inputs()), 0, "cuda", dtype=dtype)
    model.config = int(os.environ.get("FAST_CONFIG", "0"))  # kernel tiling (see fast/dispatch.cu)
    x = make_inputs(mod, 1, "cuda", dtype)
    with torch.no_grad():
        for _ in range(2):
            model(*x)
    torch.cuda.synchronize()
    del model, x
