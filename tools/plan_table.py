"""The table of the fast kernels (docs/problems-and-solutions.md): per conv_transpose2d problem and class, the kernel that
runs (FastConvTranspose2d.plan on the benchmark input: the same rule the call follows), where it
lives, its tiles, and how far the measured time is from the problem's floor. Needs a GPU for the
plans; the times come from result files.

    PYTHONPATH=. python tools/plan_table.py RESULT_DIR [RESULT_DIR ...] [--out docs/kernels.md]
    PYTHONPATH=. python tools/plan_table.py --family conv_transpose2d_fused RESULT_DIR [--out FILE]

The floor is max(FLOP / peak, bytes / bandwidth) for the class on the GPU (defaults: an H200):
FLOP = 2 N Cin (Cout / groups) Hin Win KH KW; bytes = x, the weights and y once each, 4 bytes an
element (2 for bf16). Peaks, dense: TF32 495 TFLOP/s (tf32 class); 330 for the fp32 class (its
kernels run three fp16 or TF32 products per product on the tensor cores: the fp16 rate, 989, over
3); bf16 989. Bandwidth 4.3 TB/s, the measured copy rate (../shared/FACTS.md). A floor under
LAUNCH_MS is below what one launch costs: the problem is launch-bound and gets no ratio.

The fused family (KernelBench level 2, fast solutions only, TF32 class): what runs (the library's
plan, with its epilogue, and the tail of ct2d_tails.py the solution calls, or the exact algebra),
PyTorch's time and the speedup in the same run, and the floor of the problem: the convolution's
FLOP (none where exact algebra removes it: 42, 44) against x, the weights and the final output
once each, so a tail that reads back the convolution's output is counted above the floor.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOLUTIONS = {"fast": "tf32", "fast_fp32": "fp32", "fast_bf16": "bf16"}
PEAK_TFLOPS = {"tf32": 495.0, "fp32": 989.0 / 3, "bf16": 989.0}
BANDWIDTH_TBS = 4.3
LAUNCH_MS = 0.01


def floor_ms(init: list, x_shape: tuple, out_shape: tuple, cls: str, bandwidth: float = BANDWIDTH_TBS) -> float:
    """The class's floor for one call, in ms (init: the problem's get_init_inputs)."""
    cin, cout, k = init[0], init[1], init[2]
    kh, kw = (k, k) if isinstance(k, int) else k
    groups = init[7] if len(init) > 7 else 1
    n, _, h, w = x_shape
    flop = 2.0 * n * cin * (cout // groups) * h * w * kh * kw
    elems = n * cin * h * w + cin * (cout // groups) * kh * kw
    elems_out = 1
    for d in out_shape:
        elems_out *= d
    size = 2 if cls == "bf16" else 4
    return roofline_ms(flop, (elems + elems_out) * size, cls, bandwidth)


def roofline_ms(flop: float, nbytes: float, cls: str, bandwidth: float = BANDWIDTH_TBS) -> float:
    """max(FLOP at the class's dense peak, bytes at the bandwidth), in ms."""
    return max(flop / (PEAK_TFLOPS[cls] * 1e9), nbytes / (bandwidth * 1e9))


_T0 = time.monotonic()


def progress(what: str) -> None:
    """One line on stderr per step, with the seconds since start: where a slow run spends them."""
    print(f"plan_table: {what} at {time.monotonic() - _T0:.1f} s", file=sys.stderr, flush=True)


def shapes(mod, init: list) -> tuple[tuple, tuple]:
    """(x shape, y shape) of a problem's benchmark call, from its reference on the meta device
    (no data, no GPU)."""
    import torch
    x = mod.get_inputs()[0]
    with torch.device("meta"):
        y = mod.Model(*init).to("meta")(x.to("meta"))
    return tuple(x.shape), tuple(y.shape)


def newest_ok(dirs: list[str]) -> dict:
    """(problem id, solution) -> the newest ok result with a timing, over the folders."""
    from harness.core.store import load_run
    found = {}
    for d in dirs:
        for r in load_run(d):
            if r.status.value != "ok" or not r.timing.get("solution"):
                continue
            key = (r.problem["id"], r.solution["name"])
            if key not in found or (r.finished_at or "") > (found[key].finished_at or ""):
                found[key] = r
    return found


def measured(dirs: list[str]) -> dict:
    """(problem id, solution) -> (median ms, GPU name, finished at), the newest ok result of each."""
    return {k: (r.timing["solution"]["median_ms"], r.env.get("gpu_name", ""), r.finished_at or "")
            for k, r in newest_ok(dirs).items()}


def rows(times: dict) -> list[dict]:
    import torch

    from harness.core import problems, solutions
    from harness.core.problems import construct, load_module, make_inputs

    out = []
    for problem in problems.select("conv_transpose2d"):
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        x_shape, y_shape = shapes(mod, init)
        for sol in solutions.for_problem(problem):
            if sol.name not in SOLUTIONS:
                continue
            cls = SOLUTIONS[sol.name]
            dtype = "bfloat16" if cls == "bf16" else None  # cast as a bf16 run casts (harness.core.problems)
            model = construct(load_module(sol.path, prefix="kb_solution").ModelNew, init, 0, "cuda", dtype=dtype)
            [x] = make_inputs(mod, 1, "cuda", dtype=dtype)
            with torch.no_grad():
                plan = model.plan(x)
            floor = floor_ms(init, x_shape, y_shape, cls)
            ms, gpu, _ = times.get((problem.id, sol.name), (None, "", ""))
            out.append({"problem": problem.id.split("_")[0], "class": cls, "solution": sol.name,
                        "kernel": plan.kernel, "file": plan.file, "config": plan.config, "io": plan.io,
                        "ms": ms, "gpu": gpu, "floor_ms": floor, "x_floor": ms / floor if ms else None})
            del model, x
            torch.cuda.empty_cache()
            progress(f"{problem.id} {sol.name} planned")
    return out


def markdown(table: list[dict]) -> str:
    lines = ["| problem | class | kernel | file | tiles and pipeline | ms | floor ms | x floor |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        ms = f"{r['ms']:.3f}" if r["ms"] else "-"
        launch = r["floor_ms"] < LAUNCH_MS
        floor = "launch-bound" if launch else f"{r['floor_ms']:.3f}"
        xf = f"{r['x_floor']:.2f}x" if r["x_floor"] and not launch else "-"
        io = "" if r["io"] in ("fp32", "bf16") else f" ({r['io']})"
        lines.append(f"| {r['problem']} | {r['class']} | `{r['kernel']}`{io} | `fast/{r['file']}` | {r['config']} | "
                     f"{ms} | {floor} | {xf} |")
    return "\n".join(lines) + "\n"


ALGEBRA = {"42", "44"}  # fused problems whose solution computes no convolution


def fused_timings(dirs: list[str]) -> dict:
    """problem id -> (solution ms, PyTorch ms, speedup, its interval, GPU name), the newest ok fast result."""
    out = {}
    for (pid, name), r in newest_ok(dirs).items():
        t = r.timing
        if name == "fast" and "speedup" in t:
            out[pid] = (t["solution"]["median_ms"], t[t["baseline"]]["median_ms"], t["speedup"], t.get("speedup_ci"),
                        r.env.get("gpu_name", ""))
    return out


def fused_rows(times: dict) -> list[dict]:
    import re

    import torch

    from harness.core import problems, solutions
    from harness.core.problems import construct, load_module, make_inputs

    out = []
    for problem in problems.select("conv_transpose2d_fused"):
        mod = load_module(problem.path)
        init = list(mod.get_init_inputs())
        with torch.device("meta"):
            ref = mod.Model(*init)
            x = mod.get_inputs()[0]
            y = ref(x)
        conv = next(m for m in ref.modules() if isinstance(m, torch.nn.ConvTranspose2d))
        n, cin, h, w = x.shape
        kh, kw = conv.kernel_size
        pid = problem.id.split("_")[0]
        flop = 0.0 if pid in ALGEBRA else 2.0 * n * cin * (conv.out_channels // conv.groups) * h * w * kh * kw
        nbytes = 4.0 * (x.numel() + conv.weight.numel() + y.numel())
        floor = roofline_ms(flop, nbytes, "tf32")
        sol = next(s for s in solutions.for_problem(problem) if s.name == "fast")
        text = Path(sol.path).read_text()
        progress(f"{problem.id}: loading its fast solution (its extensions build or load)")
        model = construct(load_module(sol.path, prefix="kb_solution").ModelNew, init, 0, "cuda")
        [xc] = make_inputs(mod, 1, "cuda")
        if hasattr(model, "fast"):
            kwargs = {"extra_bias": getattr(model, "bias", None) if "extra_bias" in text else None}
            if "channel_min=True" in text:
                kwargs["channel_min"] = True
            with torch.no_grad():
                plan = model.fast.plan(xc, **kwargs)
            runs = f"`{plan.kernel}` ({what_runs(plan.config)})"
            tail = re.search(r"tails\.(\w+)\(", text)
            if tail:
                runs += f", then `{tail.group(1)}` (ct2d_tails.py)"
        else:
            runs = ("exact algebra (ct2d_means.py): `window_sums_kernel` (means.cu: x's sums over each tap's rows and "
                    "columns, one pass) then `contract_means_kernel` (with the weight and the bias), no convolution"
                    if "channel_means_fused" in text else "exact algebra (ct2d_means.py): reductions of x, no convolution")
        ms, torch_ms, speedup, ci, gpu = times.get(problem.id, (None, None, None, None, ""))
        out.append({"problem": pid, "runs": runs, "flop": flop, "bytes": nbytes, "floor_ms": floor, "ms": ms,
                    "torch_ms": torch_ms, "speedup": speedup, "ci": ci, "gpu": gpu,
                    "x_floor": ms / floor if ms else None})
        del model, xc
        torch.cuda.empty_cache()
        progress(f"{problem.id} planned")
    return sorted(out, key=lambda r: int(r["problem"]))


def what_runs(config: str) -> str:
    """A plan's config for the fused table: its first clause (the tiles) and the clauses that say
    what the output becomes (the epilogue and its store, z's type, a kernel that follows), without
    the pipeline's details (stages, consumers)."""
    clauses = [c.strip() for c in config.split(";")]
    keep = [c for c in clauses[1:] if c.startswith(("epilogue", "z in", "then ")) or "in the store" in c]
    return "; ".join(clauses[:1] + keep)


def fused_markdown(table: list[dict]) -> str:
    import math
    lines = ["| problem | what runs | GFLOP | MB | floor ms | ms | x floor | PyTorch ms | speedup [95% interval] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        f3 = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        if r["ci"]:
            sp += f" [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
        xf = f"{r['x_floor']:.2f}x" if r["x_floor"] else "-"
        lines.append(f"| {r['problem']} | {r['runs']} | {r['flop'] / 1e9:.1f} | {r['bytes'] / 1e6:.0f} | "
                     f"{f3(r['floor_ms'])} | {f3(r['ms'])} | {xf} | {f3(r['torch_ms'])} | {sp} |")
    speedups = [r["speedup"] for r in table if r["speedup"]]
    if speedups:
        geo = math.exp(sum(math.log(v) for v in speedups) / len(speedups))
        lines.append(f"\ngeometric mean speedup over {len(speedups)} problems: {geo:.2f}x\n")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="result folders whose times fill the ms column")
    p.add_argument("--out", help="also write the markdown table into this file, between the family's markers")
    p.add_argument("--family", choices=("conv_transpose2d", "conv_transpose2d_fused"), default="conv_transpose2d")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "solutions" / "conv_transpose2d" / "_shared"))
    if args.family == "conv_transpose2d_fused":
        table = fused_rows(fused_timings(args.results))
        text = fused_markdown(table)
    else:
        table = rows(measured(args.results))
        text = markdown(table)
    gpus = sorted({r["gpu"] for r in table if r["gpu"]})
    print(text + f"\ntimes measured on: {', '.join(gpus) or 'none found'}")
    if args.out:
        write_section(Path(args.out), args.family, text)
    return 0


def write_section(path: Path, family: str, text: str) -> None:
    """Put the family's table between its markers in the file (docs/kernels.md holds both
    families' tables), the rest of the file as it was; a file without them gets them appended."""
    begin, end = f"<!-- plan_table {family} -->\n", f"<!-- /plan_table {family} -->\n"
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + begin + text + end + rest.split(end, 1)[1]
    else:
        new = old + ("\n" if old and not old.endswith("\n\n") else "") + begin + text + end
    path.write_text(new)


if __name__ == "__main__":
    sys.exit(main())
