"""A/B of source variants of the fast kernels (solutions/conv_transpose2d/_shared/fast.cu) in one
process, interleaved: each variant is built with load_inline (in parallel), then per problem every
(variant, config) pair is timed 4 times in rotation (CUDA events, L2 flushed, median reported) and
its rel L2 error against PyTorch with TF32 off is printed next to it.

    PYTHONPATH=. python tools/ab_variants.py 81,75 base other=path/to/fast.cu 'x4=OLD@@NEW' [--configs 0,9]
        [--solution fast_fp32]

A variant is `base` (the file as it is), `NAME=PATH` (another copy of fast.cu, e.g. from
`git show REV:solutions/conv_transpose2d/_shared/fast.cu`) or `NAME=OLD@@NEW` (base with the exact
string OLD replaced by NEW; it must occur). --configs: the `config` values to run each variant
with (see fast.cu). Each call is the `fast` solution's own forward (weights packed once) with
the variant's extension swapped in; --solution names another solution of the problem built on
ct2d_fast (e.g. fast_fp32).
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from harness import problems, solutions
from harness.problems import construct, load_module, make_inputs
from tools.bench_fast import timed

SHARED = Path("solutions/conv_transpose2d/_shared")


def variant_source(spec: str, base: str) -> tuple[str, str]:
    if spec == "base":
        return "base", base
    name, _, rest = spec.partition("=")
    if "@@" in rest:
        old, new = rest.split("@@", 1)
        if old not in base:
            sys.exit(f"variant {name}: the string to replace does not occur in fast.cu: {old!r}")
        return name, base.replace(old, new)
    if not os.path.isfile(rest):
        sys.exit(f"variant {name}: {rest} is neither OLD@@NEW nor a file")
    return name, Path(rest).read_text()


def main(argv):
    configs, solution = [0], "fast"
    if "--solution" in argv:
        i = argv.index("--solution")
        solution = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if "--configs" in argv:
        i = argv.index("--configs")
        configs = [int(c) for c in argv[i + 1].split(",")]
        argv = argv[:i] + argv[i + 2:]
    wanted, specs = argv[0].split(","), argv[1:] or ["base"]
    sys.path.insert(0, str(SHARED))
    import ct2d_fast  # noqa: E402  (builds the base extension the solutions use)
    from torch.utils.cpp_extension import load_inline

    base = (SHARED / "fast.cu").read_text()
    sources = dict(variant_source(s, base) for s in specs)
    flags = ["-O3", "-std=c++17"] + (["-gencode=arch=compute_90a,code=sm_90a", "-DCT2D_WGMMA"] if ct2d_fast.WGMMA else [])

    def build(name):
        return name, load_inline(name=f"ct2d_ab_{name}", cpp_sources=ct2d_fast.CPP_DECL, cuda_sources=sources[name],
                                 functions=["conv_transpose2d_fast"], extra_cuda_cflags=flags)

    with ThreadPoolExecutor(len(sources)) as ex:
        exts = dict(ex.map(build, sources))
    for pid in wanted:
        [problem] = problems.select(pid)
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        ref = construct(mod.Model, init, 0, "cuda")
        inputs = make_inputs(mod, 1, "cuda")
        sol = [s for s in solutions.for_problem(problem) if s.name == solution][0]
        model = construct(load_module(sol.path, prefix="kb_solution").ModelNew, init, 0, "cuda")
        fast_module = sys.modules[type(model).forward.__module__]  # ct2d_fast: its forward calls _ext
        with torch.no_grad():
            torch.backends.cudnn.allow_tf32 = False
            truth = ref(*inputs).double()
            runs = [(name, cfg) for name in sources for cfg in configs]
            times, rel, skipped = {}, {}, []
            for rep in range(4):
                for name, cfg in runs:
                    def f(name=name, cfg=cfg):  # the solution's own forward, on this variant's build
                        fast_module._ext, model.config = exts[name], cfg
                        return model(*inputs)
                    if rep == 0:
                        try:
                            rel[(name, cfg)] = float((f().double() - truth).norm() / truth.norm())
                        except RuntimeError as e:  # e.g. a config this variant does not have
                            skipped.append(f"{name}/c{cfg}: {str(e).splitlines()[0]}")
                    if (name, cfg) in rel:
                        times.setdefault((name, cfg), []).append(timed(f))
        print(pid, " | ".join([f"{n}/c{cfg} {sorted(t)[len(t) // 2]:.4f} ms (rel {rel[(n, cfg)]:.1e})"
                               for (n, cfg), t in times.items()] + [f"skipped {s}" for s in skipped]), flush=True)
        del model, ref, inputs, truth
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
