"""A/B of source variants of the fast kernels (solutions/conv_transpose2d/_shared/fast/) in one
process, interleaved: each variant is built with load_inline (in parallel), then per problem every
(variant, config) pair is timed 4 times in rotation (CUDA events, L2 flushed, median reported) and
its rel L2 error against PyTorch with TF32 off is printed next to it.

    PYTHONPATH=. python tools/ab_variants.py 81,75 base other=path/to/fast 'x4=OLD@@NEW' [--configs 0,9]
        [--solution fast_fp32] [--dtype bfloat16]

A variant is `base` (fast/ as it is: the solutions' own build, not built again), `NAME=DIR` (another copy of the fast/ folder, e.g. from
`git archive REV solutions/conv_transpose2d/_shared/fast | tar -x`), `NAME=FILE` (one source file
built alone, e.g. the single fast.cu of a revision before the split) or `NAME=OLD@@NEW` (base with
the exact string OLD replaced by NEW in the one file of fast/ that holds it). --configs: the
`config` values to run each variant with (fast/dispatch.cu names them). Each call is the `fast`
solution's own forward (weights packed once) with the variant's extension swapped in; --solution
names another solution of the problem built on ct2d_fast (e.g. fast_fp32); --dtype casts inputs,
model and reference as a half-precision run does (e.g. bfloat16 with --solution fast_bf16), the rel
error then against the reference in float64 on the same rounded inputs and weights.
"""
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from harness.core import problems, solutions
from harness.core.problems import construct, load_module, make_inputs
from tools.bench_fast import timed

SHARED = Path("solutions/conv_transpose2d/_shared")
SINGLE = "fast.cu"  # the key of a one-file variant


def folder_files(folder: Path) -> dict[str, str]:
    return {f.name: f.read_text() for f in sorted(Path(folder).iterdir()) if f.is_file()}


def variant_source(spec: str, base: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The variant's files by name (base: fast/'s files); a one-file variant is {SINGLE: text}."""
    if spec == "base":
        return "base", base
    name, _, rest = spec.partition("=")
    if "@@" in rest:
        old, new = rest.split("@@", 1)
        holders = [f for f, text in base.items() if old in text]
        if len(holders) != 1:
            where = "does not occur in fast/" if not holders else f"occurs in more than one file: {', '.join(holders)}"
            sys.exit(f"variant {name}: the string to replace {where}: {old!r}")
        return name, {**base, holders[0]: base[holders[0]].replace(old, new)}
    if os.path.isdir(rest):
        return name, folder_files(Path(rest))
    if not os.path.isfile(rest):
        sys.exit(f"variant {name}: {rest} is neither OLD@@NEW, a folder nor a file")
    return name, {SINGLE: Path(rest).read_text()}


def variant_arity(files: dict[str, str], full: int) -> int:
    """How many of the entry point's arguments (ct2d_fast._ARGS, `full` of them) the variant's
    source takes: a revision's CT2D_ARGS may end earlier (before the epilogue's three, before
    out_fp16), or its one file may declare the function itself."""
    for text in files.values():
        m = re.search(r"#define CT2D_ARGS((?:.*\\\n)*.*)", text) or re.search(
            r"torch::Tensor conv_transpose2d_fast\(([^)]*)\)\s*\{", text)
        if m:
            return m.group(1).count(",") + 1
    return full


class Truncated:
    """A variant whose entry point takes the first `n` arguments only: called with the whole list,
    the rest must be their defaults (0: no epilogue, fp32 output), else the call is refused."""

    def __init__(self, ext, n: int):
        self.ext, self.n = ext, n

    def _first(self, args: tuple, n: int) -> tuple:
        if any(args[n:]):
            raise RuntimeError(f"this variant takes {self.n} arguments; the call sets a later one")
        return args[:n]

    def conv_transpose2d_fast(self, *args):
        return self.ext.conv_transpose2d_fast(*self._first(args, self.n))

    def Bound(self, *static):  # noqa: N802 (the extension's name): every argument but x
        return self.ext.Bound(*self._first(static, self.n - 1))


def build_variant(name: str, files: dict[str, str], ct2d_fast, flags: list[str]):
    """load_inline of a variant: its files written to a folder and built as ct2d_fast builds fast/
    (cuda_source, the folder on the include path), or the one file alone; bound as ct2d_fast binds
    it (binding_source: the entry point and its Bound, without plan, which a revision may lack), with
    as many of the entry point's arguments as its source takes (variant_arity)."""
    from torch.utils.cpp_extension import load_inline
    include = []
    if SINGLE in files:
        source = files[SINGLE]
    else:
        folder = Path(tempfile.mkdtemp(prefix=f"ct2d_ab_{name}_"))
        for fname, text in files.items():
            (folder / fname).write_text(text)
        source, include = ct2d_fast.cuda_source(folder), [str(folder)]
    params = ct2d_fast.arg_list()
    n = variant_arity(files, len(params))
    args = ", ".join(f"{t} {a}" for t, a in params[:n])
    ext = load_inline(name=f"ct2d_ab_{name}", cpp_sources=ct2d_fast.binding_source(args, plan=False),
                      cuda_sources=source, extra_include_paths=include, extra_cuda_cflags=flags)
    return ext if n == len(params) else Truncated(ext, n)


def take_option(argv: list[str], name: str, default):
    """(the value after `name` in argv, or default; argv without the two)."""
    if name not in argv:
        return default, argv
    i = argv.index(name)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv):
    dtype, argv = take_option(argv, "--dtype", None)
    solution, argv = take_option(argv, "--solution", "fast")
    configs, argv = take_option(argv, "--configs", "0")
    configs = [int(c) for c in configs.split(",")]
    wanted, specs = argv[0].split(","), argv[1:] or ["base"]
    sys.path.insert(0, str(SHARED))
    import ct2d_fast  # noqa: E402  (builds the base extension the solutions use)

    base = folder_files(ct2d_fast.FAST_DIR)
    sources = dict(variant_source(s, base) for s in specs)
    flags = ["-O3", "-std=c++17"] + (["-gencode=arch=compute_90a,code=sm_90a", "-DCT2D_WGMMA"] if ct2d_fast.WGMMA else [])

    def build(name):  # base: the extension the solutions use, already built by the import above
        return name, ct2d_fast._ext if sources[name] is base else build_variant(name, sources[name], ct2d_fast, flags)

    with ThreadPoolExecutor(len(sources)) as ex:
        exts = dict(ex.map(build, sources))
    for pid in wanted:
        [problem] = problems.select(pid)
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        ref = construct(mod.Model, init, 0, "cuda", dtype=dtype)
        inputs = make_inputs(mod, 1, "cuda", dtype=dtype)
        sol = [s for s in solutions.for_problem(problem) if s.name == solution][0]
        model = construct(load_module(sol.path, prefix="kb_solution").ModelNew, init, 0, "cuda", dtype=dtype)
        fast_module = sys.modules[type(model).forward.__module__]  # ct2d_fast: its forward calls _ext
        with torch.no_grad():
            torch.backends.cudnn.allow_tf32 = False
            truth = ref.double()(*[t.double() for t in inputs]) if dtype else ref(*inputs).double()
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
